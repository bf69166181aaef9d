"""`specmon start`, `ps`, `stop` and `switch` as real processes, against the emulator as the server."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
from pathlib import Path

import httpx
import pytest

from specmon.ports import free_port_pair
from tests.support.oncall import gone, wait_for, write_preset

pytestmark = pytest.mark.timeout(180)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_start_ps_stop_with_json_and_private_files(oc):
    port = free_port_pair()
    started = oc.json("start", "fast-a", "--port", str(port), "--wait")
    assert started["state"] == "ready" and started["error"] is None
    assert set(started) >= {"id", "preset", "pid", "pgid", "url", "log", "started_at"}
    assert started["pid"] == started["pgid"] and started["url"] == f"http://127.0.0.1:{port}"
    assert httpx.get(started["url"] + "/health", timeout=5).status_code == 200
    state_file = oc.state / "servers" / f"{started['id']}.json"
    assert (
        mode(state_file) == 0o600 and mode(state_file.parent) == 0o700 and mode(Path(started["log"])) == 0o600
    )

    listed = oc.json("ps")["servers"]
    mine = next(s for s in listed if s["id"] == started["id"])
    assert mine["alive"] and mine["launched_by_specmon"] and mine["preset"] == "fast-a"
    assert mine["log"] == started["log"] and mine["gpu_memory_mib"] > 0

    refused = oc.run("stop", started["id"])  # stdin is not a terminal and no --yes
    assert refused.returncode == 2 and "--yes" in refused.stderr
    stopped = oc.json("stop", started["id"], "--yes")
    assert stopped["stopped"] and stopped["signal"] == "SIGTERM" and stopped["port_free"]
    assert stopped["gpus_free_s"] is not None and stopped["leftovers"] == []
    assert gone(started["pid"])
    mine = next(s for s in oc.json("ps")["servers"] if s["id"] == started["id"])
    assert not mine["alive"]


def test_start_wait_reports_a_failed_startup(oc):
    write_preset(oc.presets, "fast-oom", "demo-eagle3-10", 'emulator-fail = "oom-during-capture"')
    out = oc.json("start", "fast-oom", "--port", str(free_port_pair()), "--wait", expect=1)
    assert out["state"] == "failed" and "memory" in out["error"].lower()


def test_start_on_a_taken_port_names_the_holder(oc):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        out = oc.json("start", "fast-a", "--port", str(port), expect=1)
    assert (
        out["state"] == "failed" and f"port {port}" in out["error"] and f"pid {os.getpid()}" in out["error"]
    )
    assert oc.records() == []


def test_unknown_names_are_usage_errors(oc):
    assert oc.run("start", "no-such-preset").returncode == 2
    assert oc.run("stop", "no-such-server", "--yes").returncode == 2
    assert oc.run("switch", "no-such-preset", "--yes").returncode == 2


def test_bad_state_files_are_reported_not_raised(oc):
    servers = oc.state / "servers"
    servers.mkdir(parents=True, mode=0o700)
    (servers / "bad.json").write_text("{not json")
    (servers / "odd.json").write_text('{"id": "odd", "pid": "1"}')
    os.symlink("/etc/passwd", servers / "link.json")
    done = oc.run("ps", "--json")
    assert done.returncode == 0 and "Traceback" not in done.stderr
    assert "bad.json" in done.stderr and "odd.json" in done.stderr and "link.json" in done.stderr


def test_switch_compares_with_the_last_result_and_alerts_on_a_drop(oc, tmp_path):
    port = free_port_pair()
    first = oc.json("start", "fast-a", "--port", str(port), "--wait")
    switched = oc.json("switch", "fast-b", "--yes", "--requests", "2", "--from", first["id"])
    assert switched["state"] == "ready" and switched["previous"] is None
    done = oc.run(
        "bench",
        "--presets",
        str(oc.presets),
        "--url",
        switched["url"],
        "--preset",
        "fast-b",
        "--requests",
        "3",
        "--warmup",
        "1",
        "--max-new-tokens",
        "24",
        "--json",
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]

    # fast-b again, but its draft is now accepted far less often than when the stored result was measured.
    worse = tmp_path / "worse"
    worse.mkdir()
    write_preset(worse, "fast-b", "demo-eagle3-5", "emulator-accept-prob = 0.2")
    again = oc.json("switch", "fast-b", "--yes", "--requests", "2", "--presets", str(worse), expect=1)
    assert again["from"] == "fast-b" and again["to"] == "fast-b" and again["state"] == "ready"
    names = [s["name"] for s in again["steps"]]
    assert names == ["preflight", "stopping", "gpus free", "port free", "launching", "startup", "sanity"]
    assert all(s["took_s"] is not None and s["took_s"] >= 0 for s in again["steps"])
    assert again["previous"] is not None and again["sanity"]["requests_ok"] == 2
    assert again["change_pct"]["accept_length"] < -10
    assert any("acceptance length fell" in a for a in again["alerts"])
    assert again["effective"]["num_draft_tokens"] == 5
    assert again["url"] == f"http://127.0.0.1:{port}"
    assert gone(first["pid"])


def test_switch_while_a_benchmark_runs(oc):
    port = free_port_pair()
    first = oc.json("start", "fast-a", "--port", str(port), "--wait")
    bench = oc.popen(
        "bench",
        "--presets",
        str(oc.presets),
        "--url",
        first["url"],
        "--preset",
        "fast-a",
        "--requests",
        "200",
        "--warmup",
        "0",
        "--max-new-tokens",
        "256",
        "--json",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(lambda: "/generate" in Path(first["log"]).read_text(), what="the benchmark's first request")
    switched = oc.json("switch", "fast-b", "--yes", "--requests", "1")
    assert switched["state"] == "ready" and switched["sanity"]["requests_ok"] == 1
    assert bench.wait(timeout=120) is not None  # the benchmark ended on its own (its server went away)


def test_switch_works_with_a_shell_script_launcher(oc, tmp_path):
    script = tmp_path / "serve.sh"
    script.write_text(
        "#!/bin/sh\n# takes SGLang flags, like a site's serve script; no exec: sh stays the parent\n"
        f'"{os.sys.executable}" -m specmon.emulator "$@"\n'
    )
    script.chmod(0o700)
    write_preset(oc.presets, "fast-sh", "demo-eagle3-10", launcher=[str(script)])
    port = free_port_pair()
    first = oc.json("start", "fast-a", "--port", str(port), "--wait")
    switched = oc.json("switch", "fast-sh", "--yes", "--requests", "1", "--from", first["id"])
    assert switched["state"] == "ready", switched
    stopped = oc.json("stop", switched["id"], "--yes")
    assert stopped["stopped"] and stopped["port_free"] and stopped["leftovers"] == []
