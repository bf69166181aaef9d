"""The Benchmark pane's picture of a grid sweep: total output tok/s against concurrency, one line per configuration
and the baseline's, and the configuration × concurrency table of speedups (win, loss or unclear by the CI;
predicted cells marked), with the recommendation per load band and, given the running counts the Live view kept,
weighted by that load. Built off the UI thread from the stored sweep and the runs the app already holds."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specmon.sweep.grid import GridConfig
from specmon.sweep.grid_report import build_grid_report
from specmon.sweep.load_weight import format_observed_load, weigh_by_load
from specmon.sweep.plan import SweepError, SweepPlan, SweepStore

if TYPE_CHECKING:
    from specmon.bench.model import BenchResult

MAX_SWEEPS_READ = 20
"""The newest sweep files looked through for the grid the newest run belongs to."""


@dataclass(frozen=True)
class GridCell:
    """One configuration's speedup at one concurrency: its text ("1.42×", "~1.10×" predicted, "–" none) and
    verdict: "win", "loss" (the CI on one side of 1), "unclear", "predicted" or "none"."""

    text: str
    verdict: str


@dataclass(frozen=True)
class GridLine:
    """One configuration's (or the baseline's) total output tok/s at each concurrency measured."""

    label: str
    points: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class GridPaneModel:
    """What the pane shows of one grid sweep."""

    run_id: str
    title: str
    concurrency: tuple[int, ...]
    lines: tuple[GridLine, ...]
    """The baseline's first."""
    rows: tuple[tuple[str, tuple[GridCell, ...]], ...]
    notes: tuple[str, ...]
    """The recommendation per load band, then the weighting by observed load (when there was history)."""


def _verdict(cell: dict[str, Any]) -> GridCell:
    speedup = cell.get("speedup")
    if speedup is None:
        return GridCell("–", "none")
    if cell.get("state") == "predicted":
        return GridCell(f"~{speedup:.2f}×", "predicted")
    low, high = (cell.get("ci") or [None, None])[:2]
    low = speedup if low is None else low
    high = speedup if high is None else high
    return GridCell(f"{speedup:.2f}×", "win" if low > 1 else "loss" if high < 1 else "unclear")


def _label(item: dict[str, Any]) -> str:
    return GridConfig.from_json(item).label()


def grid_pane(plan: SweepPlan, load: Callable[[str | None], BenchResult | None],
              observed: tuple[Sequence[float | None], float, str] | None = None) -> GridPaneModel:
    """The model of a grid sweep; ``observed``: running counts, the span they cover (s) and where they are from."""
    report = build_grid_report(plan, load)
    concurrency = tuple(report["concurrency"])
    base = tuple((row["concurrency"], row["output_tok_s"]) for row in report["baseline"]
                 if row.get("output_tok_s") is not None)
    by_config: dict[str, dict[int, dict[str, Any]]] = {}
    for cell in report["cells"]:
        by_config.setdefault(_label(cell), {})[cell["concurrency"]] = cell
    lines = [GridLine("no speculation", base)]
    rows = []
    for label, cells in by_config.items():
        lines.append(GridLine(label, tuple((c, cells[c]["output_tok_s"]) for c in concurrency
                                           if c in cells and cells[c].get("output_tok_s") is not None)))
        rows.append((label, tuple(_verdict(cells[c]) if c in cells else GridCell("–", "none") for c in concurrency)))
    notes = []
    for band in report["recommendation"]:
        span = (str(band["concurrency_from"]) if band["concurrency_from"] == band["concurrency_to"]
                else f"{band['concurrency_from']}–{band['concurrency_to']}")
        tail = f" ({band['speedup']:.2f}×)" if band["steps"] else ""
        notes.append(f"at {span}: {_label(band)}{tail}")
    if observed is not None and (weighted := weigh_by_load(report, *observed)) is not None:
        notes += format_observed_load(weighted)
    title = f"grid sweep {plan.run_id}: {report['configs']} configurations, speedup per concurrency"
    return GridPaneModel(plan.run_id, title, concurrency, tuple(lines), tuple(rows), tuple(notes))


def sweep_store() -> SweepStore:
    """specmon's stored sweeps (`<state dir>/sweeps`)."""
    from specmon.oncall.state import state_dir

    return SweepStore(state_dir() / "sweeps")


def grid_of_newest(results: Sequence[BenchResult], store: SweepStore,
                   observed: tuple[Sequence[float | None], float, str] | None = None) -> GridPaneModel | None:
    """The grid sweep the newest of ``results`` was measured in (None: that run is no grid sweep's), read with
    the runs in ``results``."""
    if not results:
        return None
    newest = results[-1].run_id
    by_id = {r.run_id: r for r in results}
    try:
        paths = sorted(store.directory.glob("*.json"), reverse=True)[:MAX_SWEEPS_READ]
    except OSError:
        return None
    for path in paths:
        try:
            plan = store.load(path.stem)
        except SweepError:
            continue
        if plan.grid is not None and any(cell.bench_run_id == newest for step in plan.steps for cell in step.cells):
            return grid_pane(plan, lambda run_id: by_id.get(run_id or ""), observed)
    return None
