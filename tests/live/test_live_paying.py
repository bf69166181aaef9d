""""Is speculation paying now?" in `specmon monitor --once` against the emulator under load: the serving
configuration's measured curve from a grid sweep stored with the emulator's own speedups, read at the running
count /metrics gives, the crossover's alert once the load has passed it, and "no measured curve" otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.emulator.test_emulator import launch
from tests.support.grid_sweeps import truth, write_grid_sweep

TREE = (2, 2, 6)  # the emulator's truth: 1.81x at 1, 1.08x at 2, 0.74x at 4, 0.58x at 8: its crossover is 4
TREE_FLAGS = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/eagle3-8b",
              "--speculative-num-steps", "2", "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "6"]
CONCURRENCY = [1, 2, 4, 8]
MODEL = "/models/llama-8b"  # tests.emulator.test_emulator.launch's


def _once(url: str, state: Path, text: bool = False) -> subprocess.CompletedProcess:
    env = os.environ | {"SPECMON_STATE_DIR": str(state)}
    done = subprocess.run([sys.executable, "-m", "specmon", "monitor", "--url", url, "--once", "--window", "2",
                           *([] if text else ["--json"])], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode in (0, 1), done.stderr
    return done


def _running(url: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith("sglang:num_running_reqs"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.timeout(240)
def test_once_reads_the_configuration_s_curve_at_the_running_count_and_alerts_past_its_crossover(
        tmp_path: Path) -> None:
    measured = tmp_path / "measured"
    write_grid_sweep(measured, "20261203-100000-aaaa", [TREE, (3, 1, 4)], CONCURRENCY, model=MODEL,
                     finished_at=time.time() - 2 * 3600)
    other_model = tmp_path / "other"
    write_grid_sweep(other_model, "20261203-100000-bbbb", [TREE], CONCURRENCY, model="/models/another")
    server = launch(tmp_path, *TREE_FLAGS, "--emulator-speed", "50", "--emulator-decode-speed", "5",
                    "--enable-metrics")
    bench = None
    try:
        server.wait_ready()
        url = f"http://127.0.0.1:{server.port}"
        idle = json.loads(_once(url, measured).stdout)["speculation_pays"]
        assert idle is not None and idle["sweep_id"] == "20261203-100000-aaaa"  # idle: read at what it runs
        bench = subprocess.Popen(
            [sys.executable, "-m", "specmon", "bench", "--url", url, "--concurrency", "8", "--requests", "200",
             "--warmup", "0", "--max-new-tokens", "512", "--json"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ | {"SPECMON_STATE_DIR": str(
                tmp_path / "bench")})
        deadline = time.monotonic() + 60
        while _running(url) < 6 and time.monotonic() < deadline:  # the benchmark's requests are running
            time.sleep(0.1)
        snap = json.loads(_once(url, measured).stdout)
        text = _once(url, measured, text=True).stdout
        none = json.loads(_once(url, other_model).stdout)["speculation_pays"]
    finally:
        if bench is not None:
            bench.terminate()
            bench.wait(timeout=30)
        server.stop()
    paying = snap["speculation_pays"]
    assert snap["state"] == "serving" and snap["running"] >= 4, snap
    assert paying["running"] == snap["running"] and paying["sweep_id"] == "20261203-100000-aaaa"
    assert paying["crossover"] == 4 and 2 * 3600 <= paying["age_s"] < 2 * 3600 + 120
    by_c = {p["concurrency"]: p["speedup"] for p in paying["measured"]}
    expected = [c for c in CONCURRENCY if c == snap["running"]] or [
        max([c for c in CONCURRENCY if c <= snap["running"]]),
        *[c for c in CONCURRENCY if c >= snap["running"]][:1]]
    assert sorted(by_c) == expected  # the measured point there, else its measured neighbours: never between
    for c, speedup in by_c.items():
        assert speedup == pytest.approx(truth(TREE, c), rel=0.02)
    assert paying["verdict"] == "loses"
    alerts = [a for a in snap["alerts"] if a["kind"] == "spec_loses"]
    assert [a["text"] for a in alerts] == [
        f"speculation loses from 4 running (measured, sweep 20261203-100000-aaaa); now {snap['running']}"]
    assert "speculation " in text and "(sweep 20261203-100000-aaaa, 2 h ago)" in text
    assert "speculation loses from 4 running" in text
    assert none["verdict"] == "no curve" and none["text"] == "speculation: no measured curve for this configuration"
