"""Measured curves read back from stored grid sweeps (`specmon.sweep.curves`) and read at a running count
(`specmon.live.paying`): the emulator's known speedups, only measured concurrencies named, the newest sweep of
the same model and configuration, its crossover, and "no measured curve" otherwise."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specmon.bench.results import ResultStore
from specmon.live.paying import NO_CURVE, ServingConfig, read_curve
from specmon.sweep.curves import StoredCurves
from specmon.sweep.plan import SweepStore
from tests.support.grid_sweeps import MODEL, truth, write_grid_sweep

CONCURRENCY = [1, 2, 4, 8, 16]
CHAIN = (3, 1, 4)  # the emulator's truth: 2.06x at 1, 1.12x at 4, 0.93x at 8 (its crossover), 0.82x at 16
TREE = (2, 2, 6)


def _config(config: tuple[int, int, int], model: str = MODEL, algorithm: str = "EAGLE3") -> ServingConfig:
    return ServingConfig(model, algorithm, *config)


def _curves(root: Path) -> StoredCurves:
    return StoredCurves(SweepStore(root / "sweeps"), ResultStore(root / "results"))


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    write_grid_sweep(tmp_path, "20261203-100000-aaaa", [CHAIN, TREE], CONCURRENCY)
    return tmp_path


def test_a_configuration_s_curve_is_the_emulator_s_speedup_at_each_measured_concurrency(stored: Path) -> None:
    for config in (CHAIN, TREE):
        curve = _curves(stored)(_config(config))
        assert curve is not None and curve.sweep_id == "20261203-100000-aaaa"
        assert [p.concurrency for p in curve.points] == CONCURRENCY
        for point in curve.points:
            assert point.speedup == pytest.approx(truth(config, point.concurrency), rel=0.01)
            assert point.ci is not None and point.ci[0] <= point.speedup <= point.ci[1]
        expected = next(c for c in CONCURRENCY if all(truth(config, h) < 1 for h in CONCURRENCY if h >= c))
        assert curve.crossover == expected
    assert _curves(stored)(_config(CHAIN)).crossover == 8


def test_at_a_measured_concurrency_its_figure_and_ci_between_two_the_neighbours_never_a_figure_between(
        stored: Path) -> None:
    curve = _curves(stored)(_config(CHAIN))
    now = curve.measured_at + 2 * 3600
    at_four = read_curve(curve, 4, now)
    assert at_four.verdict == "pays" and at_four.to_json()["concurrency_measured"] == 4
    assert at_four.to_json()["speedup"] == pytest.approx(truth(CHAIN, 4), rel=0.01)
    assert at_four.line() == f"speculation {truth(CHAIN, 4):.2f}× at 4 running (sweep 20261203-100000-aaaa, 2 h ago)"
    assert len(at_four.line()) <= 80 and at_four.alert() is None
    between = read_curve(curve, 6, now)
    assert between.verdict == "unclear"  # it pays at 4, loses at 8: what it does at 6 was not measured
    assert [p["concurrency"] for p in between.to_json()["measured"]] == [4, 8]
    assert between.to_json()["speedup"] is None
    assert f"{truth(CHAIN, 4):.2f}× at 4, {truth(CHAIN, 8):.2f}× at 8 (measured); 6 running" in between.line()
    assert between.alert() is None
    above = read_curve(curve, 40, now)
    assert above.verdict == "loses" and "at 16 (highest measured); 40 running" in above.line()
    below = read_curve(curve, 0, now)
    assert below.verdict == "pays" and "at 1 (lowest measured); 0 running" in below.line()
    assert read_curve(curve, None, now).verdict == "unknown"


@pytest.mark.parametrize(("running", "alerted"), [(4, False), (7, False), (8, True), (12, True), (100, True)])
def test_past_the_crossover_is_an_alert(stored: Path, running: int, alerted: bool) -> None:
    curve = _curves(stored)(_config(CHAIN))
    alert = read_curve(curve, running, curve.measured_at).alert()
    assert (alert is not None) is alerted
    if alert is not None:
        assert alert.severity == "warning"
        assert alert.text == f"speculation loses from 8 running (measured, sweep 20261203-100000-aaaa); now {running}"


@pytest.mark.parametrize("config", [
    _config((5, 4, 16)),  # not in the sweep
    _config(CHAIN, model="/models/another"),  # the same settings on another model
    _config(CHAIN, algorithm="STANDALONE"),  # another drafter
])
def test_no_measured_curve_for_another_configuration(stored: Path, config: ServingConfig) -> None:
    assert _curves(stored)(config) is None
    reading = read_curve(None, 4, 0.0)
    assert reading.verdict == "no curve" and reading.line() == f"speculation: {NO_CURVE}"
    assert reading.alert() is None and reading.to_json()["speedup"] is None


def test_the_newest_sweep_of_the_configuration_is_read_and_a_new_sweep_is_seen(tmp_path: Path) -> None:
    write_grid_sweep(tmp_path, "20261203-100000-aaaa", [CHAIN], CONCURRENCY)
    write_grid_sweep(tmp_path, "20261203-120000-bbbb", [TREE], CONCURRENCY)  # newer, of another configuration
    curves = _curves(tmp_path)
    assert curves(_config(CHAIN)).sweep_id == "20261203-100000-aaaa"
    write_grid_sweep(tmp_path, "20261203-140000-cccc", [CHAIN], [2, 4], scale=1.0)
    curve = curves(_config(CHAIN))  # the same reader: the new sweep file is seen
    assert curve.sweep_id == "20261203-140000-cccc" and [p.concurrency for p in curve.points] == [2, 4]


def test_an_unreadable_sweep_or_run_is_passed_over(stored: Path) -> None:
    (stored / "sweeps" / "20261203-230000-zzzz.json").write_text("{not json")
    os.remove(stored / "results" / "20261203-100000-aaaa-s3k1d4-c16.jsonl")
    curve = _curves(stored)(_config(CHAIN))
    assert curve is not None and [p.concurrency for p in curve.points] == [1, 2, 4, 8]
    assert curve.crossover == 8
