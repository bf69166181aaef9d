"""Production traffic in `specmon monitor --once` (issue 35): a `traffic` object and a line or two of text, read
from the records of a real emulator; where a server's records are, from its own flags."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from specmon.traffic.locate import record_paths
from specmon.traffic.reader import ReadTally, read_records
from tests.emulator.test_emulator import EAGLE3, launch
from tests.traffic.test_traffic_emulator import FAST

pytestmark = pytest.mark.timeout(180)


def monitor_once(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specmon", "monitor", "--once", "--window", "1", *args],
                          capture_output=True, text=True, timeout=120)


def test_monitor_once_carries_the_traffic_of_local_records(tmp_path):
    export = tmp_path / "export"
    emu = launch(tmp_path, *EAGLE3, *FAST, "--export-metrics-to-file", "--export-metrics-to-file-dir", str(export))
    try:
        emu.wait_ready()
        for i in range(6):
            body = {"text": f"Tell me about rivers #{i}", "rid": f"req-{i}",
                    "sampling_params": {"max_new_tokens": 80 + 10 * (i % 2), "ignore_eos": True}}
            httpx.post(emu.url + "/generate", json=body, timeout=30).raise_for_status()
        run = monitor_once("--url", emu.url, "--traffic", str(export), "--by", "sampling_params.max_new_tokens", "--json")
        text = monitor_once("--url", emu.url, "--traffic", str(export))
        plain = monitor_once("--url", emu.url, "--json")
    finally:
        emu.stop()
    assert run.returncode == 0, run.stderr
    traffic = json.loads(run.stdout)["traffic"]
    records = list(read_records([str(export)], ReadTally()))
    assert traffic["requests"] == len(records) >= 6
    assert traffic["accept_length"]["token_weighted"] == pytest.approx(
        sum(r.completion_tokens for r in records) / sum(r.verify_ct for r in records))
    assert traffic["accept_length"]["ci"] is not None
    assert {c["value"] for c in traffic["classes"] if c["by"] == "sampling_params.max_new_tokens"} >= {"80", "90"}
    assert {c["by"] for c in traffic["classes"]} >= {"prompt_tokens", "completion_tokens"}
    assert traffic["skipped"] == {"count": 0, "reasons": {}} and "outliers" in traffic
    assert sum(traffic["tau_distribution"]["tokens"]) == traffic["tokens"]
    lines = [line for line in text.stdout.splitlines() if line.startswith(("traffic", "  "))]
    assert any(line.startswith("traffic, last 5 min: ") and "token-weighted" in line for line in lines), text.stdout
    assert lines and max(map(len, lines)) <= 80
    assert json.loads(plain.stdout)["traffic"] is None  # no records known: said as null, not left out


def test_a_traffic_path_that_cannot_be_read_is_said_in_the_object(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    from specmon.traffic.once import traffic_once

    result, lines = traffic_once([str(loop)])
    assert "symbolic link loop" in result["error"] and len(lines) == 1


@pytest.mark.parametrize(("argv", "log", "expected"), [
    (["--export-metrics-to-file", "--export-metrics-to-file-dir", "/r/x"], None, ["/r/x"]),
    (["--export-metrics-to-file-dir=/r/x", "--export-metrics-to-file"], None, ["/r/x"]),
    (["--export-metrics-to-file-dir", "/r/x"], None, []),  # not exported without the switch
    (["--log-requests"], "/l/server.log", ["/l/server.log"]),  # text: through the server's log
    (["--log-requests", "--log-requests-format", "json", "--log-requests-target", "/r/q"], "/l/s.log", ["/r/q"]),
    (["--log-requests", "--log-requests-format", "json", "--log-requests-target", "stdout", "/r/q", "--port", "1"],
     "/l/s.log", ["/r/q", "/l/s.log"]),
    (["--log-requests", "--log-requests-target", "rel"], None, ["/cwd/rel"]),
    (["--port", "30000"], "/l/s.log", []),
])
def test_where_a_server_writes_its_records_is_read_from_its_flags(argv, log, expected):
    assert record_paths(["python3", "-m", "sglang.launch_server", *argv], log, cwd="/cwd") == expected


def test_the_demo_emulator_writes_its_records_where_the_app_reads_them(tmp_path):
    from specmon.launch.presets import load_presets
    from specmon.tui.cli import with_records

    preset = load_presets([]).presets[load_presets([]).default_demo().name]
    argv = with_records(preset, str(tmp_path)).argv(port=30000)
    assert record_paths(argv) == [str(tmp_path)]
    assert argv[argv.index("--emulator-production-traffic") + 1] == "1"  # its production-like mix, at 1 request/s


def test_a_server_of_yours_named_by_its_url_has_its_records_read(tmp_path):
    """`monitor --url` (a fleet drill-down's command) of a local server specmon launched finds the records its own
    flags write, with no --traffic, a relative directory against the server's own working directory (not the
    monitor's)."""
    from specmon.ports import free_port_pair
    from tests.support.oncall import Oncall, write_preset

    oc = Oncall(tmp_path)
    launched_from, monitored_from = tmp_path / "launched-here", tmp_path / "monitored-here"
    launched_from.mkdir(), monitored_from.mkdir()
    export = launched_from / "export"
    write_preset(oc.presets, "fast-rec", "demo-eagle3-5",
                 'export-metrics-to-file = true\nexport-metrics-to-file-dir = "export"')
    try:
        started = oc.json("start", "fast-rec", "--port", str(free_port_pair()), "--wait", cwd=launched_from)
        for i in range(4):
            body = {"text": f"Tell me about lakes #{i}", "sampling_params": {"max_new_tokens": 60, "ignore_eos": True}}
            httpx.post(started["url"] + "/generate", json=body, timeout=30).raise_for_status()
        run = oc.run("monitor", "--url", started["url"], "--once", "--window", "1", "--json", presets=False,
                     cwd=monitored_from)
    finally:
        oc.cleanup()
    assert run.returncode == 0, run.stderr
    traffic = json.loads(run.stdout)["traffic"]
    assert traffic is not None and traffic["requests"] == len(list(read_records([str(export)], ReadTally()))) >= 4


def test_monitor_once_classes_by_your_categories(tmp_path):
    from specmon.traffic.categories import read
    from specmon.traffic.once import traffic_once

    rules = tmp_path / "categories.toml"
    rules.write_text("default = 'chat'\n[[category]]\nname = 'code'\nmatch = '```'\n")
    export = tmp_path / "export"
    export.mkdir()
    meta = {"prompt_tokens": 10, "completion_tokens": 90, "request_finished_ts": 1000.0}
    (export / "sglang-request-metrics-20261201_10.log").write_text("".join(
        json.dumps({"request_parameters": json.dumps({"text": "```x```" if i % 2 else "hi"}), "id": f"r{i}", **meta,
                    "spec_verify_ct": 30 if i % 2 else 45}) + "\n" for i in range(8)))
    result, _ = traffic_once([str(export)], now=1010.0, categories=read(str(rules)))
    assert result["categories"]["names"] == ["code", "chat"]
    rows = {c["value"]: c["accept_length"] for c in result["classes"] if c["by"] == "prompt category"}
    assert rows == {"code": 3.0, "chat": 2.0}
    plain, _ = traffic_once([str(export)], now=1010.0)
    assert plain["categories"] is None and all(c["by"] != "prompt category" for c in plain["classes"])
