"""Saved benchmark runs as text for `specmon results`: a compared table, CSV, JSON or a markdown table."""

from __future__ import annotations

import csv
import io
from typing import Any

from specmon.bench.compare import Comparison, baselines_text, compare_all
from specmon.bench.model import BenchResult
from specmon.bench.report import FIGURE_COLUMNS, detail_lines, run_figures, run_flags, symptoms
from specmon.text import aligned_rows, strict_json
from specmon.units import number, number_range

TABLE_HEADERS = ("run", "started", "preset", "url", "status", "ok/failed", "tok/s", "95% CI", "τ", "TTFT ms", "ITL ms",
                 "speedup", "flags")


def select_runs(runs: list[BenchResult], wanted: list[str]) -> tuple[list[BenchResult], list[str]]:
    """The runs whose id starts with one of `wanted` (all when empty), and the ids that matched none."""
    if not wanted:
        return runs, []
    chosen = [r for r in runs if any(r.run_id.startswith(w) for w in wanted)]
    missing = [w for w in wanted if not any(r.run_id.startswith(w) for r in runs)]
    return chosen, missing


def table_rows(runs: list[BenchResult], comparisons: dict[str, Comparison]) -> list[list[str]]:
    """Display cells, one row per run, each speedup against the run's baseline run (``comparisons``, from
    `compare_all`)."""
    rows = []
    for run in runs:
        f = run_figures(run, comparisons.get(run.run_id))
        tau = number(f["accept_length"], ".2f")
        if f["accept_length_bound"] and f["accept_length"] is not None:
            tau += f"/{f['accept_length_bound']}"
        speedup = "–"
        if f["speedup"] is not None:
            speedup = f"{f['speedup']:.2f}× ({number_range(f['speedup_ci95_low'], f['speedup_ci95_high'], '.2f')})"
        rows.append(
            [
                run.run_id,
                f["started"],
                run.preset,
                run.url,
                run.status,
                f"{f['requests_ok']}/{f['requests_failed']}",
                number(f["decode_tok_s_median"]),
                number_range(f["decode_tok_s_ci95_low"], f["decode_tok_s_ci95_high"]),
                tau,
                number(f["ttft_ms_median"], ".1f"),
                number(f["itl_ms_median"], ".2f"),
                speedup,
                ",".join(f["flags"]) or "ok",
            ]
        )
    return rows


def format_table(runs: list[BenchResult], baseline: str | None = None) -> str:
    """The runs as a text table, then which baseline run each speedup is against."""
    comparisons = compare_all(runs, baseline)
    rows = [list(TABLE_HEADERS), *table_rows(runs, comparisons)]
    details = [line for run in runs for line in detail_lines(run)]
    return "\n".join(aligned_rows(rows) + baselines_text(runs, comparisons) + details)


def format_markdown(runs: list[BenchResult], baseline: str | None = None) -> str:
    """The runs as a markdown table, then which baseline run each speedup is against."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    comparisons = compare_all(runs, baseline)
    lines = ["| " + " | ".join(TABLE_HEADERS) + " |", "|" + "---|" * len(TABLE_HEADERS)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in table_rows(runs, comparisons)]
    said = baselines_text(runs, comparisons)
    return "\n".join(lines + ([""] + said if said else []))


def format_csv(runs: list[BenchResult], baseline: str | None = None) -> str:
    comparisons = compare_all(runs, baseline)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=FIGURE_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for run in runs:
        figures = run_figures(run, comparisons.get(run.run_id))
        figures["flags"] = ";".join(figures["flags"])
        writer.writerow({k: "" if v is None else v for k, v in figures.items()})
    return out.getvalue()


def format_json(runs: list[BenchResult], baseline: str | None = None) -> str:
    comparisons = compare_all(runs, baseline)
    data: list[dict[str, Any]] = []
    for run in runs:
        comparison = comparisons.get(run.run_id)
        data.append(run.to_json() | {"comparison": comparison.to_json() if comparison else None,
                                     "flags": run_flags(run, comparison), "symptoms": symptoms(run, comparison)})
    return strict_json(data, indent=2)


FORMATTERS = {"table": format_table, "markdown": format_markdown, "csv": format_csv, "json": format_json}


