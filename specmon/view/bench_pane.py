"""The Benchmark pane's model: per preset, the table cells, the tok/s series and the acceptance of the run it shows.
Built off the UI thread: each comparison with the baseline bootstraps its speedup's CI."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from specmon.bench.compare import Comparison, compare_all
from specmon.bench.model import BenchResult
from specmon.bench.report import production_gap, run_figures
from specmon.units import number, number_range
from specmon.view.state import bench_rows

if TYPE_CHECKING:
    from specmon.view.grid_pane import GridPaneModel

COLUMNS = (
    ("preset", "preset"),
    ("runs", "n"),
    ("tok_s", "tok/s"),
    ("ci", "CI95"),
    ("tau", "τ"),
    ("ttft", "TTFT ms"),
    ("speedup", "speedup"),
    ("flags", "flags"),
)
"""The table's columns: key and header."""


@dataclass(frozen=True)
class PresetRow:
    """One preset's row: its cells by column key (and ``speedup_short``), its run's decode tok/s per request and
    its token-weighted acceptance length with the CI (None: not measured)."""

    cells: dict[str, str]
    series: tuple[float, ...] = ()
    accept: tuple[float, tuple[float, float] | None] | None = None


@dataclass(frozen=True)
class BenchPaneModel:
    """What the Benchmark pane shows of the stored runs: one row per preset, and the line that says the last run."""

    results: tuple[BenchResult, ...] = ()
    rows: dict[str, PresetRow] = field(default_factory=dict)
    note: str | None = None
    production: str | None = None
    """The last run's verdict against production when the gap is beyond the CIs (flag "unrepresentative")."""
    grid: GridPaneModel | None = None
    """The grid sweep the newest run was measured in, shown instead of the per-preset charts and table."""


def bench_pane(results: Sequence[BenchResult], baseline: str | None = None,
               grid: GridPaneModel | None = None) -> BenchPaneModel:
    """The pane's model of `results` (every run to compare, oldest first), speedups against `baseline`'s runs;
    `grid`: the grid sweep's picture (`specmon.view.grid_pane.grid_of_newest`)."""
    rows = bench_rows(results)
    comparisons = compare_all([r for r in results if r.status == "finished"], baseline)
    shown: dict[str, PresetRow] = {}
    for preset, (result, runs) in rows.items():
        accept = result.summary.accept_length
        shown[preset] = PresetRow(
            result_row(result, comparisons.get(result.run_id), runs),
            tuple(r.decode_tok_s for r in result.measured if r.ok and r.decode_tok_s),
            (accept.token_weighted, tuple(accept.ci95) if accept.ci95 else None)  # type: ignore[arg-type]
            if accept.token_weighted is not None else None,
        )
    note = None
    if rows:
        last = results[-1]
        note = f"last run: {last.preset} {last.status}, {len(rows)} preset(s) compared"
    return BenchPaneModel(tuple(results), shown, note, production_gap(results[-1]) if results else None, grid)


def result_row(result: BenchResult, comparison: Comparison | None, runs: int = 1) -> dict[str, str]:
    """The table cells of one preset's latest result."""
    f = run_figures(result, comparison)
    tau, bound = f["accept_length"], f["accept_length_bound"]
    if f["speedup"] is not None:
        short = f"{f['speedup']:.2f}×"
        speedup = f"{short} [{number_range(f['speedup_ci95_low'], f['speedup_ci95_high'], '.2f')}]"
    else:
        speedup = "baseline" if comparison is not None and comparison.run_id == comparison.baseline_run_id else "–"
        short = speedup
    return {
        "preset": result.preset,
        "runs": f"{f['requests_ok']}" + (f"×{runs}" if runs > 1 else ""),
        "tok_s": number(f["decode_tok_s_median"]),
        "ci": number_range(f["decode_tok_s_ci95_low"], f["decode_tok_s_ci95_high"]),
        "tau": number(tau, ".2f") + (f"/{bound}" if bound and tau is not None else ""),
        "ttft": number(f["ttft_ms_median"], ".0f"),
        "speedup": speedup,
        "speedup_short": short,
        "flags": ",".join(f["flags"]) or "ok",
    }
