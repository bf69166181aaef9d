"""A sweep's plan and its saved progress: which presets in which order (the baseline first and last, to measure
drift), and what each step has done, in a private JSON file rewritten atomically after every step, so a sweep
killed at any moment resumes with what is missing and measures nothing twice."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

import msgspec
from msgspec import Meta

from specmon.inputs import MIB, InputError, load_json_file
from specmon.private_files import make_private_dir, open_private_file
from specmon.typed import FieldError, Seconds, Time, convert

if TYPE_CHECKING:
    from specmon.launch.presets import Preset

MAX_PLAN_BYTES = 4 * MIB


class SweepError(Exception):
    """A sweep cannot be planned or resumed (no baseline, a bad state file, an unknown run id)."""


StepState = Literal["pending", "measured", "failed", "skipped", "cancelled", "predicted"]
"""predicted: a grid's configuration not launched, its cells predicted from the longest chain's trace."""
STEP_STATES: tuple[str, ...] = get_args(StepState)
TO_DO = ("pending", "cancelled")
"""The states of the steps a resume runs."""
Leave = Literal["best", "baseline", "none"]
RunnerPid = Annotated[int, Meta(ge=1, description="a process id")]


CI95 = list[float | None] | None
Pair = tuple[float, float] | None


class CellFigures(msgspec.Struct):
    """A measured grid cell's figures (`grid_report.cell_figures`, and its speedup over the baseline cell at its
    concurrency), computed once when the cell was measured and kept with it: a report reads them rather than redo
    their bootstrap CIs. They stand only while `run_id` and `against_run_id` are still the runs they came from."""

    run_id: str
    against_run_id: str | None = None
    """The baseline run the speedup is over (None: no baseline measured at this concurrency, or a baseline cell)."""
    decode_tok_s: float | None = None
    decode_ci95: CI95 = None
    output_tok_s: float | None = None
    output_ci95: CI95 = None
    accept_length: float | None = None
    ttft_s: float | None = None
    ttft_ci95: CI95 = None
    itl_ms: float | None = None
    itl_ci95: CI95 = None
    speedup: float | None = None
    speedup_ci95: CI95 = None
    production: str | None = None
    """The run's verdict against production when beyond the CIs (a sweep with `--against-traffic`), else None."""


class CellPrediction(msgspec.Struct, frozen=True):
    """One (chain configuration, concurrency) cell as the longest chain measured at that concurrency predicts it."""

    accept_length: float
    accept_ci: Pair
    decode_tok_s: float | None
    decode_ci: Pair
    """From the acceptance CI at the fitted step cost."""
    speedup: float | None
    speedup_ci: Pair
    """Over the baseline's measured decode tok/s at the same concurrency."""
    source: str
    """Which run predicted it, and from what step cost."""

    def to_json(self) -> dict[str, Any]:
        return {"accept_length": self.accept_length, "accept_ci": _pair(self.accept_ci),
                "decode_tok_s": self.decode_tok_s, "decode_ci": _pair(self.decode_ci), "speedup": self.speedup,
                "ci": _pair(self.speedup_ci), "predicted_from": self.source}


def _pair(value: Pair) -> list[float] | None:
    return list(value) if value else None


class ReplayedLength(msgspec.Struct):
    """A chain length's acceptance as the replay of a longer chain's per-step trace gives it, with its CI."""

    draft_tokens: int
    accept_length: float
    accept_ci: Pair = None


class PredictionsAt(msgspec.Struct):
    """A grid's replay at one concurrency: the longest chain measured there (`from_run`) replayed at the shorter
    chains' `lengths` (the costly part, its bootstrap CIs), kept and done again only when that run or those
    lengths change. The step-cost fit that turns acceptance into tok/s is redone from the cells' kept figures."""

    concurrency: int
    from_run: str
    lengths: list[int]
    replayed: list[ReplayedLength] = msgspec.field(default_factory=list)
    note: str | None = None
    """Why this concurrency predicts nothing (None: it replayed)."""


class SweepCell(msgspec.Struct):
    """A grid step's benchmark at one concurrency, on the server the step started (no restart between cells)."""

    concurrency: Annotated[int, Meta(ge=1, le=1_000_000)]
    state: StepState = "pending"
    bench_run_id: str | None = None
    measure_s: Seconds | None = None
    error: str | None = None
    warnings: list[str] = msgspec.field(default_factory=list)
    """Where the figure describes something else than the server's usual batch (above its CUDA-graph batch sizes
    or its --max-running-requests)."""
    step_time_ms: Annotated[float, Meta(ge=0)] | None = None
    """The server's own step time at this concurrency (SGLang's step_time_dict, 20th percentile, as
    bench_speculative.py reads it) over the log windows this cell added; None where the server records none."""
    step_time_windows: Annotated[int, Meta(ge=0)] | None = None
    figures: CellFigures | None = None
    """Its figures, computed when it was measured (None: not measured, or a plan stored before they were kept)."""


class SweepStep(msgspec.Struct):
    """One preset's turn in a sweep (a grid's: one server, measured at each of its `cells`' concurrencies)."""

    preset: str
    baseline: bool
    draft_tokens: int | None
    state: StepState = "pending"
    bench_run_id: str | None = None
    startup_s: Seconds | None = None
    measure_s: Seconds | None = None
    error: str | None = None
    grid_config: list[int] | None = None
    """A grid step's [steps, topk, draft tokens] as SGLang runs them ([0, 1, 1]: the base without speculation)."""
    cells: list[SweepCell] = msgspec.field(default_factory=list)


