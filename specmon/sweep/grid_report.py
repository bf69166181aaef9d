"""A grid sweep's result: each (configuration, concurrency) cell against the baseline measured at the same
concurrency (speedup paired per prompt, with its CI), each configuration's crossover concurrency, and a
recommendation per load band. Pure: the runs are given; no I/O."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from specmon.bench.compare import compare
from specmon.bench.stats import ci95
from specmon.sweep.grid import GridConfig
from specmon.sweep.grid_predict import TREE_NOTE, predict_cells
from specmon.units import format_seconds

if TYPE_CHECKING:
    from specmon.bench.model import BenchResult
    from specmon.sweep.plan import CellFigures, SweepCell, SweepPlan, SweepStep

Load = Callable[[str | None], "BenchResult | None"]


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def cell_figures(run: BenchResult, concurrency: int) -> dict[str, Any]:
    """A cell's measured figures: per-request decode tok/s, total output tok/s (concurrency x tokens over the
    requests' end-to-end time: the streams are held busy), τ, TTFT and ITL, each with its bootstrap 95% CI over
    requests (ITL: the median of the requests' median gaps; a request's gaps are not independent of each other, and
    resampling them one by one would cost seconds per cell)."""
    ok = [r for r in run.measured if r.ok]
    rates = [r.completion_tokens / r.e2e_s * concurrency for r in ok if r.e2e_s and r.e2e_s > 0]
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    itl = [statistics.median(gaps) for r in ok if (gaps := r.itl_ms())]  # each request's median gap
    summary = run.summary
    return {
        "decode_tok_s": _finite(summary.median_tok_s),
        "decode_ci95": summary.tok_s_ci95,
        "output_tok_s": sum(rates) / len(rates) if rates else None,
        "output_ci95": ci95(rates, statistic=lambda v: sum(v) / len(v)) if rates else None,
        "accept_length": _finite(summary.accept_length.token_weighted),
        "ttft_s": (summary.ttft_s.median if summary.ttft_s else None),
        "ttft_ci95": ci95(ttft) if ttft else None,
        "itl_ms": statistics.median(itl) if itl else None,
        "itl_ci95": ci95(itl) if itl else None,
    }


def cell_speedup(run: BenchResult, baseline: BenchResult) -> tuple[float | None, list[float | None] | None]:
    """A cell's speedup over the baseline at its concurrency: the geometric mean of the per-prompt decode tok/s
    ratios, with its bootstrap 95% CI (`compare`'s pairing)."""
    speedup = compare(run, baseline).speedup or {}
    return _finite(speedup.get("geomean")), speedup.get("ci95")


def _config_of(values: list[int] | None) -> dict[str, int]:
    steps, topk, draft = values or (0, 1, 1)
    return {"steps": steps, "topk": topk, "draft_tokens": draft}


def _label(config: dict[str, Any]) -> str:
    return GridConfig.from_json(config).words()


FIGURES = ("decode_tok_s", "decode_ci95", "output_tok_s", "output_ci95", "accept_length", "ttft_s", "ttft_ci95",
           "itl_ms", "itl_ci95")
"""A cell's measured figures, as `cell_figures` gives them and `CellFigures` keeps them."""


def kept_figures(cell: SweepCell, load: Load, against: SweepCell | None) -> CellFigures | None:
    """A measured cell's figures, with its speedup over the baseline cell `against` (None: a baseline cell, or no
    baseline measured at its concurrency): those kept with the cell when they came from the same runs, else
    computed now from its stored run and kept (None when that run cannot be read)."""
    from specmon.sweep.plan import CellFigures

    against_id = against.bench_run_id if against is not None else None
    kept = cell.figures
    if kept is not None and kept.run_id == cell.bench_run_id and kept.against_run_id == against_id:
        return kept
    run = load(cell.bench_run_id)
    if run is None or cell.bench_run_id is None:
        return None
    baseline = load(against_id) if against_id is not None else None
    speedup, ci = cell_speedup(run, baseline) if baseline is not None else (None, None)
    from specmon.bench.report import production_gap

    cell.figures = CellFigures(cell.bench_run_id, against_id if baseline is not None else None,
                               **cell_figures(run, cell.concurrency), speedup=speedup, speedup_ci95=ci,
                               production=production_gap(run))
    return cell.figures


def baseline_cells(plan: SweepPlan) -> dict[int, list[SweepCell]]:
    """Per concurrency, the baseline's measured cells in order (the first is what every cell is compared with)."""
    out: dict[int, list[SweepCell]] = {}
    for step in plan.steps:
        if step.baseline:
            for cell in step.cells:
                if cell.state == "measured":
                    out.setdefault(cell.concurrency, []).append(cell)
    return out


def keep_cell_figures(plan: SweepPlan, step: SweepStep, cell: SweepCell, load: Load) -> None:
    """Compute a just-measured cell's figures once and keep them with it (the runner calls this)."""
    against = None if step.baseline else next(iter(baseline_cells(plan).get(cell.concurrency, [])), None)
    kept_figures(cell, load, against)


def build_grid_report(plan: SweepPlan, load: Load) -> dict[str, Any]:
    """The issue's JSON: configs, launched, cells, dropped, baseline, crossover, recommendation. Each measured
    cell's figures are read from the plan where they were kept (computed, and kept, where not)."""
    grid = plan.grid
    assert grid is not None
    concurrencies = grid.concurrency
    baselines = baseline_cells(plan)
    baseline_rows = []
    for c in concurrencies:
        found = [(cell, figures) for cell in baselines.get(c, []) if (figures := kept_figures(cell, load, None))]
        row: dict[str, Any] = {"concurrency": c, "decode_tok_s": None, "output_tok_s": None, "drift_pct": None,
                               "run_id": None}
        if found:
            row |= {key: getattr(found[0][1], key) for key in FIGURES} | {"run_id": found[0][0].bench_run_id}
            if found[0][0].step_time_ms is not None:
                row["step_time_ms"] = found[0][0].step_time_ms
            first, last = found[0][1].decode_tok_s, found[-1][1].decode_tok_s
            if len(found) > 1 and first and last:
                row["drift_pct"] = round((last - first) / first * 100, 2)
        baseline_rows.append(row)
    against = {c: found[0][0] for c in concurrencies
               if (found := [(cell, f) for cell in baselines.get(c, []) if (f := kept_figures(cell, load, None))])}
    predictions, prediction_notes = predict_cells(plan, load)
    cells = []
    for step in plan.steps:
        if step.baseline:
            continue
        config = _config_of(step.grid_config)
        for cell in step.cells:
            state = cell.state if cell.state in ("measured", "predicted") else "skipped"
            out: dict[str, Any] = config | {"concurrency": cell.concurrency, "state": state, "reason": cell.error,
                                            "run_id": cell.bench_run_id, "speedup": None, "ci": None,
                                            "warnings": list(cell.warnings)}
            if cell.state != "measured":
                out["reason"] = cell.error or f"not measured ({cell.state})"
            if cell.step_time_ms is not None:  # absent where the server records no step times
                out["step_time_ms"], out["step_time_windows"] = cell.step_time_ms, cell.step_time_windows
            guess = predictions.get(((config["steps"], config["topk"], config["draft_tokens"]), cell.concurrency))
            out["predicted"] = guess.to_json() if guess is not None else None
            if state == "predicted" and guess is not None:  # the figures shown are the prediction's, said so
                out |= {"accept_length": guess.accept_length, "decode_tok_s": guess.decode_tok_s,
                        "speedup": guess.speedup, "ci": list(guess.speedup_ci) if guess.speedup_ci else None}
            elif state == "predicted":
                out["state"] = "skipped"
            figures = kept_figures(cell, load, against.get(cell.concurrency)) if cell.state == "measured" else None
            if figures is not None:
                out |= {key: getattr(figures, key) for key in FIGURES}
                out["speedup"], out["ci"] = figures.speedup, figures.speedup_ci95
                out["production"] = figures.production
                if figures.against_run_id is None:
                    out["reason"] = "no baseline measured at this concurrency"
            elif cell.state == "measured":
                out["state"], out["reason"] = "skipped", "its stored run cannot be read"
            cells.append(out)
    launched = sum(1 for s in plan.steps if s.state not in ("pending", "predicted", "skipped") and not s.baseline)
    saved = sum(1 for s in plan.steps if s.state == "predicted")
    startup = grid.startup_estimate_s or next((s.startup_s for s in plan.steps if s.baseline and s.startup_s), None)
    return {
        "run_id": plan.run_id,
        "base": grid.base,
        "sglang": grid.sglang,
        "configs": sum(1 for s in plan.steps if not s.baseline),
        "launched": launched,
        "concurrency": concurrencies,
        "cells": cells,
        "dropped": grid.dropped,
        "baseline": baseline_rows,
        "crossover": crossovers(cells, concurrencies),
        "recommendation": _with_production(recommend_bands([c for c in cells if c["state"] == "measured"],
                                                           concurrencies), cells),
        "launch_failed": [_config_of(s.grid_config) | {"reason": s.error} for s in plan.steps
                          if s.state == "failed" and (s.error or "").startswith("launch failed")],
        "server_died": [_config_of(s.grid_config) | {"concurrency": c.concurrency, "reason": c.error}
                        for s in plan.steps for c in s.cells if c.state == "failed"
                        and (c.error or "").startswith(f"the server died during concurrency {c.concurrency}:")],
        "restarts_saved": saved,
        "startup_saved_s": round(saved * startup, 1) if startup and saved else (0.0 if not saved else None),
        "prediction_notes": prediction_notes + ([TREE_NOTE] if any(c["topk"] > 1 for c in cells) else []),
    }


def _with_production(bands: list[dict[str, Any]], cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each band's `production`: the verdict of a measured cell it rests on whose τ is beyond production's CIs (a
    sweep with `--against-traffic`), else None."""
    for band in bands:
        band["production"] = next(
            (cell["production"] for cell in cells
             if band["steps"] and cell["state"] == "measured" and cell.get("production")
             and band["concurrency_from"] <= cell["concurrency"] <= band["concurrency_to"]
             and all(cell[k] == band[k] for k in ("steps", "topk", "draft_tokens"))), None)
    return bands


def crossovers(cells: list[dict[str, Any]], concurrencies: list[int]) -> list[dict[str, Any]]:
    """Per configuration: the lowest asked concurrency from which it no longer beats the baseline (speedup below
    1 there and at every higher one measured), None when it beats it at every one measured; only asked
    concurrencies are named, never a value between them."""
    out = []
    configs: dict[tuple[int, int, int], dict[int, float]] = {}
    predicted: set[tuple[int, int, int]] = set()
    for cell in cells:
        key = (cell["steps"], cell["topk"], cell["draft_tokens"])
        speeds = configs.setdefault(key, {})
        if cell["speedup"] is not None and cell["state"] in ("measured", "predicted"):
            speeds[cell["concurrency"]] = cell["speedup"]
            if cell["state"] == "predicted":
                predicted.add(key)
    for (steps, topk, draft), speeds in configs.items():
        measured = [c for c in concurrencies if c in speeds]
        losing = [c for c in measured if all(speeds[h] < 1 for h in measured if h >= c)]
        cross = losing[0] if losing else None
        wins = [c for c in measured if cross is None or c < cross]
        if not measured:
            text = "not measured"
        elif cross is None:
            text = f"beats the baseline at every measured concurrency (up to {measured[-1]})"
        elif not wins:
            text = f"slower than the baseline from the lowest measured concurrency, {cross}"
        else:
            text = f"beats the baseline up to {wins[-1]}, slower from {cross}"
        guessed = (steps, topk, draft) in predicted
        out.append({"steps": steps, "topk": topk, "draft_tokens": draft, "crossover_concurrency": cross,
                    "text": f"predicted (not launched): {text}" if guessed and measured else text,
                    "predicted": guessed})
    return out


def recommend_bands(cells: list[dict[str, Any]], concurrencies: list[int]) -> list[dict[str, Any]]:
    """Per asked concurrency the fastest configuration whose speedup's CI lies above 1, else no speculation
    (`steps: 0`); neighbouring concurrencies with the same choice make one band."""
    bands: list[dict[str, Any]] = []
    for c in concurrencies:
        here = [cell for cell in cells if cell["concurrency"] == c and cell["speedup"] is not None]
        if not here:
            continue
        clear = [cell for cell in here if cell["ci"] and cell["ci"][0] is not None and cell["ci"][0] > 1.0]
        best = max(clear, key=lambda cell: (cell["speedup"], -cell["draft_tokens"]), default=None)
        config = ({"steps": best["steps"], "topk": best["topk"], "draft_tokens": best["draft_tokens"]} if best
                  else {"steps": 0, "topk": 1, "draft_tokens": 1})
        speedup, ci = (best["speedup"], best["ci"]) if best else (1.0, None)
        if bands and {k: bands[-1][k] for k in config} == config:
            bands[-1]["concurrency_to"] = c
            if speedup < bands[-1]["speedup"]:  # the band's least speedup, with that cell's CI
                bands[-1]["speedup"], bands[-1]["ci"] = speedup, ci
            continue
        bands.append({"concurrency_from": c, "concurrency_to": c, **config, "speedup": speedup, "ci": ci})
    return bands


def _speed_text(value: float | None) -> str:
    return f"{value:.2f}×" if value is not None else "–"


def _cell_text(cell: dict[str, Any]) -> str:
    """A cell's speedup, `p` when predicted (not measured), `!` when above the server's usual batch."""
    if cell["state"] == "skipped":
        return "skip"
    return (_speed_text(cell["speedup"]) + ("p" if cell["state"] == "predicted" else "")
            + ("!" if cell["warnings"] else ""))


def format_grid(report: dict[str, Any]) -> str:
    """The grid as text within 80 columns: configuration × concurrency (speedup), the crossovers, what was
    dropped, and the recommendation per load band."""
    concurrencies = report["concurrency"]
    lines = [f"grid sweep {report['run_id']} of {report['base']}: {report['configs']} configurations, "
             f"{report['launched']} launched ({report['sglang']})"]
    per = min(10, max(7, (80 - 16) // max(1, len(concurrencies))))
    shown = concurrencies[: (80 - 16) // per]
    lines.append("speedup over no speculation, per concurrency (measured; – not measured)")
    lines.append("  " + "config".ljust(14) + "".join(f"c={c}".rjust(per) for c in shown))
    base = {row["concurrency"]: row for row in report["baseline"]}
    lines.append("  " + "baseline tok/s".ljust(14) + "".join(
        (f"{base[c]['decode_tok_s']:.0f}" if base.get(c, {}).get("decode_tok_s") else "–").rjust(per) for c in shown))
    rows: dict[tuple[int, int, int], dict[int, dict[str, Any]]] = {}
    for cell in report["cells"]:
        rows.setdefault((cell["steps"], cell["topk"], cell["draft_tokens"]), {})[cell["concurrency"]] = cell
    for (steps, topk, draft), by_c in rows.items():
        text = "".join((_cell_text(by_c[c]) if c in by_c else "–").rjust(per) for c in shown)
        lines.append("  " + GridConfig(steps, topk, draft).label().ljust(14) + text)
    if len(shown) < len(concurrencies):
        lines.append(f"  (concurrencies {', '.join(map(str, concurrencies[len(shown):]))} in --json)")
    if any(cell["warnings"] for cell in report["cells"]):
        lines.append("  ! above the server's CUDA-graph batches or max running requests")
    if any(cell["state"] == "predicted" for cell in report["cells"]):
        lines.append("  p predicted from the longest chain's trace, not measured (its CI in --json)")
    if report.get("restarts_saved"):
        saved_s = report.get("startup_saved_s")
        lines.append(f"restarts saved: {report['restarts_saved']} (configurations predicted, not launched)"
                     + (f", about {format_seconds(saved_s)} of startup" if saved_s else ", startup time unknown"))
    lines += [f"note: {note}" for note in report.get("prediction_notes", [])]
    lines += _step_time_lines(report)
    for item in report["crossover"]:
        lines.append(f"{GridConfig.from_json(item).label()}: {item['text']}")
    for item in report.get("launch_failed", []):
        lines.append(f"launch failed: {_label(item)}: {item['reason'].removeprefix('launch failed: ')}")
    for item in report.get("server_died", []):
        lines.append(f"server died: {_label(item)}: {item['reason'].removeprefix('the server died ')}")
    for item in report["dropped"]:
        lines.append(f"dropped {_label(item)}: {item['reason']}")
    for band in report["recommendation"]:
        span = (f"concurrency {band['concurrency_from']}" if band["concurrency_from"] == band["concurrency_to"]
                else f"concurrency {band['concurrency_from']}–{band['concurrency_to']}")
        tail = f" ({band['speedup']:.2f}× the baseline" + (
            f", CI {band['ci'][0]:.2f}–{band['ci'][1]:.2f})" if band.get("ci") else ")") if band["steps"] else ""
        lines.append(f"recommended at {span}: {_label(band)}{tail}")
        if band.get("production"):
            lines.append(f"  FLAG unrepresentative: {band['production']}")
    if report.get("observed_load"):
        from specmon.sweep.load_weight import format_observed_load

        lines += format_observed_load(report["observed_load"])
    return "\n".join(lines)


def _step_time_lines(report: dict[str, Any]) -> list[str]:
    """The server's own step time beside specmon's ITL, per configuration, where the server records step times."""
    rows = [("no speculation", row) for row in report["baseline"]]
    rows += [(GridConfig.from_json(c).label(), c) for c in report["cells"]]
    by_label: dict[str, list[str]] = {}
    for label, row in rows:
        if row.get("step_time_ms") is not None:
            itl = row.get("itl_ms")
            by_label.setdefault(label, []).append(
                f"c={row['concurrency']} {row['step_time_ms']:.1f}/" + (f"{itl:.1f}" if itl is not None else "–"))
    if not by_label:
        return []
    return (["server step time (SGLang's step_time_dict, 20th percentile) / specmon's ITL median, ms:"]
            + [f"  {label}: " + ", ".join(parts) for label, parts in by_label.items()])
