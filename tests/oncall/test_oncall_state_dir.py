"""One state directory for everything (issue 22 item 11), a preset's port checked before it is recorded, and a
demo whose state directory is unusable ending with a message (issue 23 item 8). Real processes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from specmon.ports import free_port_pair
from tests.support.oncall import write_preset

pytestmark = pytest.mark.timeout(120)


def test_results_runs_and_demo_logs_all_live_under_specmon_state_dir(tmp_path, monkeypatch):
    from specmon.bench.results import ResultStore
    from specmon.launch.supervisor import default_run_dir
    from specmon.oncall.state import servers_dir
    from specmon.tui.cli import demo_log_dir

    state = tmp_path / "state"
    monkeypatch.setenv("SPECMON_STATE_DIR", str(state))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert ResultStore().directory == state / "results"
    assert default_run_dir() == state / "runs"
    assert servers_dir() == state / "servers"
    assert demo_log_dir() == state / "demo"
    assert not (tmp_path / "xdg").exists(), "nothing goes to the platform's state directory"


def test_bench_saves_and_results_reads_under_specmon_state_dir(oc):
    from specmon.testing.loopback_server import LoopbackConfig, LoopbackServer

    with LoopbackServer(LoopbackConfig(tokens_per_s=2000)) as server:
        done = oc.run("bench", "--url", server.url, "--requests", "2", "--max-new-tokens", "8", "--warmup", "0",
                      "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    saved = list((oc.state / "results").glob("*.jsonl"))
    assert len(saved) == 1, "the run is saved in $SPECMON_STATE_DIR/results"
    listed = oc.run("results", "--format", "json")
    assert listed.returncode == 0 and saved[0].stem in listed.stdout, listed.stderr


@pytest.mark.parametrize("port", ['"30001"', "70000", "true", "0"])
def test_a_preset_port_that_is_not_a_port_is_refused_before_anything_is_recorded(oc, port):
    write_preset(oc.presets, "bad-port", "demo-eagle3-10", f"port = {port}")
    done = oc.run("start", "bad-port", "--no-preflight")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "'port' must be a whole number from 1 to 65535" in done.stderr, done.stderr
    assert oc.records() == []


def test_a_preset_port_is_where_the_server_is_recorded(oc):
    port = free_port_pair()
    write_preset(oc.presets, "own-port", "demo-eagle3-10", f"port = {port}")
    started = oc.json("start", "own-port", "--wait")
    assert started["url"] == f"http://127.0.0.1:{port}"
    assert oc.json("stop", started["id"], "--yes")["stopped"]


@pytest.mark.parametrize("kind", ["file", "unwritable"])
def test_demo_with_an_unusable_state_directory_ends_with_a_message(tmp_path, kind):
    if kind == "file":
        state = tmp_path / "state"
        state.write_text("not a directory")
    else:
        state = "/proc/self/specmon-state"  # not writable, not even by root
    env = {**os.environ, "SPECMON_STATE_DIR": str(state), "XDG_STATE_HOME": str(tmp_path / "xdg")}
    done = subprocess.run([sys.executable, "-m", "specmon", "demo", "--headless", "--duration", "5"], env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "specmon demo: cannot keep the demo's log in" in done.stderr and "SPECMON_STATE_DIR" in done.stderr
