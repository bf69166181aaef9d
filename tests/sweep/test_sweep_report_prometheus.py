"""`specmon sweep --report RUN_ID --prometheus URL`: a stored grid sweep's recommendation weighted by the load a real
Prometheus observed (backfilled blocks: the running requests of the servers --selector picks, TP ranks counted once,
DP ranks summed), against the emulator's known speedups; Prometheus unreachable or a bad selector said in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specmon.ports import free_port
from tests.support.fleet_series import Shape, backfilled_prometheus, instance
from tests.support.grid_sweeps import truth, write_grid_sweep

CONCURRENCY = [1, 2, 4, 16]
CONFIGS = [(3, 1, 4), (1, 1, 2), (2, 2, 6)]
RUN_ID = "20261203-100000-aaaa"


def _sweep(state: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPECMON_STATE_DIR": str(state), "XDG_STATE_HOME": str(state / "xdg")}
    return subprocess.run([sys.executable, "-m", "specmon", "sweep", "--report", RUN_ID, *args], env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory):
    # one server at 8 running (3 + 5 over its DP ranks, each TP rank once), one at 1
    prom = backfilled_prometheus(tmp_path_factory.mktemp("prom"), [Shape(tp=2, dp=2, running=(3, 5)),
                                                                   Shape(running=(1,))], int(time.time()) - 30)
    yield prom
    prom.stop()


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("state")
    write_grid_sweep(root, RUN_ID, CONFIGS, CONCURRENCY)
    return root


@pytest.mark.parametrize(("selector", "servers", "shares"), [
    ('job="sglang"', 2, {1: 0.5, 16: 0.5}),  # both servers' counts: half the time at 1, half at 8 (read at 16)
    (f'job="sglang",instance="{instance(1)}"', 1, {1: 1.0}),
])
def test_the_report_is_weighted_by_the_load_prometheus_observed(prometheus, state: Path, selector: str, servers: int,
                                                                 shares: dict[int, float]) -> None:
    done = _sweep(state, "--prometheus", prometheus.url, "--selector", selector, "--json")
    assert done.returncode == 0, done.stderr
    observed = json.loads(done.stdout)["observed_load"]
    assert {band["read_at"]: band["share"] for band in observed["bands"]} == pytest.approx(shares)
    assert observed["text"].startswith("weighted by observed load over the last ")
    assert observed["source"] == f"Prometheus ({servers} server{'s' if servers > 1 else ''} {selector})"
    expected = {config: sum(share * truth(config, c) for c, share in shares.items()) for config in CONFIGS}
    best = max(expected, key=expected.get)
    winner = observed["winner"]
    assert (winner["steps"], winner["topk"], winner["draft_tokens"]) == (best if expected[best] > 1 else (0, 1, 1))
    text = _sweep(state, "--prometheus", prometheus.url, "--selector", selector)
    assert text.returncode == 0 and f"from Prometheus ({servers} server" in text.stdout, text.stderr


def test_without_prometheus_the_report_is_the_sweep_s_own(state: Path) -> None:
    done = _sweep(state, "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["recommendation"], done.stderr
    assert "observed_load" not in json.loads(done.stdout)


def test_prometheus_unreachable_or_a_bad_selector_is_one_line(state: Path) -> None:
    down = _sweep(state, "--prometheus", f"http://127.0.0.1:{free_port()}")
    assert down.returncode == 1 and "recommended at" in down.stdout  # the report, unweighted
    assert down.stderr.count("\n") == 1 and "not weighted by observed load" in down.stderr, down.stderr
    bad = _sweep(state, "--prometheus", "http://127.0.0.1:9", "--selector", "job=")
    assert bad.returncode == 2 and bad.stderr.startswith("specmon sweep: --selector") and "Traceback" not in bad.stderr
    missing = _sweep(state.parent, "--json")
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1, missing.stderr
