"""TrackerPart: what each part of StartupTracker uses of the tracker and of the other parts.

``StartupTracker`` (``tracker``) is its dispatcher and the bases it is made of: ``phases.PhaseTracking``,
``failures.FailureReading``, ``bars.ProgressBars``, ``captures.CaptureReading`` and ``memory.MemoryReading``. Each
is a ``TrackerPart``, which names with their types the fields and methods that one of them sets or defines and
another uses, so that the type checker checks each part on its own and each use against the one definition.
It holds nothing at run time: the fields are set by the tracker's ``__init__`` and the parts' ``_init_*``, and
the methods are declared for the type checker only (``StartupTracker`` defines every one, through its bases).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from datetime import datetime

    from specmon.logs.errors import TracebackReader
    from specmon.logs.model import (
        Capture,
        LineKind,
        Phase,
        StartupState,
        StepStatus,
        TrackerEvent,
        WeightLoad,
    )
    from specmon.logs.versions import VersionFit


class TrackerPart:
    """A part of ``StartupTracker`` (see the module docstring): the tracker's fields and methods it may use."""

    # The tracker's (``tracker``).
    _state: StartupState
    _ts: datetime | None  # the log's latest timestamp
    _ready: bool
    _over: bool  # failed or stopped: only errors are still read
    _scheduler_up: bool  # max_total_num_tokens or a worker node's health server: startup moved on
    _seen_rank0: bool
    _end_seen: set[tuple[str, str]]  # graphs and weight loads whose end line was read
    _final_rank0: set[tuple[str, str]]  # ... from rank 0, whose figures are kept
    _fit: VersionFit  # the SGLang versions whose lines the log's milestones fit
    # ``failures``'s.
    _tb: TracebackReader | None  # the traceback being read
    # ``captures``'s.
    _capture: Capture | None  # the capture progress frames feed
    _bs_from_line: set[tuple[str, str]]  # the graphs whose batch sizes a line listed
    # ``memory``'s.
    _load_count: dict[str, int]  # rank tags -> how many weight loads they began

    if TYPE_CHECKING:
        # The tracker's.
        @property
        def clock(self) -> datetime | None: ...
        def feed_line(self, line: str) -> LineKind | None: ...
        def _count_recognized(self, ts_text: str | None) -> bool: ...
        def _message(self, counted: bool, tags: str, level: str | None, msg: str) -> LineKind | None: ...
        def _rank_ok(self, tags: str) -> bool: ...
        def _narrow(self, name: str, msg: str) -> None: ...
        def _emit(self, event: TrackerEvent) -> None: ...
        def _capture_event(self, capture: Capture) -> None: ...
        def _weights_event(self, weight: WeightLoad) -> None: ...

        # ``phases``'s.
        def _phase_name(self) -> str | None: ...
        def _enter(self, name: str) -> None: ...
        def _finish_phase(self, phase: Phase, status: StepStatus) -> None: ...
        def _stopped(self, cause: str) -> None: ...

        # ``failures``'s.
        def _startup_phase(self, phase: str | None) -> str | None: ...

        # ``captures``'s.
        def _capture_for(self, graph: str, role: str, label: str, begin_msg: str | None) -> Capture: ...
        def _finish_capture(self, capture: Capture, end_msg: str | None) -> None: ...
        def _next_inferred(self) -> Capture | None: ...

        # ``memory``'s.
        def _weight_frame(self, n: int, total: int) -> None: ...
        def _memory(self, step: str, avail_gb: float) -> None: ...
