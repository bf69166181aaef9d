"""A grid's recommendation weighted by observed load: the share of time in each load band (ending at an asked
concurrency), each configuration's speedup weighted by it, against the emulator's known speedups; a count between
two measured concurrencies read at the one above, never between; nothing without history."""

from __future__ import annotations

from pathlib import Path

import pytest

from specmon.bench.results import ResultStore
from specmon.sweep.grid_report import build_grid_report, format_grid
from specmon.sweep.load_weight import load_shares, weigh_by_load
from tests.support.grid_sweeps import truth, write_grid_sweep

CONCURRENCY = [1, 2, 4, 16]
CONFIGS = [(3, 1, 4), (1, 1, 2), (2, 2, 6)]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root: Path = tmp_path_factory.mktemp("grid")
    plan = write_grid_sweep(root, "20261203-100000-aaaa", CONFIGS, CONCURRENCY)
    results = ResultStore(root / "results")
    return build_grid_report(plan, lambda run_id: results.load(run_id) if run_id else None)


def test_shares_per_band_each_ending_at_an_asked_concurrency() -> None:
    shares = load_shares([0, 1, 2, 3, 3, 4, 10, 40, None, float("nan")], CONCURRENCY)
    assert [(b["band"], b["read_at"], b["above"], b["share"]) for b in shares] == [
        ("≤ 1", 1, False, 0.25), ("2", 2, False, 0.125), ("3–4", 4, False, 0.375), ("5–16", 16, False, 0.125),
        ("> 16", 16, True, 0.125)]


@pytest.mark.parametrize("counts", [
    [1] * 7 + [2] * 3,  # low load: the deepest chain pays most
    [3] * 5 + [12] * 5,  # read at 4 and at 16
    [16] * 9 + [1],  # high load
    [40] * 10,  # above the measured range: read at 16
])
def test_the_weighted_winner_is_the_emulator_s(report: dict, counts: list[int]) -> None:
    observed = weigh_by_load(report, counts, 58 * 60, "Prometheus")
    assert observed is not None and observed["text"] == "weighted by observed load over the last 58 min, from Prometheus"
    at = {band["read_at"]: band["share"] for band in observed["bands"]}
    expected = {config: sum(share * truth(config, c) for c, share in at.items()) for config in CONFIGS}
    for item in observed["configurations"]:
        config = (item["steps"], item["topk"], item["draft_tokens"])
        assert item["weighted_speedup"] == pytest.approx(expected[config], rel=0.02)
    best = max(expected, key=expected.get)
    winner = observed["winner"]
    if expected[best] > 1.05:
        assert (winner["steps"], winner["topk"], winner["draft_tokens"]) == best
    elif expected[best] < 0.95:
        assert winner["steps"] == 0
    text = format_grid(report | {"observed_load": observed})
    assert "weighted by observed load over the last 58 min, from Prometheus:" in text
    ours = text.split("weighted by observed load")[1].splitlines()
    assert len(ours) >= 2 and all(len(line) <= 80 for line in ours)
    said = f"s{winner['steps']} k{winner['topk']} d{winner['draft_tokens']} {winner['weighted_speedup']:.2f}×" \
        if winner["steps"] else "no speculation"
    assert ours[1].endswith(f"→ {said}")
    assert ("read at the highest measured" in text) is (max(counts) > 16)


def test_no_history_no_weighting(report: dict) -> None:
    assert weigh_by_load(report, [], 3600, "Prometheus") is None
    assert weigh_by_load(report, [None, None], 3600, "Prometheus") is None
    assert weigh_by_load(report, [3], 3600, "Prometheus") is None  # one sample is no history
    assert "weighted" not in format_grid(report)


def test_a_band_s_speedup_is_its_least_with_that_cell_s_ci(report: dict) -> None:
    """A band over several concurrencies says its least speedup, and the CI it shows is that cell's (it was the
    first concurrency's: "1.48× the baseline, CI 2.06–2.06")."""
    for band in report["recommendation"]:
        if band["steps"] and band["ci"]:
            low, high = band["ci"]
            assert low <= band["speedup"] <= high, band
    first = report["recommendation"][0]
    assert (first["concurrency_from"], first["concurrency_to"], first["steps"]) == (1, 2, 3)
    assert first["speedup"] == pytest.approx(truth((3, 1, 4), 2), rel=0.01)
