"""A grid cell's figures (bootstrap CIs, speedup over the baseline) and the longest chain's replay are computed
once, kept in the stored plan, and read back by the report without loading a run again; a plan stored before
they were kept reads the same; a kept figure computed from other runs than the cell's is not used."""

from __future__ import annotations

from pathlib import Path

from specmon.bench.results import ResultStore
from specmon.launch.presets import load_presets
from specmon.sweep.grid import expand, plan_grid
from specmon.sweep.grid_predict import predict_cells
from specmon.sweep.grid_report import build_grid_report, keep_cell_figures
from specmon.sweep.plan import SweepStore

BENCH = Path(__file__).resolve().parents[1] / "fixtures" / "bench"


def measured_plan(tmp_path: Path):
    base = load_presets([]).get("demo-eagle3-10")
    axes = {"steps": [2, 5], "topk": [1], "draft_tokens": [4], "concurrency": [1, 4]}
    plan = plan_grid(base, expand(base, axes["steps"], axes["topk"], axes["draft_tokens"]), axes["concurrency"],
                     None, axes, None)
    stored = ResultStore(BENCH)
    by_preset = {run.preset: run for run in (stored.load(run_id) for run_id in stored.run_ids())}
    runs = {}
    for index, step in enumerate(plan.steps):
        step.state = "measured"
        for cell in step.cells:
            cell.state, cell.bench_run_id = "measured", f"{index}-{cell.concurrency}"
            runs[cell.bench_run_id] = by_preset["baseline" if step.baseline else "eagle3-5"]
    return plan, runs


def test_the_report_reads_kept_figures_and_replays_without_loading_a_run(tmp_path: Path) -> None:
    plan, runs = measured_plan(tmp_path)
    fresh = build_grid_report(plan, runs.get)  # nothing kept yet: computed from the runs
    plan, runs = measured_plan(tmp_path)
    for step in plan.steps:
        for cell in step.cells:
            keep_cell_figures(plan, step, cell, runs.get)
    predict_cells(plan, runs.get)
    store = SweepStore(tmp_path / "sweeps")
    store.save(plan)
    loaded: list[str | None] = []
    kept = build_grid_report(store.load(plan.run_id), loaded.append)  # type: ignore[arg-type]
    assert loaded == [], loaded  # every figure and prediction came from the stored plan
    assert kept["cells"] == fresh["cells"] and kept["baseline"] == fresh["baseline"]
    assert kept["recommendation"] == fresh["recommendation"] and kept["crossover"] == fresh["crossover"]
    assert kept["prediction_notes"] == fresh["prediction_notes"]
    assert all(cell["speedup"] is not None for cell in kept["cells"])


def test_a_kept_figure_from_another_run_is_computed_again(tmp_path: Path) -> None:
    plan, runs = measured_plan(tmp_path)
    build_grid_report(plan, runs.get)
    cell = plan.steps[1].cells[0]
    before = cell.figures
    assert before is not None and before.against_run_id == plan.steps[0].cells[0].bench_run_id
    cell.bench_run_id = "other"  # measured again (a resume): its old figures no longer stand
    runs["other"] = runs[plan.steps[0].cells[0].bench_run_id or ""]  # the baseline's own run: speedup 1
    report = build_grid_report(plan, runs.get)
    assert cell.figures is not None and cell.figures.run_id == "other"
    assert report["cells"][0]["speedup"] == 1.0 and report["cells"][0]["speedup"] != before.speedup
