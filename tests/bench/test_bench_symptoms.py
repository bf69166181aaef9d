"""The symptoms specmon exists for are flagged wherever a run is shown: acceptance about 1 on a speculative
server, and speculation slower than its baseline, in `bench` (exit 1), `results`, the sweep's report and the
app's notification; `results` flags runs compared across different settings and shows each run's URL and
date; `monitor --once` exits 1 on an error-level alert (issue 22 items 5 and 9). Real servers on loopback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from specmon.ports import free_port_pair
from specmon.testing.loopback_server import LoopbackConfig, LoopbackServer
from tests.support.oncall import Oncall, write_preset

pytestmark = pytest.mark.timeout(180)


def specmon(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specmon", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env}, stdin=subprocess.DEVNULL)  # fmt: skip


@pytest.fixture
def env(tmp_path):
    return {"SPECMON_STATE_DIR": str(tmp_path / "state"), "SPECMON_API_KEY": ""}


def bench(config: LoopbackConfig, env: dict[str, str], *extra: str, port: int = 0) -> subprocess.CompletedProcess:
    with LoopbackServer(config, port=port) as server:
        return specmon("bench", "--url", server.url, "--requests", "6", "--max-new-tokens", "30", "--warmup", "0",
                       *extra, env=env)  # fmt: skip


def test_a_speculative_server_accepting_one_token_per_step_is_flagged(env):
    done = bench(LoopbackConfig(tokens_per_s=2000, chunk_tokens=[1]), env)
    assert done.returncode == 1, done.stderr[-2000:]
    assert re.search(r"FLAG accept-near-1: acceptance 1\.0\d with EAGLE3 on: about one token", done.stdout), done.stdout
    table = specmon("results", env=env)
    assert "accept-near-1" in table.stdout, table.stdout
    data = json.loads(specmon("results", "--format", "json", env=env).stdout)
    assert "accept-near-1" in data[0]["flags"] and "accept-near-1" in data[0]["symptoms"]


def test_speculation_slower_than_its_baseline_is_flagged(env):
    """The baseline measured on the same server (its URL) before a switch to speculation."""
    port = free_port_pair()
    assert bench(LoopbackConfig(tokens_per_s=3000, speculative=False, chunk_tokens=[1]), env, port=port).returncode == 0
    elsewhere = bench(LoopbackConfig(tokens_per_s=600, chunk_tokens=[3, 2]), env, "--json")
    assert json.loads(elsewhere.stdout)["symptoms"] == {}, "another server's baseline is not this one's"
    done = bench(LoopbackConfig(tokens_per_s=600, chunk_tokens=[3, 2]), env, "--json", port=port)
    out = json.loads(done.stdout)
    assert done.returncode == 1 and "slower-than-baseline" in out["symptoms"], out["symptoms"]
    assert out["baseline_run_id"] is not None
    table = specmon("results", env=env).stdout
    assert "slower-than-baseline" in table, table


def test_results_flag_other_settings_and_show_url_and_date(env):
    with LoopbackServer(LoopbackConfig(tokens_per_s=2000, speculative=False, chunk_tokens=[1])) as plain:
        assert specmon("bench", "--url", plain.url, "--requests", "6", "--max-new-tokens", "30", "--warmup", "0",
                       env=env).returncode == 0  # fmt: skip
        url = plain.url
    assert bench(LoopbackConfig(tokens_per_s=4000, chunk_tokens=[3, 2]), env, "--concurrency", "2").returncode == 0
    table = specmon("results", env=env).stdout
    assert "unlike-baseline:concurrency" in table, table
    assert url in table and time.strftime("%Y-%m-%d") in table, table


def test_the_sweep_report_flags_each_symptom(tmp_path):
    from specmon.bench.run import BenchRun, RunSettings
    from specmon.sweep.report import PresetOutcome, build_report

    runs = []
    port = free_port_pair()  # one server, switched (a sweep's presets run on one port)
    for config in (LoopbackConfig(tokens_per_s=3000, speculative=False, chunk_tokens=[1]),
                   LoopbackConfig(tokens_per_s=600, chunk_tokens=[1])):  # fmt: skip
        with LoopbackServer(config, port=port) as server:
            runs.append(BenchRun(server.url, "x", RunSettings(requests=6, max_new_tokens=30, warmup=0),
                                 results_dir=str(tmp_path), flush_delay_s=0.01).run_blocking())  # fmt: skip
    report = build_report("s1", [PresetOutcome("base", None, "measured", runs[0], baseline=True),
                                 PresetOutcome("spec", 5, "measured", runs[1])])  # fmt: skip
    flags = report.rows[1]["flags"]
    assert set(flags) == {"accept-near-1", "slower-than-baseline"}, flags
    assert report.rows[0]["flags"] == {}


def test_monitor_once_exits_1_on_an_error_alert(tmp_path):
    oc = Oncall(tmp_path)
    try:
        write_preset(oc.presets, "no-draft", "demo-eagle3-5", "emulator-accept-prob = 0.0")
        started = oc.json("start", "no-draft", "--port", str(free_port_pair()), "--wait")
        done = oc.run("bench", "--url", started["url"], "--requests", "4", "--warmup", "0", "--max-new-tokens",
                      "200")  # fmt: skip
        assert "accept-near-1" in done.stdout, done.stdout
        once = oc.run("monitor", "--url", started["url"], "--log", started["log"], "--once", "--window", "60",
                      "--json")  # fmt: skip
        alerts = json.loads(once.stdout)["alerts"]
        assert any(a["kind"] == "accept_low" and a["severity"] == "error" for a in alerts), alerts
        assert once.returncode == 1
    finally:
        oc.cleanup()


def test_the_apps_notification_says_the_symptom(tmp_path):
    from specmon.bench.run import BenchRun, RunSettings
    from specmon.view.state import bench_outcome

    with LoopbackServer(LoopbackConfig(tokens_per_s=3000, chunk_tokens=[1])) as server:
        run = BenchRun(server.url, "eagle3-x", RunSettings(requests=5, max_new_tokens=30, warmup=0),
                       results_dir=str(tmp_path), flush_delay_s=0.01).run_blocking()  # fmt: skip
    title, text, severity = bench_outcome(run)
    assert severity == "error" and "the draft is doing nothing" in text and text.startswith("eagle3-x: ")
