"""A grid cell's figures (bootstrap CIs, speedup over the baseline) and the longest chain's replay are computed
once, kept in the stored plan, and read back by the report without loading a run again; a plan stored before
they were kept reads the same; a kept figure computed from other runs than the cell's is not used."""

from __future__ import annotations

from pathlib import Path

import msgspec

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


def test_a_chain_shorter_than_every_measured_one_is_not_skipped_on_an_extrapolated_line(tmp_path: Path) -> None:
    # s3 (d4) and s2 (d3) measured, s2 slow by noise: their line, extrapolated to d2, has s1 slower than no
    # speculation; the line through no speculation has it faster, so s1's decode CI spans both and it is launched
    import dataclasses

    from specmon.sweep.grid_predict import loses_everywhere

    base = load_presets([]).get("demo-eagle3-10")
    axes = {"steps": [1, 2, 3], "topk": [1], "draft_tokens": [2, 3, 4], "concurrency": [1]}
    expansion = expand(base, axes["steps"], axes["topk"], axes["draft_tokens"])
    plan = plan_grid(base, expansion, axes["concurrency"], None, axes, None)
    stored = ResultStore(BENCH)
    by_preset = {run.preset: run for run in (stored.load(run_id) for run_id in stored.run_ids())}
    chain = by_preset["eagle3-5"]  # ran s3 k1 d4
    accept = chain.summary.accept_length.token_weighted or 0.0
    assert chain.summary.decode_tok_s is not None
    slow_decode = msgspec.structs.replace(chain.summary.decode_tok_s, median=accept / 0.010)
    slow = dataclasses.replace(chain, summary=msgspec.structs.replace(chain.summary, decode_tok_s=slow_decode))
    runs = {"base": by_preset["baseline"], "s3": chain, "s2": slow}
    configs = {}
    for step in plan.steps:
        config = tuple(step.grid_config) if step.grid_config else (0, 1, 1)
        configs[config] = step
        run_id = {(0, 1, 1): "base", (3, 1, 4): "s3", (2, 1, 3): "s2"}.get(config)  # type: ignore[call-overload]
        if run_id is not None:
            step.state = "measured"
            for cell in step.cells:
                cell.state, cell.bench_run_id = "measured", run_id
    assert (1, 1, 2) in configs and configs[(1, 1, 2)].state == "pending", list(configs)
    predictions, notes = predict_cells(plan, runs.get)
    assert notes == []
    guess = predictions[((1, 1, 2), 1)]
    baseline_tok_s = by_preset["baseline"].summary.median_tok_s or 0.0
    assert guess.decode_tok_s is not None and guess.decode_tok_s < baseline_tok_s  # the extrapolated line's
    assert guess.decode_ci is not None and guess.decode_ci[1] > baseline_tok_s, guess  # the anchored line's
    assert guess.decode_ci[0] <= guess.decode_tok_s <= guess.decode_ci[1]
    assert loses_everywhere(plan, runs.get, (1, 1, 2), [1], predictions) is None
    # a chain inside the measured range is interpolated: its CI is the acceptance CI at that line alone
    inside = predictions[((2, 1, 3), 1)]
    assert inside.decode_ci is not None and inside.accept_ci is not None and inside.decode_tok_s is not None
    assert abs(inside.decode_ci[1] / inside.decode_tok_s - inside.accept_ci[1] / inside.accept_length) < 1e-9
