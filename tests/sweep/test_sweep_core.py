"""specmon.sweep: the plan, its saved progress, the report and the recommendation (no server)."""

from __future__ import annotations

import copy
import json
import os
import stat
from pathlib import Path

import pytest

from specmon.bench.results import ResultStore
from specmon.launch.presets import load_presets
from specmon.sweep.plan import SweepError, SweepPlan, SweepStore, plan_sweep
from specmon.sweep.report import PresetOutcome, build_report, conservative_tok_s, recommend

BENCH = Path(__file__).parents[1] / "fixtures" / "bench"


@pytest.fixture(scope="module")
def presets():
    return load_presets([])


def test_the_baseline_runs_first_and_last_and_long_chains_first(presets) -> None:
    chosen = [presets.get(n) for n in ("eagle3-5", "baseline", "eagle3-16", "eagle3-10")]
    plan = plan_sweep(chosen, requests=8)
    assert [s.preset for s in plan.steps] == ["baseline", "eagle3-16", "eagle3-10", "eagle3-5", "baseline"]
    assert [s.baseline for s in plan.steps] == [True, False, False, False, True]
    assert [s.draft_tokens for s in plan.steps] == [None, 16, 10, 5, None]
    assert plan.next_step is plan.steps[0] and plan.requests == 8


def test_a_sweep_needs_one_baseline_and_a_speculative_preset(presets) -> None:
    with pytest.raises(SweepError, match="exactly one preset without speculation"):
        plan_sweep([presets.get("eagle3-5"), presets.get("eagle3-10")])
    with pytest.raises(SweepError, match="at least one speculative preset"):
        plan_sweep([presets.get("baseline")])
    plan = plan_sweep([presets.get("eagle3-5")], baseline=presets.get("baseline"))
    assert [s.preset for s in plan.steps] == ["baseline", "eagle3-5", "baseline"]


def test_progress_is_saved_privately_and_resumes_where_it_stopped(tmp_path: Path, presets) -> None:
    store = SweepStore(tmp_path / "sweeps")
    plan = plan_sweep([presets.get("baseline"), presets.get("eagle3-5")])
    plan.steps[0].state, plan.steps[0].bench_run_id = "measured", "r1"
    path = store.save(plan)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    again = store.load(plan.run_id)
    assert again.next_step.preset == "eagle3-5" and again.steps[0].bench_run_id == "r1"
    assert store.latest_unfinished().run_id == plan.run_id
    again.finished = True
    store.save(again)
    assert store.latest_unfinished() is None


def test_a_bad_or_linked_state_file_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    store = SweepStore(tmp_path)
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "wrong.json").write_text(json.dumps({"run_id": "x", "steps": [{"preset": "a"}]}))
    (tmp_path / "states.json").write_text(
        json.dumps({"run_id": "s", "steps": [{"preset": "a", "baseline": True, "draft_tokens": None, "state": "??"}]})
    )
    os.symlink(tmp_path / "bad.json", tmp_path / "link.json")
    for run_id in ("bad", "wrong", "states", "link", "missing"):
        with pytest.raises(SweepError):
            store.load(run_id)
    assert store.latest_unfinished() is None
    with pytest.raises(SweepError):
        SweepPlan.from_json([])


def runs():
    store = ResultStore(BENCH)
    return {r.preset: r for r in (store.load(run_id) for run_id in store.run_ids())}


def test_the_report_of_a_real_set_of_runs() -> None:
    measured = runs()
    last_baseline = copy.deepcopy(measured["baseline"])
    for request in last_baseline.requests:
        if request.decode_tok_s:
            request.decode_tok_s *= 0.95  # the baseline got 5% slower during the sweep
    last_baseline.summary.decode_tok_s.median *= 0.95
    outcomes = [
        PresetOutcome("baseline", None, "measured", measured["baseline"], startup_s=12.0, measure_s=30.0, baseline=True),
        PresetOutcome("eagle3-10", 10, "measured", measured["eagle3-10"], startup_s=11.0, measure_s=20.0),
        PresetOutcome("eagle3-5", 5, "measured", measured["eagle3-5"], startup_s=10.0, measure_s=20.0),
        PresetOutcome("eagle3-16", 16, "failed", None, error="cuda_oom: lower --mem-fraction-static"),
        PresetOutcome("baseline", None, "measured", last_baseline, baseline=True),
    ]
    report = build_report("sweep-1", outcomes)
    assert report.baseline_drift_pct == pytest.approx(-5.0) and report.drift_flagged
    rows = {(r["preset"], r["state"]): r for r in report.rows}
    eagle = rows[("eagle3-10", "measured")]
    assert eagle["decode_tok_s"] == measured["eagle3-10"].summary.decode_tok_s.median
    assert eagle["speedup"] is not None and eagle["speedup_ci95"] is not None
    assert rows[("eagle3-16", "failed")]["error"].startswith("cuda_oom")
    assert report.recommended in {"eagle3-10", "eagle3-5", "baseline"}
    data = report.to_json()
    json.dumps(data, allow_nan=False)
    assert set(data) >= {"run_id", "presets", "baseline_drift_pct", "recommended", "left_serving"}
    assert set(data["presets"][0]) >= {"preset", "state", "decode_tok_s", "ci95", "accept_length", "speedup",
                                       "speedup_ci95", "startup_s", "measure_s", "error"}


def row(preset: str, draft: int | None, conservative: float | None, state: str = "measured") -> dict:
    return {"preset": preset, "draft_tokens": draft, "conservative_tok_s": conservative, "state": state}


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([row("b", None, 90), row("e16", 16, 200), row("e10", 10, 240), row("e5", 5, 238)], "e5"),
        ([row("b", None, 90), row("e16", 16, 250), row("e10", 10, 240), row("e5", 5, 200)], "e16"),
        ([row("b", None, 90), row("e5", 5, 89.5)], "b"),
        ([row("b", None, None), row("e5", 5, 300, state="failed")], None),
        ([row("b", None, 0.0), row("e5", 5, 0.0)], None),
        ([row("b", None, 0.0), row("e5", 5, 12.5)], "e5"),
    ],
)
def test_recommendation_is_the_fewest_draft_tokens_within_1_percent_of_the_best(rows, expected) -> None:
    assert recommend(rows)[0] == expected


def test_conservative_rate_is_median_minus_scaled_mad() -> None:
    run = runs()["eagle3-5"]
    rates = sorted(r.decode_tok_s for r in run.measured if r.ok and r.decode_tok_s)
    value = conservative_tok_s(run)
    assert value is not None and value <= rates[len(rates) // 2] + 1e-9


def test_requests_too_far_apart_for_a_conservative_rate_give_0_and_no_recommendation() -> None:
    """Two requests far apart (one stalled on a busy host): median − 1.4826·MAD is below 0. The sweep reported
    that as a crash (min() of an empty sequence) after its first preset."""
    from specmon.bench.model import RequestResult

    def run_of(*rates: float | None):
        run = runs()["eagle3-5"]
        run.requests = [RequestResult(i, f"p{i}", ok=True, decode_tok_s=v) for i, v in enumerate(rates)]
        return run

    assert conservative_tok_s(run_of(10.0, 400.0)) == 0.0
    assert conservative_tok_s(run_of(float("nan"), float("inf"), -5.0, None)) is None
    assert conservative_tok_s(run_of(100.0, 100.0, float("nan"))) == 100.0
    recommended, why = recommend([row("b", None, conservative_tok_s(run_of(10.0, 400.0))),
                                  row("e5", 5, conservative_tok_s(run_of(5.0, 600.0)))])
    assert recommended is None and "spread too widely" in why and "measure more requests" in why
