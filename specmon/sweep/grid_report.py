"""A grid sweep's result: each (configuration, concurrency) cell against the baseline measured at the same
concurrency (speedup paired per prompt, with its CI), each configuration's crossover concurrency, and a
recommendation per load band. Pure: the runs are given; no I/O."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from specmon.bench.compare import compare
from specmon.bench.stats import ci95

if TYPE_CHECKING:
    from specmon.bench.model import BenchResult
    from specmon.sweep.plan import SweepCell, SweepPlan

Load = Callable[[str | None], "BenchResult | None"]


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def cell_figures(run: BenchResult, concurrency: int) -> dict[str, Any]:
    """A cell's measured figures: per-request decode tok/s, total output tok/s (concurrency x tokens over the
    requests' end-to-end time: the streams are held busy), τ, TTFT and ITL, each with its bootstrap 95% CI."""
    ok = [r for r in run.measured if r.ok]
    rates = [r.completion_tokens / r.e2e_s * concurrency for r in ok if r.e2e_s and r.e2e_s > 0]
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    itl = [gap for r in ok for gap in r.itl_ms()]
    summary = run.summary
    return {
        "decode_tok_s": _finite(summary.median_tok_s),
        "decode_ci95": summary.tok_s_ci95,
        "output_tok_s": sum(rates) / len(rates) if rates else None,
        "output_ci95": ci95(rates, statistic=lambda v: sum(v) / len(v)) if rates else None,
        "accept_length": _finite(summary.accept_length.token_weighted),
        "ttft_s": (summary.ttft_s.median if summary.ttft_s else None),
        "ttft_ci95": ci95(ttft) if ttft else None,
        "itl_ms": (summary.itl_ms.median if summary.itl_ms else None),
        "itl_ci95": ci95(itl[:20_000]) if itl else None,
    }


def cell_speedup(run: BenchResult, baseline: BenchResult) -> tuple[float | None, list[float | None] | None]:
    """A cell's speedup over the baseline at its concurrency: the geometric mean of the per-prompt decode tok/s
    ratios, with its bootstrap 95% CI (`compare`'s pairing)."""
    speedup = compare(run, baseline).speedup or {}
    return _finite(speedup.get("geomean")), speedup.get("ci95")


def _config_of(values: list[int] | None) -> dict[str, int]:
    steps, topk, draft = values or (0, 1, 1)
    return {"steps": steps, "topk": topk, "draft_tokens": draft}


def _label(config: dict[str, int]) -> str:
    if not config["steps"]:
        return "no speculation"
    return f"steps {config['steps']} topk {config['topk']} draft {config['draft_tokens']}"


def build_grid_report(plan: SweepPlan, load: Load) -> dict[str, Any]:
    """The issue's JSON: configs, launched, cells, dropped, baseline, crossover, recommendation."""
    grid = plan.grid
    assert grid is not None
    concurrencies = grid.concurrency
    baselines: dict[int, list[tuple[SweepCell, BenchResult]]] = {c: [] for c in concurrencies}
    for step in plan.steps:
        if step.baseline:
            for cell in step.cells:
                if cell.state == "measured" and (run := load(cell.bench_run_id)) is not None:
                    baselines.setdefault(cell.concurrency, []).append((cell, run))
    baseline_rows = []
    for c in concurrencies:
        found = baselines.get(c) or []
        row: dict[str, Any] = {"concurrency": c, "decode_tok_s": None, "output_tok_s": None, "drift_pct": None,
                               "run_id": None}
        if found:
            row |= cell_figures(found[0][1], c) | {"run_id": found[0][1].run_id}
            first, last = found[0][1].summary.median_tok_s, found[-1][1].summary.median_tok_s
            if len(found) > 1 and first and last:
                row["drift_pct"] = round((last - first) / first * 100, 2)
        baseline_rows.append(row)
    cells = []
    for step in plan.steps:
        if step.baseline:
            continue
        config = _config_of(step.grid_config)
        for cell in step.cells:
            out: dict[str, Any] = config | {"concurrency": cell.concurrency, "state": "measured"
                                            if cell.state == "measured" else "skipped", "reason": cell.error,
                                            "run_id": cell.bench_run_id, "speedup": None, "ci": None,
                                            "warnings": list(cell.warnings)}
            if cell.state != "measured":
                out["reason"] = cell.error or f"not measured ({cell.state})"
            run = load(cell.bench_run_id) if cell.state == "measured" else None
            if run is not None:
                out |= cell_figures(run, cell.concurrency)
                against = baselines.get(cell.concurrency) or []
                if against:
                    out["speedup"], out["ci"] = cell_speedup(run, against[0][1])
                else:
                    out["reason"] = "no baseline measured at this concurrency"
            elif cell.state == "measured":
                out["state"], out["reason"] = "skipped", "its stored run cannot be read"
            cells.append(out)
    launched = sum(1 for s in plan.steps if s.state not in ("pending",) and not s.baseline)
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
        "recommendation": recommend_bands(cells, concurrencies),
    }


