"""Measured curves read from the stored grid sweeps: for a serving configuration (model, speculative algorithm,
steps, topk, draft tokens, as the server's /server_info says them) the newest grid sweep that measured it, its
speedup over the sweep's own baseline at each measured concurrency (with its CI), and its crossover. Read only:
the sweep's plan file and the benchmark runs it names."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from specmon.live.paying import CurvePoint, MeasuredCurve, ServingConfig
from specmon.sweep.grid_report import cell_speedup, crossovers
from specmon.sweep.plan import SweepError, SweepPlan, SweepStore

if TYPE_CHECKING:
    from specmon.bench.model import BenchResult
    from specmon.bench.results import ResultStore

Load = Callable[[str | None], "BenchResult | None"]
MAX_SWEEPS_READ = 200
"""The newest sweep files looked through for a configuration (older ones are not read)."""


def _runs_as(run: BenchResult, config: ServingConfig) -> bool:
    """Whether a stored run's server ran ``config`` (its model and effective speculative settings)."""
    server, spec = run.server, run.server.speculative
    return (server.model_path == config.model_path
            and (spec.algorithm or "").upper() == (config.algorithm or "").upper()
            and (spec.num_steps, spec.eagle_topk, spec.num_draft_tokens)
            == (config.steps, config.topk, config.draft_tokens))


def curve_of(plan: SweepPlan, config: ServingConfig, load: Load) -> MeasuredCurve | None:
    """``config``'s curve in one grid sweep: each concurrency where both it and the baseline were measured on the
    same model; None when the sweep did not measure it."""
    if plan.grid is None:
        return None
    wanted = [config.steps, config.topk, config.draft_tokens]
    step = next((s for s in plan.steps if not s.baseline and s.grid_config == wanted), None)
    if step is None:
        return None
    baselines: dict[int, BenchResult] = {}
    for base in (s for s in plan.steps if s.baseline):
        for cell in base.cells:
            if cell.state == "measured" and cell.concurrency not in baselines:
                run = load(cell.bench_run_id)
                if run is not None and run.server.model_path == config.model_path:
                    baselines[cell.concurrency] = run
    points, cells, finished = [], [], []
    for cell in step.cells:
        baseline = baselines.get(cell.concurrency)
        run = load(cell.bench_run_id) if cell.state == "measured" and baseline is not None else None
        if run is None or baseline is None or not _runs_as(run, config):
            continue
        speedup, ci = cell_speedup(run, baseline)
        if speedup is None:
            continue
        bounds = (float(ci[0]), float(ci[1])) if ci and None not in ci[:2] else None  # type: ignore[arg-type]
        points.append(CurvePoint(cell.concurrency, speedup, bounds))
        cells.append({"steps": config.steps, "topk": config.topk, "draft_tokens": config.draft_tokens,
                      "concurrency": cell.concurrency, "speedup": speedup, "state": "measured"})
        finished.append(run.finished_at or run.started_at)
    if not points:
        return None
    crossover = crossovers(cells, sorted(p.concurrency for p in points))[0]["crossover_concurrency"]
    return MeasuredCurve(plan.run_id, max(finished), tuple(sorted(points, key=lambda p: p.concurrency)), crossover)


def find_curve(config: ServingConfig, plans: Iterable[SweepPlan], load: Load) -> MeasuredCurve | None:
    """The curve of ``config`` in the first of ``plans`` (newest first) that measured it."""
    for plan in plans:
        if (curve := curve_of(plan, config, load)) is not None:
            return curve
    return None


class StoredCurves:
    """A `CurveFinder` over specmon's stored sweeps and benchmark runs: each configuration's curve is read once
    and again only when a sweep file changes (the Live view asks every 2 s)."""

    def __init__(self, sweeps: SweepStore | None = None, results: ResultStore | None = None) -> None:
        self._sweeps = sweeps
        self._results = results
        self._lock = threading.Lock()
        self._listing: tuple[tuple[str, int, int], ...] | None = None
        self._cache: dict[ServingConfig, MeasuredCurve | None] = {}

    def __call__(self, config: ServingConfig) -> MeasuredCurve | None:
        with self._lock:
            listing = self._list()
            if listing != self._listing:
                self._listing, self._cache = listing, {}
            if config not in self._cache:
                names = [name for name, _, _ in listing]
                self._cache[config] = find_curve(config, self._plans(names), self._load)
            return self._cache[config]

    @property
    def sweeps(self) -> SweepStore:
        if self._sweeps is None:
            from specmon.oncall.state import state_dir

            self._sweeps = SweepStore(state_dir() / "sweeps")
        return self._sweeps

    def _list(self) -> tuple[tuple[str, int, int], ...]:
        """The newest sweep files (name, mtime, size), the newest first (sweep ids sort by start time)."""
        try:
            with os.scandir(self.sweeps.directory) as entries:
                found = [(e.name[:-5], e.stat(follow_symlinks=False)) for e in entries
                         if e.name.endswith(".json") and e.is_file(follow_symlinks=False)]
        except OSError:
            return ()
        found.sort(reverse=True)
        return tuple((name, st.st_mtime_ns, st.st_size) for name, st in found[:MAX_SWEEPS_READ])

    def _plans(self, names: list[str]) -> Iterator[SweepPlan]:
        for name in names:
            try:
                yield self.sweeps.load(name)
            except SweepError:
                continue

    def _load(self, run_id: str | None) -> BenchResult | None:
        if not run_id:
            return None
        if self._results is None:
            from specmon.bench.results import ResultStore

            self._results = ResultStore()
        try:
            return self._results.load(run_id)
        except (OSError, ValueError, KeyError):
            return None