class GridPlan(msgspec.Struct):
    """What a grid sweep was asked (`specmon sweep BASE --steps ... --concurrency ...`) and what it dropped."""

    base: str
    steps: list[int]
    topk: list[int]
    draft_tokens: list[int]
    concurrency: list[int]
    dropped: list[dict[str, Any]] = msgspec.field(default_factory=list)
    """{"steps", "topk", "draft_tokens", "reason"} per combination not launched."""
    sglang: str = ""
    """Whose rules judged the combinations."""
    startup_estimate_s: Seconds | None = None
    """The base preset's last measured startup (None: unknown)."""
    predictions: list[PredictionsAt] = msgspec.field(default_factory=list)
    """The predicted cells per concurrency, kept with the runs they came from."""


class SweepPlan(msgspec.Struct):
    """A sweep: its presets in order and the benchmark settings every step uses. The state file's declaration:
    a file is read back through it strictly (`from_json`)."""

    run_id: str
    steps: list[SweepStep]
    requests: int | None = None
    created_at: Time = msgspec.field(default_factory=time.time)
    finished: bool = False
    left_serving: str | None = None
    leave: Leave = "best"
    """What the sweep leaves serving at its end: "best" (the recommended preset), "baseline" or "none"."""
    recommended: str | None = None
    """The recommendation from what is measured so far (saved after every step)."""
    runner_pid: RunnerPid | None = None
    runner_started: Time | None = None
    """The process running the sweep (pid and start time): gone while unfinished means interrupted."""
    server_id: str | None = None
    """The server the sweep launched last (its id in `specmon ps`): the only one it replaces from then on."""
    cancelled: bool = False
    """Cancelled (Ctrl+C, the app's Cancel) and not resumed since."""
    grid: GridPlan | None = None
    """A grid sweep's axes (None: a sweep of named presets; plans stored before grids read as such)."""
    leave_s: Seconds | None = None
    """The wall time of what the sweep did last: the switch to the preset it leaves serving, or the stop (None: not
    yet, or a plan stored before it was kept)."""

    @property
    def next_step(self) -> SweepStep | None:
        return next((s for s in self.steps if s.state in TO_DO), None)

    def to_json(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)

    @classmethod
    def from_json(cls, data: Any) -> SweepPlan:
        """A plan read back from its file; SweepError when the file is not one."""
        try:
            return convert(data, cls, table="an object")
        except FieldError as exc:
            raise SweepError(f"not a sweep state file: {exc.message}") from None


def new_sweep_id() -> str:
    """A sweep id that sorts by start time."""
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:4]


def is_baseline(preset: Preset) -> bool:
    """A preset without speculative decoding."""
    return not preset.speculative.enabled


def plan_sweep(presets: Sequence[Preset], baseline: Preset | None = None, requests: int | None = None) -> SweepPlan:
    """The baseline (named, else the one preset without speculation among ``presets``) first and last, the
    speculative presets between, longest draft chain first."""
    if baseline is None:
        plain = [p for p in presets if is_baseline(p)]
        if len(plain) != 1:
            found = ", ".join(p.name for p in plain) or "none"
            raise SweepError(f"a sweep needs exactly one preset without speculation as its baseline (found: {found})")
        baseline = plain[0]
    speculative = [p for p in presets if p.name != baseline.name]
    if not speculative:
        raise SweepError("a sweep needs at least one speculative preset besides the baseline")
    speculative.sort(key=lambda p: -(p.speculative.effective_draft_tokens or 0))
    run_id = new_sweep_id()

    def step(preset: Preset, base: bool) -> SweepStep:
        draft = preset.speculative.effective_draft_tokens
        whole = isinstance(draft, int) and not isinstance(draft, bool)  # a preset's flag may hold anything
        return SweepStep(preset.name, base, draft if whole and not base else None)

    steps = [step(baseline, True), *(step(p, False) for p in speculative), step(baseline, True)]
    return SweepPlan(run_id=run_id, steps=steps, requests=requests)


class SweepStore:
    """Sweep state files (``<dir>/<run_id>.json``, 0600 in a 0700 directory, never through a symlink)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def save(self, plan: SweepPlan) -> Path:
        make_private_dir(self.directory)
        path = self.directory / f"{plan.run_id}.json"
        partial = path.with_suffix(".json.partial")
        fd = open_private_file(partial)
        with os.fdopen(fd, "wb") as handle:  # msgspec's encoder: a 48-configuration plan in a millisecond
            handle.write(msgspec.json.format(msgspec.json.encode(plan), indent=1))
        os.replace(partial, path)
        return path

    def load(self, run_id: str) -> SweepPlan:
        path = self.directory / f"{run_id}.json"
        if path.is_symlink():
            raise SweepError(f"{path} is a symbolic link; refusing it")
        try:
            return SweepPlan.from_json(load_json_file(path, MAX_PLAN_BYTES, what="sweep plan", follow=False, finite=True))
        except FileNotFoundError:
            raise SweepError(f"no sweep {run_id!r} in {self.directory}") from None
        except InputError as exc:  # it names the file
            raise SweepError(f"cannot read {exc}") from None
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SweepError(f"cannot read {path}: {exc}") from None

    def latest_unfinished(self) -> SweepPlan | None:
        """The most recent sweep that did not finish, if any."""
        found = self.unfinished(1)
        return found[0] if found else None

    def unfinished(self, limit: int) -> list[SweepPlan]:
        """Up to ``limit`` sweeps that did not finish, the newest first (unreadable files are skipped)."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in sorted(self.directory.glob("*.json"), reverse=True):
            try:
                plan = self.load(path.stem)
            except SweepError:
                continue
            if not plan.finished:
                found.append(plan)
                if len(found) >= limit:
                    break
        return found