def crossovers(cells: list[dict[str, Any]], concurrencies: list[int]) -> list[dict[str, Any]]:
    """Per configuration: the lowest asked concurrency from which it no longer beats the baseline (speedup below
    1 there and at every higher one measured), None when it beats it at every one measured; only asked
    concurrencies are named, never a value between them."""
    out = []
    configs: dict[tuple[int, int, int], dict[int, float]] = {}
    for cell in cells:
        key = (cell["steps"], cell["topk"], cell["draft_tokens"])
        speeds = configs.setdefault(key, {})
        if cell["speedup"] is not None:
            speeds[cell["concurrency"]] = cell["speedup"]
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
        out.append({"steps": steps, "topk": topk, "draft_tokens": draft, "crossover_concurrency": cross,
                    "text": text})
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


def format_grid(report: dict[str, Any]) -> str:
    """The grid as text within 80 columns: configuration × concurrency (speedup), the crossovers, what was
    dropped, and the recommendation per load band."""
    concurrencies = report["concurrency"]
    lines = [f"grid sweep {report['run_id']} of {report['base']}: {report['configs']} configurations, "
             f"{report['launched']} launched ({report['sglang']})"]
    per = max(7, (80 - 16) // max(1, len(concurrencies)))
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
        text = "".join((_speed_text(by_c[c]["speedup"]) + ("!" if by_c[c]["warnings"] else "") if c in by_c
                        else "–").rjust(per) for c in shown)
        lines.append("  " + f"s{steps} k{topk} d{draft}".ljust(14) + text)
    if len(shown) < len(concurrencies):
        lines.append(f"  (concurrencies {', '.join(map(str, concurrencies[len(shown):]))} in --json)")
    if any(cell["warnings"] for cell in report["cells"]):
        lines.append("  ! above the server's CUDA-graph batches or max running requests")
    for item in report["crossover"]:
        lines.append(f"s{item['steps']} k{item['topk']} d{item['draft_tokens']}: {item['text']}")
    for item in report["dropped"]:
        lines.append(f"dropped steps {item['steps']} topk {item['topk']} draft {item['draft_tokens']}: "
                     f"{item['reason']}")
    for band in report["recommendation"]:
        span = (f"concurrency {band['concurrency_from']}" if band["concurrency_from"] == band["concurrency_to"]
                else f"concurrency {band['concurrency_from']}–{band['concurrency_to']}")
        tail = f" ({band['speedup']:.2f}× the baseline" + (
            f", CI {band['ci'][0]:.2f}–{band['ci'][1]:.2f})" if band.get("ci") else ")") if band["steps"] else ""
        lines.append(f"recommended at {span}: {_label(band)}{tail}")
    if report.get("observed_load"):
        from specmon.sweep.load_weight import format_observed_load

        lines += format_observed_load(report["observed_load"])
    return "\n".join(lines)
