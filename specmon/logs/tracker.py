"""StartupTracker: pure, incremental recognition of an SGLang server's startup from its log lines.

This module is the dispatcher: it reads each line's prefix and hands its message to the part of the tracker that
knows it, and it keeps what the parts share: the log's time, the per-rank bookkeeping, the SGLang versions the log
fits (``versions.VersionFit``) and the events. Each part is a base of ``StartupTracker`` in its own module: the
phases and the server's life (``phases``), progress bars and runs of frames (``bars``; the frames themselves are
``frames``'s), CUDA-graph captures (``captures``), weight loads, KV pools and memory steps (``memory``), failures
(``failures``, with ``causes`` and ``errors``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime

from specmon.logs import patterns
from specmon.logs.bars import ProgressBars
from specmon.logs.captures import CaptureReading
from specmon.logs.errors import TracebackReader
from specmon.logs.failures import FailureReading
from specmon.logs.frames import LogItem
from specmon.logs.memory import MemoryReading
from specmon.logs.model import (
    MAX_EARLIER_LAUNCHES,
    Capture,
    CaptureProgressed,
    EarlierLaunch,
    LineKind,
    StartupState,
    TrackerEvent,
    WeightLoad,
    WeightsProgressed,
)
from specmon.logs.phases import PhaseTracking
from specmon.logs.versions import VersionFit
from specmon.sglang import loglines

_STEADY = ("Decode batch", "Prefill batch")
# A line that, once the server is ready, only counts and moves the clock (``feed_line`` returns None at once
# for it: a steady `Decode batch`/`Prefill batch` message or an INFO line behind a full `[date time TAGS]`
# prefix). A strict subset of what ``patterns.parse_prefix`` reads that way (ASCII, no newline in `\s`; `]`
# right after the seconds is tried first, which makes a search a fifth faster), as bytes, so that a reader can
# skip whole runs of them without decoding them (see ``skip_steady_lines``).
_DATED_PREFIX = (
    rb"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\] ?|(?:[.,]\d{1,6})?(?: (?:[A-Z][A-Z_]*\d+|gpu_id=\d+))*\] ?)"
)
# The time of a line the patterns below match (without groups in them, which would slow their search a little).
_DATED_TIME = re.compile(rb"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,6})?)")
STEADY_WHEN_READY = (
    _DATED_PREFIX + rb"(?:Decode batch|Prefill batch|INFO(?::[ \t]| [\w./-]+\.py:\d+: )(?![ \t]*server_args=))"
)  # (not a new launch's first line written at INFO)
# The same once the startup is over (failed or stopped): only the steady messages, which ``feed_line`` returns
# None for before reading them (an INFO line may still tell why the server failed).
STEADY_WHEN_OVER = _DATED_PREFIX + rb"(?:Decode batch|Prefill batch)"
_MAX_EVENTS = 2000


class StartupTracker(PhaseTracking, FailureReading, ProgressBars, CaptureReading, MemoryReading):
    """Feed log lines and ``\\r`` progress frames; read ``state`` and ``drain_events()``.

    Pure: no I/O and no clock (times come from the log's timestamps; a line without one inherits the last seen).
    Recognises both SGLang log families (0.4.x-0.5.9 and 0.5.16+) behind any prefix the real logs show.
    """

    def __init__(self) -> None:
        self._events: list[TrackerEvent] = []
        self._ts_text: str | None = None
        self._ts = None
        self._unrecognized = 0  # lines not recognised as SGLang's (counted off the hot path)
        self._begin_launch(StartupState())

    def _begin_launch(self, state: StartupState) -> None:
        """Start reading a launch from ``state`` (what the whole log's reading carries into it)."""
        self._state = state
        self._ready = False
        self._over = False
        self._scheduler_up = False
        self._seen_rank0 = False
        self._end_seen = set()
        self._final_rank0 = set()
        self._fit = VersionFit()
        self._init_failures()
        self._init_bars()
        self._init_captures()
        self._init_memory()

    def _start_over(self) -> None:
        """A new launch's `server_args` line after an earlier launch (a restarted server appending to its log):
        the state describes the new launch from this line on, and keeps the earlier one as an ``EarlierLaunch``
        (the whole log's line counts, the clock and the undrained events go on)."""
        before = self.state
        st = StartupState(first_ts=self._ts, last_ts=self._ts, lines_seen=before.lines_seen)
        st.earlier_launches = before.earlier_launches + 1
        st.earlier_failed = before.earlier_failed + (before.state == "failed")
        launch = EarlierLaunch(before.state, before.launched_at, before.ready_after_s, before.error)
        st.earlier = [*before.earlier[1 - MAX_EARLIER_LAUNCHES :], launch]
        self._begin_launch(st)

    # --- public API ---------------------------------------------------------------------------------------

    @property
    def state(self) -> StartupState:
        """The startup state so far (running phases' elapsed time measured to the log's latest time, see
        ``clock``)."""
        st = self._state
        st.lines_recognized = st.lines_seen - self._unrecognized
        now = self.clock
        if now is not None:
            for phase in st.phases:
                if phase.status == "running" and phase.started is not None:
                    phase.elapsed_s = max(0.0, (now - phase.started).total_seconds())
        return st

    @property
    def clock(self) -> datetime | None:
        """The log's latest time: its newest timestamp, or later when a progress bar's own elapsed time says
        so (a weight load or capture that printed only frames for minutes)."""
        ts, frame_ts = self._ts, self._frame_ts
        if frame_ts is not None and (ts is None or frame_ts > ts):
            return frame_ts
        return ts

    def feed_line(self, line: str) -> LineKind | None:
        """Feed one complete log line; returns how to highlight it ("phase", "error", "warning" or None)."""
        st = self._state
        st.lines_seen += 1
        if "\r" in line:
            *frames, line = line.split("\r")
            for frame in frames:
                self.feed_frame(frame)
        if line[:1] != "[" and ("%|" in line or "% Completed" in line):
            return self._glued(line)
        ts_text, tags, level, msg = patterns.parse_prefix(line)
        if ts_text is not None:  # inline: the common case
            if ts_text != self._ts_text:
                self._set_ts(ts_text)
            counted = True
        else:
            counted = self._count_recognized(None)
        if msg.startswith(_STEADY):
            if not self._ready and not self._over and msg[0] == "P":
                self._maybe_warmup()
            return None
        if msg.startswith(patterns.LAUNCH_BEGIN) and (self._state.phases or self._state.error is not None):
            self._start_over()  # a launch was read (its own server_args line, or it failed before writing one)
        if self._ready and level == "INFO":
            return None
        return self._message(counted, tags, level, msg)

    def _count_recognized(self, ts_text: str | None) -> bool:
        """Whether the line is SGLang's by its timestamp or by SGLang progress frames with it (else it is
        counted as unrecognised, until ``_message`` finds a milestone or an SGLang error in it)."""
        if ts_text is not None:
            if ts_text != self._ts_text:
                self._set_ts(ts_text)
            return True
        if self._bar_line >= self._state.lines_seen - 1:
            return True
        self._unrecognized += 1
        return False

    def _message(self, counted: bool, tags: str, level: str | None, msg: str) -> LineKind | None:
        try:
            kind = self._on_message(tags, level, msg)
        except (ValueError, IndexError, OverflowError):
            return None
        if not counted and (kind == "phase" or (kind == "error" and ("sglang" in msg or "launch_server" in msg))):
            self._unrecognized -= 1  # a milestone, or an error that names SGLang (a frame, its argparse)
        return kind

    def feed_items(self, items: Iterable[LogItem]) -> list[tuple[str, LineKind | None]]:
        """Feed the follower's items: lines as lines, progress frames as frames. Returns each line with its kind."""
        feed_line, feed_frame = self.feed_line, self.feed_frame
        lines: list[tuple[str, LineKind | None]] = []
        for kind, text in items:
            if kind == "line":
                lines.append((text, feed_line(text)))
            elif kind == "frame":
                feed_frame(text)
            else:
                self.feed_frames(text)  # type: ignore[arg-type]
        return lines

    @property
    def status(self) -> str:
        """``state.state`` ("starting", "ready", "failed" or "stopped") without bringing the rest of the state up
        to date (for a check per line)."""
        return self._state.state

    @property
    def skips_steady(self) -> bool:
        """Whether lines matching ``STEADY_WHEN_READY`` are now only counted (the server is ready and the log
        has a first time), so that a reader may hand a run of them to ``skip_steady_lines``."""
        return self._ready and self._state.first_ts is not None

    @property
    def steady_lines(self) -> bytes | None:
        """The pattern of the lines that now only count and move the clock: ``STEADY_WHEN_READY`` while
        ``skips_steady``, ``STEADY_WHEN_OVER`` once the startup failed or stopped (and the log has a first time),
        else None. A reader may hand a run of them to ``skip_steady_lines``."""
        if self._state.first_ts is None:
            return None
        if self._ready:
            return STEADY_WHEN_READY
        return STEADY_WHEN_OVER if self._over else None

    def skip_steady_lines(self, count: int, last_time: str | None = None) -> None:
        """Count ``count`` lines matching ``steady_lines`` without reading them (only while it is not None).
        ``last_time`` is the last one's ``steady_time``; without it the caller feeds the run's last line with
        ``feed_line``. Either way the clock is the run's last time: the same state as feeding every line (their
        full-date timestamps do not depend on each other)."""
        self._state.lines_seen += count
        if last_time is not None and last_time != self._ts_text:
            self._set_ts(last_time)

    @staticmethod
    def steady_time(data: bytes, start: int) -> str:
        """The timestamp text of the line at ``data[start:]``, which a ``steady_lines`` pattern matches (as
        ``patterns.parse_prefix`` reads it)."""
        return _DATED_TIME.match(data, start).group(1).decode("ascii")  # type: ignore[union-attr]

    def drain_events(self) -> list[TrackerEvent]:
        """Return and forget the events since the last call."""
        self._settle_progress()
        events, self._events = self._events, []
        return events

    # --- lines --------------------------------------------------------------------------------------------

    def _set_ts(self, text: str) -> None:
        short = text[2:3] == ":"  # a clock without a date
        ts = patterns.parse_clock(text, self._ts) if short else patterns.parse_timestamp(text)
        if ts is None:
            return
        self._ts_text = text
        self._ts = ts
        st = self._state
        if st.first_ts is None:
            st.first_ts = ts
        st.last_ts = ts

    def _on_message(self, tags: str, level: str | None, msg: str) -> LineKind | None:
        tb = self._tb
        if tb is None and msg[:1] in (" ", "\t") and msg.lstrip().startswith('File "') and ", line " in msg:
            tb = self._tb = TracebackReader(None)  # a traceback whose header was cut off: its frames still tell
        if tb is not None:
            kind = self._traceback_line(tb, tags, level, msg)
            if kind is not None:
                return kind
        elif self._continuation is not None:
            kind = self._continued(tags, level, msg)
            if kind is not None:
                return kind
        if self._over:
            return self._after_end(level, msg)
        if self._ready:
            return self._after_ready(level, msg)
        kind = self._milestone(tags, msg)
        if kind is not None:
            return kind
        kind = self._failure_line(level, msg)
        if kind is not None:
            return kind
        if level == "ERROR" or level == "CRITICAL":
            return "error"
        if level == "WARNING" or "arning" in msg or "ARNING" in msg:
            return "warning"
        return None

    def _milestone(self, tags: str, msg: str) -> LineKind | None:
        head = msg[:1]
        if head == "C":
            if msg.startswith("Capture "):
                return self._capture_line(tags, msg)
            return None
        if head == "L":
            if msg.startswith("Load weight begin"):
                return self._load_begin(tags, msg)
            if msg.startswith("Load weight end"):
                return self._load_end(tags, msg)
            return None
        if "KV Cache is allocated" in msg:
            return self._kv_alloc(tags, msg)
        if head == "M":
            if msg.startswith("Memory pool end"):
                return self._pool_end(tags, msg)
            if msg.startswith(patterns.MEMORY_BASELINE):  # 0.5.21+, inside init
                self._narrow("memory_baseline", msg)
                return "phase"
            return None
        if head == "E" and msg.startswith(patterns.STARTUP_TIMINGS):
            return self._startup_timings(msg)
        if head == "m":
            if msg.startswith("max_total_num_tokens="):
                return self._max_total(tags, msg)
            return None
        if head == "s":
            if msg.startswith("server_args="):
                return self._server_args(msg)
            if msg.startswith(patterns.WARMUP_FAILED):  # 0.5.22+'s Rust server: "startup warmup failed"
                self._narrow("warmup_failed", msg.split(" error=")[0].strip())
                return self._warmup_failed(msg)
            return None
        if head == "I":
            if msg.startswith(patterns.INIT_BEGIN):  # "Init torch distributed begin." / 0.5.21+ "Init parallel begin."
                self._narrow("init_begin", msg)
                if not self._state.weights:
                    self._enter("init_distributed")
                return "phase"
            if msg.startswith("Initialization failed. warmup error"):
                return self._warmup_failed(msg)
            return None
        if head == "T":
            if msg.startswith("The server is fired up and ready to roll"):
                return self._became_ready()
            return None
        if (head == "D" or head == "S") and "ummy health check server" in msg:
            return self._serving()
        if msg.startswith("Started server") or "Uvicorn running on" in msg or "Waiting for application startup" in msg:
            self._enter("http_server")
            return "phase"
        if '"GET /' in msg or '"POST /' in msg:
            self._maybe_warmup()
            return None
        return None

    # --- milestones ---------------------------------------------------------------------------------------

    def _server_args(self, msg: str) -> LineKind:
        if self._state.launched_at is None:
            self._state.launched_at = self._ts
        self._enter("server_args")
        m = patterns.SPEC_ALGORITHM.search(msg)
        if m is not None and m.group(1) not in ("None", "none"):
            self._state.speculative_algorithm = m.group(1)
        m = patterns.MEM_FRACTION.search(msg)
        if m is not None:
            with contextlib.suppress(ValueError):
                self._state.mem_fraction_static = float(m.group(1))
        if msg.startswith("server_args={"):
            self._state.log_family = "new"
        return "phase"

    def _narrow(self, name: str, msg: str) -> None:
        """Narrow the versions that could have written this log to those whose `name` template writes `msg`."""
        narrowed = self._fit.narrow(name, msg)
        if narrowed is not None:
            self._state.sglang_versions = loglines.version_span(narrowed)

    def _startup_timings(self, msg: str) -> LineKind:
        """SGLang's own phase durations (0.5.17+), `cuda_graph={target_decode=1.10, ...}` as `cuda_graph.NAME`."""
        self._narrow("startup_timings", msg)
        head, _, graphs = msg.partition("cuda_graph={")
        graphs, _, tail = graphs.partition("}")
        timings = {name: float(value) for name, value in patterns.TIMING.findall(head + " " + tail)}
        timings.update({f"cuda_graph.{name}": float(value) for name, value in patterns.TIMING.findall(graphs)})
        self._state.sglang_timings = dict(list(timings.items())[:32])
        return "phase"

    def _rank_ok(self, tags: str) -> bool:
        """Whether to take a per-rank line's figures: rank 0's, or any rank's until rank 0 shows up.

        Untagged lines (a single-GPU server, or the main process) are always taken and prove nothing about ranks.
        """
        if not tags:
            return True
        if patterns.is_rank_zero(tags):
            self._seen_rank0 = True
            return True
        return not self._seen_rank0

    # --- events -------------------------------------------------------------------------------------------

    def _emit(self, event: TrackerEvent) -> None:
        self._settle_progress()
        events = self._events
        events.append(event)
        if len(events) > _MAX_EVENTS:
            del events[: len(events) - _MAX_EVENTS]

    # A progress event holds the live capture (or weight load) until another event follows or the events are
    # drained, and is copied then: each frame of a bar replaces the last one's event, so copying per frame (a
    # capture's batch sizes with it) was work thrown away. Every change to a capture or weight load is followed
    # by its own event before any other, so the copy is the state its last event saw.
    _live_progress = False

    def _settle_progress(self) -> None:
        if self._live_progress:
            self._live_progress = False
            last = self._events[-1]
            if isinstance(last, CaptureProgressed):
                capture = last.capture
                self._events[-1] = CaptureProgressed(capture=replace(capture, batch_sizes=list(capture.batch_sizes)))
            elif isinstance(last, WeightsProgressed):
                self._events[-1] = WeightsProgressed(weights=replace(last.weights))

    def _capture_event(self, capture: Capture) -> None:
        events = self._events
        if events and isinstance(events[-1], CaptureProgressed):
            last = events[-1].capture
            if last.graph == capture.graph and last.role == capture.role:
                events[-1] = CaptureProgressed(capture=capture)  # the last one's is never copied
                self._live_progress = True
                return
        self._emit(CaptureProgressed(capture=capture))
        self._live_progress = True

    def _weights_event(self, weight: WeightLoad) -> None:
        events = self._events
        if events and isinstance(events[-1], WeightsProgressed) and events[-1].weights.model == weight.model:
            events[-1] = WeightsProgressed(weights=weight)
            self._live_progress = True
            return
        self._emit(WeightsProgressed(weights=weight))
        self._live_progress = True
