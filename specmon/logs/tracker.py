"""StartupTracker: pure, incremental recognition of an SGLang server's startup from its log lines."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from itertools import islice
from operator import itemgetter, le

from specmon.logs import patterns
from specmon.logs.causes import PLACEHOLDER, SYMPTOM
from specmon.logs.errors import TracebackReader
from specmon.logs.failures import FailureReading
from specmon.logs.frames import FrameRun, LogItem
from specmon.logs.model import (
    Capture,
    CaptureProgressed,
    KvPool,
    LineKind,
    MemoryStep,
    Phase,
    PhaseChanged,
    ServerBecameReady,
    ServerStopped,
    StartupState,
    TrackerEvent,
    WeightLoad,
    WeightsProgressed,
)
from specmon.sglang import loglines

_STEADY = ("Decode batch", "Prefill batch")
_INFERRED_ORDER = (("target", "target"), ("draft", "draft"), ("draft_extend", "draft"))
# The memory step named after each graph's capture.
_CAPTURE_STEP = {
    ("target", "target"): "capture",
    ("prefill", "target"): "capture_prefill",
    ("prefill", "draft"): "capture_draft_prefill",
    ("draft", "draft"): "capture_draft",
    ("draft_extend", "draft"): "capture_draft_extend",
}
_CAPTURE_PHASE = {
    ("target", "target"): "capture",
    ("prefill", "target"): "capture_prefill",
    ("prefill", "draft"): "capture_draft",
    ("draft", "draft"): "capture_draft",
    ("draft_extend", "draft"): "capture_draft_extend",
}
# A line that, once the server is ready, only counts and moves the clock (``feed_line`` returns None at once
# for it: a steady `Decode batch`/`Prefill batch` message or an INFO line behind a full `[date time TAGS]`
# prefix). A strict subset of what ``patterns.parse_prefix`` reads that way (ASCII, no newline in `\s`; `]`
# right after the seconds is tried first, which makes a search a fifth faster), as bytes, so that a reader can
# skip whole runs of them without decoding them (see ``skip_steady_lines``).
STEADY_WHEN_READY = (
    rb"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\] ?|(?:[.,]\d{1,6})?(?: (?:[A-Z][A-Z_]*\d+|gpu_id=\d+))*\] ?)"
    rb"(?:Decode batch|Prefill batch|INFO(?::[ \t]| [\w./-]+\.py:\d+: ))"
)
_MAX_EVENTS = 2000
_SKIM_BYTES = 4096  # a shorter run of frames is read frame by frame
_MAX_RANKS = 256
_MAX_TRACEBACK_LINES = 400


_NOT_OF_BAR: dict[str, re.Pattern[bytes]] = {}


def _not_of_bar(prefix: str) -> re.Pattern[bytes]:
    """A frame (after its ``\\r``) that does not begin with a capture bar's description ``prefix``."""
    pattern = _NOT_OF_BAR.get(prefix)
    if pattern is None:
        if len(_NOT_OF_BAR) >= 32:
            _NOT_OF_BAR.clear()
        pattern = _NOT_OF_BAR[prefix] = re.compile(b"\r(?!" + re.escape(prefix.encode()) + b")")
    return pattern


_SIZES_OF_BAR: dict[str, re.Pattern[bytes]] = {}


def _sizes_of_bar(prefix: str) -> re.Pattern[bytes]:
    """The batch sizes of a capture bar's frames (after their ``\\r``) whose description begins with ``prefix``."""
    pattern = _SIZES_OF_BAR.get(prefix)
    if pattern is None:
        if len(_SIZES_OF_BAR) >= 32:
            _SIZES_OF_BAR.clear()
        pattern = _SIZES_OF_BAR[prefix] = re.compile(
            b"\r" + re.escape(prefix.encode()) + rb"(\d+) avail_mem=-?\d+(?:\.\d+)? GB\): *\d+%\|"
        )
    return pattern


_COUNTERS: dict[str, re.Pattern[bytes]] = {}


def _counts_up(data: bytes, start: int, end: int, total: str) -> bool:
    """Whether each frame of ``data[start:end]`` (joined by ``\\r``) shows one counter of ``total`` with its
    elapsed time, and neither the count nor the time ever goes back, below ``total`` but in the last frame (so no
    frame but the last can end the capture or restart the bar's clock). Found on the bytes, not frame by frame."""
    pattern = _COUNTERS.get(total)
    if pattern is None:
        if len(_COUNTERS) >= 32:
            _COUNTERS.clear()
        pattern = _COUNTERS[total] = re.compile(rb"\| *(\d{1,12})/" + re.escape(total.encode()) + rb" \[([\d:]{1,12})[<\]]")
    found = pattern.findall(data, start, end)
    if len(found) != data.count(b"\r", start, end) + 1:
        return False
    counts = list(map(int, map(itemgetter(0), found)))
    if counts[-1] > int(total) or (len(counts) > 1 and counts[-2] >= int(total)):
        return False
    texts = list(map(itemgetter(1), found))
    clocks = {text: patterns.clock_seconds(text.decode()) for text in set(texts)}
    if None in clocks.values():
        return False
    seconds = list(map(clocks.__getitem__, texts))
    return all(map(le, counts, islice(counts, 1, None))) and all(map(le, seconds, islice(seconds, 1, None)))


def _add_sizes(capture: Capture, sizes: Iterable[bytes]) -> None:
    """Add batch sizes its frames show to a capture whose line listed none (as each frame does, in order)."""
    known = capture.batch_sizes
    seen = set(known)
    for size in map(int, sizes):
        if size not in seen and len(known) < 4096:
            seen.add(size)
            known.append(size)
    known.sort()


def _set_sizes(capture: Capture, sizes: list[int]) -> None:
    """The batch sizes a capture line lists; they set its total, which its progress never exceeds."""
    capture.batch_sizes = sizes
    capture.total = len(sizes) or None
    if capture.total is not None and capture.done > capture.total:
        capture.done = capture.total


class StartupTracker(FailureReading):
    """Feed log lines and ``\\r`` progress frames; read ``state`` and ``drain_events()``.

    Pure: no I/O and no clock (times come from the log's timestamps; a line without one inherits the last seen).
    Recognises both SGLang log families (0.4.x-0.5.9 and 0.5.16+) behind any prefix the real logs show.
    """

    def __init__(self) -> None:
        self._state = StartupState()
        self._events: list[TrackerEvent] = []
        self._ts_text: str | None = None
        self._ts: datetime | None = None
        self._ready = False
        self._over = False  # failed or stopped: only errors are still read
        self._init_failures()
        self._seen_rank0 = False
        self._load_count: dict[str, int] = {}
        self._load_model: dict[str, str] = {}
        self._capture: Capture | None = None
        self._weight: WeightLoad | None = None
        self._bs_from_line: set[tuple[str, str]] = set()
        self._end_seen: set[tuple[str, str]] = set()  # graphs and weight loads whose end line was read
        self._final_rank0: set[tuple[str, str]] = set()  # ... from rank 0, whose figures are kept
        self._pools_ended: set[str] = set()  # rank tags whose target pool ended: their next KV pool is the draft's
        self._scheduler_up = False  # max_total_num_tokens or a worker node's health server: startup moved on
        self._bar_line = -2  # lines_seen when an SGLang bar's frame last came (with it, that line is SGLang's)
        self._unrecognized = 0  # lines not recognised as SGLang's (counted off the hot path)
        self._frame_ts: datetime | None = None  # the log's time by the elapsed clock of progress bars
        self._bars: dict[int, tuple[int, float, datetime | None]] = {}  # total -> (n, elapsed, last timestamp at start)
        self._versions: frozenset[str] | None = None  # the SGLang versions whose lines the log's milestones fit
        self._kv_tags: dict[str, str] = {}  # model -> the rank tags whose KV pools are kept (rank 0's, else the first)
        self._fits: dict[tuple[str, str], frozenset[str] | None] = {}  # (milestone, line) -> its versions
        self._starts_line = -1  # lines_seen when the described capture bars counted in _starts began at 0
        self._starts = 0  # ... how many did on that physical line (more than one: bars of several processes)

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

    def feed_frame(self, frame: str) -> None:
        """Feed one ``\\r``-redrawn progress frame (tqdm)."""
        if self._over or self._ready or "%" not in frame:
            return
        try:
            self._on_frame(frame)
        except (ValueError, IndexError, OverflowError):
            return

    def feed_frames(self, run: FrameRun) -> None:
        """Feed a run of progress frames of one physical line (``FrameRun``): the same state and events as
        ``feed_frame`` on each of them, reading only those that can change them (see ``_skim``)."""
        if self._over or self._ready:
            return
        if run.end - run.start < _SKIM_BYTES or not self._skim(run):
            feed_frame = self.feed_frame
            for text in run.texts():
                feed_frame(text)

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

    def skip_steady_lines(self, count: int) -> None:
        """Count ``count`` lines matching ``STEADY_WHEN_READY`` without reading them (only while
        ``skips_steady``). The caller feeds the run's last line with ``feed_line``, so the clock is its time:
        the same state as feeding every line (their full-date timestamps do not depend on each other)."""
        self._state.lines_seen += count

    def drain_events(self) -> list[TrackerEvent]:
        """Return and forget the events since the last call."""
        self._settle_progress()
        events, self._events = self._events, []
        return events

    # --- lines --------------------------------------------------------------------------------------------

    def _glued(self, line: str) -> LineKind | None:
        """A tqdm frame, possibly with a log line glued after it on the same physical line."""
        m = patterns.tqdm_counter(line)
        if m is None:
            return self._feed_message_only(line)
        self.feed_frame(line[: m.end])
        rest = line[m.end :].lstrip(" ")
        if rest and not rest.isspace():
            self._state.lines_seen -= 1
            return self.feed_line(rest)
        self._count_recognized(None)
        return None

    def _feed_message_only(self, line: str) -> LineKind | None:
        ts_text, tags, level, msg = patterns.parse_prefix(line)
        return self._message(self._count_recognized(ts_text), tags, level, msg)

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
                self._enter("warmup")
                self._fail("warmup_failed", msg.strip(), "warmup", level=SYMPTOM)
                return "error"
            return None
        if head == "I":
            if msg.startswith(patterns.INIT_BEGIN):  # "Init torch distributed begin." / 0.5.21+ "Init parallel begin."
                self._narrow("init_begin", msg)
                if not self._state.weights:
                    self._enter("init_distributed")
                return "phase"
            if msg.startswith("Initialization failed. warmup error"):
                self._enter("warmup")
                self._fail("warmup_failed", msg, "warmup", level=PLACEHOLDER if "Traceback" in msg else SYMPTOM)
                if "Traceback" in msg:
                    self._tb = TracebackReader("warmup")
                return "error"
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
        if self._versions is not None and not loglines.can_narrow(name, self._versions):
            return
        key = (name, msg)
        versions = self._fits.get(key, self)
        if versions is self:  # not seen: a line repeated (the same capture again, on each rank) is matched once
            versions = loglines.line_versions(name, msg.rstrip())
            if len(msg) <= 4096:
                if len(self._fits) >= 64:
                    self._fits.clear()
                self._fits[key] = versions
        if versions is None:
            return
        narrowed = versions if self._versions is None else (self._versions & versions) or self._versions
        if narrowed != self._versions:
            self._versions = narrowed
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

    def _load_begin(self, tags: str, msg: str) -> LineKind:
        if len(self._load_count) < _MAX_RANKS or tags in self._load_count:
            count = self._load_count.get(tags, 0) + 1
            self._load_count[tags] = count
        else:
            count = 1
        target = self._state.weight("target")
        # the draft's when this rank loaded before, or when the target's load already ended (a log whose first
        # lines, with the target's begin, were cut off)
        model = "target" if count == 1 and (target is None or target.status != "done") else "draft"
        if tags in self._load_model or len(self._load_model) < _MAX_RANKS:
            self._load_model[tags] = model
        weight = self._state.weight(model)
        if not self._rank_ok(tags) and weight is not None:
            return "phase"
        if weight is None:
            weight = WeightLoad(model=model, started=self._ts)
            self._state.weights.append(weight)
        m = patterns.AVAIL_MEM.search(msg)
        if m is not None:
            weight.avail_gb = float(m.group(1))
        self._weight = weight
        self._enter("load_weights" if model == "target" else "load_draft_weights")
        self._weights_event(weight)
        return "phase"

    def _load_end(self, tags: str, msg: str) -> LineKind:
        if patterns.WEIGHTS_COMMITTED and msg.startswith(patterns.WEIGHTS_COMMITTED):
            return self._weights_committed(msg)
        self._narrow("load_end", msg)
        m = patterns.WEIGHT_TYPE.search(msg)
        wtype = m.group(1) if m else None
        model = self._load_model.get(tags, "target")
        if wtype and patterns.DRAFT_MODEL_TYPE.search(wtype):
            model = "draft"
        rank0 = not tags or patterns.is_rank_zero(tags)
        key = ("weights", model)
        weight = self._state.weight(model)
        if weight is not None and key in self._end_seen and (key in self._final_rank0 or not rank0):
            return "phase"
        if not self._rank_ok(tags) and weight is not None:
            return "phase"
        if weight is None:
            weight = WeightLoad(model=model)
            self._state.weights.append(weight)
            self._enter("load_weights" if model == "target" else "load_draft_weights")
        self._end_seen.add(key)
        if rank0:
            self._final_rank0.add(key)
        weight.type = wtype
        m = patterns.WEIGHT_DTYPE.search(msg)
        weight.dtype = m.group(1) if m else None
        avail = patterns.AVAIL_MEM.search(msg)
        usage = patterns.MEM_USAGE.search(msg)
        elapsed = patterns.ELAPSED.search(msg)
        weight.avail_gb = float(avail.group(1)) if avail else None
        weight.mem_usage_gb = float(usage.group(1)) if usage else None
        weight.ended = self._ts
        if elapsed is not None:
            weight.elapsed_s = float(elapsed.group(1))
        elif weight.started is not None and self._ts is not None:
            weight.elapsed_s = (self._ts - weight.started).total_seconds()
        weight.status = "done"
        if weight.shards_total is not None:
            weight.shards_done = weight.shards_total
        if weight.avail_gb is not None:
            self._memory("load_weights" if model == "target" else "load_draft_weights", weight.avail_gb)
        self._weights_event(weight)
        return "phase"

    def _weights_committed(self, msg: str) -> LineKind:
        """0.5.18+'s late `Load weight end. Committed real weights after CUDA graph capture in X s`: the target's
        real weights replace the placeholders it captured with; its load's figures stay those of its end line."""
        self._narrow("load_end", msg)
        m = patterns.TIMING.search(msg.replace(" in ", " in=", 1))
        if m is not None:
            self._state.weights_committed_s = float(m.group(2))
        return "phase"

    def _kv_rank_ok(self, model: str, tags: str) -> bool:
        """Whether to keep a KV line's pool: rank 0's, else one rank's only (a node without rank 0 prints the
        same pool once per rank). Rank 0 arriving late replaces the other rank's pools."""
        if not tags:
            return True
        kept = self._kv_tags.get(model)
        if patterns.is_rank_zero(tags):
            self._seen_rank0 = True
            if kept is not None and not patterns.is_rank_zero(kept):
                self._state.kv_pools = [p for p in self._state.kv_pools if p.model != model]
            self._kv_tags[model] = tags
            return True
        if kept is None:
            if self._seen_rank0:
                return False
            self._kv_tags[model] = tags
            return True
        return kept == tags

    def _kv_alloc(self, tags: str, msg: str) -> LineKind:
        m = patterns.KV_ALLOC.search(msg)
        if m is None:
            return "phase"
        self._narrow("kv_allocated", msg)
        st = self._state
        if m.group(1) is not None:
            st.log_family = "new"
        elif st.log_family is None:
            st.log_family = "legacy"
        draft = self._state.weight("draft") is not None and (tags in self._pools_ended or st.log_family == "legacy")
        if st.phase("kv_cache") is None and not draft:
            self._enter("kv_cache")  # the milestone counts from any rank; the figures are rank 0's
        model = "draft" if draft else "target"
        if self._kv_rank_ok(model, tags) and len(st.kv_pools) < 16:
            kv = m.group(5)
            st.kv_pools.append(
                KvPool(
                    model=model,
                    tokens=int(m.group(2)) if m.group(2) else None,  # 0.4.2's line has no token count
                    k_size_gb=float(m.group(3)) if m.group(3) else None,
                    v_size_gb=float(m.group(4)) if m.group(4) else None,
                    kv_size_gb=float(kv) if kv else None,
                    dtype=m.group(1),
                    at=self._ts,
                )
            )
        return "phase"

    def _pool_end(self, tags: str, msg: str) -> LineKind:
        st = self._state
        draft = tags in self._pools_ended and st.weight("draft") is not None
        if st.phase("kv_cache") is None and not draft:
            self._enter("kv_cache")
        if len(self._pools_ended) < _MAX_RANKS:
            self._pools_ended.add(tags)
        if not self._kv_rank_ok("draft" if draft else "target", tags):
            return "phase"
        m = patterns.AVAIL_MEM.search(msg)
        if m is not None:
            self._memory("kv_cache_draft" if draft else "kv_cache", float(m.group(1)))
        return "phase"

    def _max_total(self, tags: str, msg: str) -> LineKind:
        st = self._state
        total = patterns.MAX_TOTAL.match(msg)
        if total is None:
            return None
        if st.max_total_num_tokens is None:
            st.max_total_num_tokens = int(total.group(1))
            m = patterns.AVAIL_MEM.search(msg)
            if m is not None:
                self._memory("max_total_num_tokens", float(m.group(1)))
        for capture in st.captures:
            if capture.status == "running" and capture.total and capture.done >= capture.total:
                self._finish_capture(capture, None)
        self._scheduler_up = True
        current = st.current_phase
        if current is not None and current.status == "running" and not self._over:
            self._finish_phase(current, "done")
        return "phase"

    def _serving(self) -> LineKind:
        """A node that serves without printing a ready line (a worker node's health-check server is up)."""
        self._scheduler_up = True
        if not self._over and not self._ready:
            self._enter("serving")
        return "phase"

    def _maybe_warmup(self) -> None:
        if self._state.phase("http_server") is not None:
            self._enter("warmup")

    def _became_ready(self) -> LineKind:
        st = self._state
        if st.state == "failed":
            return "phase"
        self._ready = True
        st.state = "ready"
        st.ready_at = self._ts
        if self._ts is not None and st.first_ts is not None:
            st.ready_after_s = (self._ts - st.first_ts).total_seconds()
            st.ready_after_server_args_s = (self._ts - (st.launched_at or st.first_ts)).total_seconds()
        self._enter("ready")
        self._finish_phase(st.phases[-1], "done")
        self._emit(ServerBecameReady(at=st.ready_at, after_s=st.ready_after_s))
        return "phase"

    def _stopped(self, cause: str) -> None:
        st = self._state
        if st.state in ("stopped", "failed"):
            return
        self._ready = False
        self._over = True
        self._tb = None
        st.state = "stopped"
        st.stopped_at = self._ts
        st.stop_cause = cause
        self._enter("shutdown")
        self._emit(ServerStopped(at=self._ts))

    # --- captures -----------------------------------------------------------------------------------------

    def _capture_line(self, tags: str, msg: str) -> LineKind | None:
        m = patterns.CAPTURE_LINE.match(msg)
        if m is None:
            lm = patterns.CAPTURE_LIST.match(msg)
            if lm is None:
                return None
            sizes = patterns.int_list(lm.group(2))
            if lm.group(1) == "bs":
                if self._state.log_family is None:
                    self._state.log_family = "legacy"
                capture = self._capture
                if capture is None or capture.graph == "prefill":
                    capture = self._capture_for("target", "target", "target decode", None)
            else:
                capture = self._capture_for("prefill", "target", "piecewise", None)
            if self._rank_ok(tags) and sizes:
                _set_sizes(capture, sizes)
                self._bs_from_line.add((capture.graph, capture.role))
                self._capture_event(capture)
            return "phase"
        self._narrow("capture_" + m.group("edge"), msg)
        what = m.group("what").strip().lower()
        graph, role, label = self._graph_of(what)
        if what.startswith(("target", "draft decode", "draft verify", "draft prefill")) or "backend=" in msg:
            self._state.log_family = "new"
        elif self._state.log_family is None:
            self._state.log_family = "legacy"
        if m.group("edge") == "begin":
            if not self._rank_ok(tags) and self._state.capture(graph, role) is not None:
                return "phase"
            self._capture_for(graph, role, label, msg)
            return "phase"
        capture = self._state.capture(graph, role)
        rank0 = not tags or patterns.is_rank_zero(tags)
        key = (graph, role)
        if capture is not None and key in self._end_seen and (key in self._final_rank0 or not rank0):
            return "phase"
        if capture is None:
            capture = self._capture_for(graph, role, label, None)
        self._end_seen.add(key)
        if rank0:
            self._final_rank0.add(key)
        self._finish_capture(capture, msg)
        return "phase"

    @staticmethod
    def _graph_of(what: str) -> tuple[str, str, str]:
        """Map the words before "cuda graph" to (JSON graph kind, role, label)."""
        role = "draft" if "draft" in what else "target"
        if "extend" in what and role == "draft":
            return "draft_extend", "draft", what or "draft extend"
        if "prefill" in what or "piecewise" in what:
            return "prefill", role, what or "prefill"
        if role == "draft":
            return "draft", "draft", what or "draft"
        return "target", "target", what or "target decode"

    def _capture_for(self, graph: str, role: str, label: str, begin_msg: str | None) -> Capture:
        """The capture of this graph, started now if new; it becomes the one progress frames feed."""
        st = self._state
        capture = st.capture(graph, role)
        if capture is None:
            capture = Capture(graph=graph, role=role, label=label, started=self._ts)
            st.captures.append(capture)
            self._enter(_CAPTURE_PHASE.get((graph, role), "capture"))
        if begin_msg is not None:
            capture.awaiting_end = True
            m = patterns.AVAIL_MEM.search(begin_msg)
            if m is not None and capture.status == "running":
                capture.avail_gb = float(m.group(1))
            lm = None if capture.batch_sizes else patterns.BS_IN_LINE.search(begin_msg)
            if lm is not None:
                _set_sizes(capture, patterns.int_list(lm.group(2)))
                self._bs_from_line.add((graph, role))
        if capture.status == "running":
            self._capture = capture
        self._capture_event(capture)
        return capture

    def _finish_capture(self, capture: Capture, end_msg: str | None) -> None:
        if end_msg is not None:
            capture.awaiting_end = False
            elapsed = patterns.ELAPSED.search(end_msg)
            usage = patterns.MEM_USAGE.search(end_msg)
            avail = patterns.AVAIL_MEM.search(end_msg)
            if elapsed is not None:
                capture.elapsed_s = float(elapsed.group(1))
            if usage is not None:
                capture.mem_usage_gb = float(usage.group(1))
            if avail is not None:
                capture.avail_gb = float(avail.group(1))
            lm = None if capture.batch_sizes else patterns.BS_IN_LINE.search(end_msg)
            if lm is not None:
                capture.batch_sizes = patterns.int_list(lm.group(2))
                capture.total = len(capture.batch_sizes) or capture.total
        was_done = capture.status == "done"
        capture.status = "done"
        if end_msg is not None or capture.ended is None or not was_done:
            capture.ended = self._ts
        if capture.elapsed_s is None and capture.started is not None and capture.ended is not None:
            capture.elapsed_s = (capture.ended - capture.started).total_seconds()
        if capture.total is not None:
            capture.done = capture.total
        capture.eta_s = 0.0
        if end_msg is not None and capture.avail_gb is not None:
            self._memory(_CAPTURE_STEP.get((capture.graph, capture.role), "capture"), capture.avail_gb)
        self._capture_event(capture)

    # --- progress frames ----------------------------------------------------------------------------------

    def _on_frame(self, frame: str) -> None:
        m = patterns.tqdm_counter(frame)
        if m is None:
            return
        n, total, elapsed = int(m.n), int(m.total), m.elapsed
        if total <= 0 or n > total:
            return
        head = frame[: m.start]
        if patterns.is_weight_bar(head):
            self._bar_line = self._state.lines_seen
            self._bar_clock(n, total, patterns.clock_seconds(elapsed))
            self._weight_frame(n, total)
            return
        desc = patterns.CAPTURE_DESC.search(head)
        bare = not head.strip(" :")
        if desc is None and not bare:
            return
        if desc is not None:
            lines_seen = self._bar_line = self._state.lines_seen
            if n == 0:  # a described bar (re)starts: more than one on a line are bars of several processes
                if self._starts_line != lines_seen:
                    self._starts_line, self._starts = lines_seen, 0
                self._starts += 1
        seconds = patterns.clock_seconds(elapsed)
        self._bar_clock(n, total, seconds)
        capture = self._capture
        if bare and capture is not None and capture.status == "done" and capture.total is None:
            capture.total = capture.done = total  # an old bar flushed after its capture's end line: its total
            self._capture_event(capture)
            return
        if desc is not None and desc.group(2) is not None:
            if capture is None or capture.graph != "prefill":
                capture = self._capture_for("prefill", "target", "target prefill", None)
        elif capture is None or (
            capture.status == "done" and (n < capture.done or (n == 0 and capture.done == capture.total))
        ):
            if desc is None:
                return  # a bare bar starts nothing by itself; its "Capturing ..." frame follows
            capture = self._next_inferred()
            if capture is None:
                return
        elif capture.status != "running":
            return
        capture.total = total
        capture.done = n
        if desc is not None:
            size = desc.group(1) or desc.group(3)
            if size is not None:
                capture.current_bs = int(size)
                key = (capture.graph, capture.role)
                sizes = capture.batch_sizes
                if key not in self._bs_from_line and capture.current_bs not in sizes and len(sizes) < 4096:
                    sizes.append(capture.current_bs)
                    sizes.sort()
            capture.avail_gb = float(desc.group(4))
        if seconds is not None:
            capture.elapsed_s = seconds
        elif capture.started is not None and self._ts is not None:
            capture.elapsed_s = (self._ts - capture.started).total_seconds()
        if n >= total > 0:
            capture.done = total
            if capture.status == "running":
                capture.status = "done"
                capture.ended = self._ts
            capture.eta_s = 0.0
        elif n > 0 and capture.elapsed_s:  # tqdm's elapsed is whole seconds: 0 says nothing about the rate
            capture.eta_s = capture.elapsed_s / n * (total - n)
        else:
            capture.eta_s = None
        self._capture_event(capture)

    def _skim(self, run: FrameRun) -> bool:
        """Feed a long run of capture-bar frames reading only its first frames (up to the bar's last start, at
        0), its last ones (from its first at total/total on), and not those between when they can change nothing
        the frame after them does not set again. False, having fed nothing, when the run is not such.

        The frames skipped are checked as bytes, not parsed: each begins with the last frame's description (up to
        its batch size) and none shows the bar at 0 (tqdm draws a bar's 0 first: `| 0/`). So they are one tqdm bar
        counting up (its count and elapsed time never go back), and the frame after them sets what each of them
        would have: the capture's count, batch size, memory, elapsed time and ETA, and the bar's clock (its
        elapsed time is the largest). What they could add is checked on the state (``_skippable``): a batch size
        the capture's line did not list, a capture they would start. Bars of several processes interleaved on
        one line (more than one bar begun at 0 there) are read frame by frame.
        """
        data, start, end = run.data, run.start, run.end
        last_at = data.rfind(b"\r", start, end) + 1
        last = run.text(last_at, end) if last_at else None
        if last is None:
            return False
        m = patterns.tqdm_counter(last)
        if m is None or not m.bar:
            return False
        desc = patterns.CAPTURE_DESC.search(last, 0, m.start)
        if desc is None or (desc.group(1) or desc.group(3)) is None:
            return False
        prefix = last[: desc.start(1) if desc.group(1) is not None else desc.start(3)]
        if not prefix.isascii():
            return False
        total = m.total
        if len(total) > 12:
            return False  # no capture has that many batch sizes: frame by frame, where a fault is caught
        complete = f"{total}/{total}".encode()
        tail_at = last_at  # the first of the last frames that show the bar complete (tqdm draws it again at close)
        for _ in range(8):
            if data.find(complete, tail_at, end) < 0:
                break
            before = data.rfind(b"\r", start, tail_at - 1) + 1
            if before == 0 or data.find(complete, before, tail_at - 1) < 0:
                break
            tail_at = before
        head_end = data.find(b"\r", max(data.rfind(b"| 0/", start, tail_at), start), end)  # after its last start
        if head_end < 0 or tail_at - 1 <= head_end:
            return False
        if _not_of_bar(prefix).search(data, head_end, tail_at - 1) is not None:
            return False  # a frame between is not this bar's
        next_cr = data.find(b"\r", tail_at, end)
        after_end = next_cr if next_cr >= 0 else end
        if not _counts_up(data, max(data.rfind(b"\r", start, head_end) + 1, start), after_end, total):
            return False  # from the last start to the frame after those skipped, the bar never counts back
        after = run.text(tail_at, after_end)
        feed_frame = self.feed_frame
        for text in run.texts(start, head_end):
            feed_frame(text)
        skip = after is not None and self._skippable(after, prefix, total, desc.group(2) is not None)
        if skip and skip is not True:  # a capture whose batch sizes its frames list: those of the frames skipped
            _add_sizes(skip, _sizes_of_bar(prefix).findall(data, head_end, tail_at - 1))
        for text in run.texts(tail_at if skip else head_end + 1, end):
            feed_frame(text)
        return True

    def _skippable(self, after: str, prefix: str, total: str, prefill: bool) -> Capture | bool:
        """Whether the frames before ``after`` (of the bar with this description ``prefix`` and ``total``, counting
        up, below total) change nothing that ``after`` does not set again, in the state the tracker is in; or the
        capture they would add their batch sizes to (its line listed none), which is all they change."""
        if self._over or self._ready:
            return True  # every frame is ignored
        if self._starts_line == self._state.lines_seen and self._starts > 1:
            return False  # two bars begun on this line: their counts interleave
        m = patterns.tqdm_counter(after)
        if m is None or not m.bar or m.total != total or int(m.n) > int(total):
            return False
        if patterns.clock_seconds(m.elapsed) is None or not after.startswith(prefix):
            return False  # ``after`` must set the elapsed time and batch size each frame between sets
        desc = patterns.CAPTURE_DESC.search(after, 0, m.start)
        if desc is None or (desc.group(1) or desc.group(3)) is None or (desc.group(2) is not None) != prefill:
            return False
        st = self._state
        capture = self._capture
        if prefill:  # the prefill capture's figures, whatever its status
            if capture is None or capture.graph != "prefill":
                capture = st.capture("prefill", "target")
            if capture is None:
                return False
            return True if (capture.graph, capture.role) in self._bs_from_line else capture
        if capture is not None and capture.status == "running":
            return True if (capture.graph, capture.role) in self._bs_from_line else capture
        # no running capture: each frame is ignored (bar clock aside) unless it would start an inferred one
        return all(st.capture(graph, role) is not None for graph, role in _INFERRED_ORDER)

    def _bar_clock(self, n: int, total: int, elapsed: float | None) -> None:
        """Move the log's clock on by a bar's elapsed time, counted from the last timestamp before the bar began.

        Bars are told apart by their totals (interleaved bars do not restart each other); a bar counting back
        or its clock going back is a new one. Never ahead of the real time: a bar begins after that timestamp.
        """
        if elapsed is None:
            return  # no clock in this frame (or a frame cut before it)
        bars = self._bars
        bar = bars.get(total)
        if bar is None or n < bar[0] or elapsed < bar[1]:
            if bar is None and len(bars) >= 16:
                bars.clear()
            bar = (n, elapsed, self._ts)
        start = bar[2]
        bars[total] = (n, elapsed, start)
        if elapsed and start is not None:
            at = start + timedelta(seconds=elapsed)
            if self._frame_ts is None or at > self._frame_ts:
                self._frame_ts = at

    def _next_inferred(self) -> Capture | None:
        """A capture seen only through its progress bar (warning log level): target, draft, draft extend."""
        st = self._state
        if self._capture is not None and self._capture.status == "running":
            self._finish_capture(self._capture, None)
        for graph, role in _INFERRED_ORDER:
            if st.capture(graph, role) is None:
                label = {"target": "target decode", "draft": "draft decode", "draft_extend": "draft extend"}[graph]
                return self._capture_for(graph, role, label, None)
        return None

    def _weight_frame(self, n: int, total: int) -> None:
        st = self._state
        weight = self._weight
        if weight is None or (weight.status == "done" and n < (weight.shards_done or 0)):
            target = st.weight("target")
            if target is None:
                model = "target"
            elif target.status == "done" and st.weight("draft") is None:
                model = "draft"
            else:
                return
            weight = WeightLoad(model=model, started=self._ts)
            st.weights.append(weight)
            self._weight = weight
            self._enter("load_weights" if model == "target" else "load_draft_weights")
        elif weight.status == "done" and n != total:
            return
        weight.shards_done = n
        weight.shards_total = total
        now = self.clock
        if weight.status == "running" and weight.started is not None and now is not None:
            weight.elapsed_s = max(0.0, (now - weight.started).total_seconds())
        if n >= total > 0 and weight.status == "running":
            weight.status = "done"
            weight.ended = now
        self._weights_event(weight)

    # --- state changes ------------------------------------------------------------------------------------

    def _phase_name(self) -> str | None:
        """The phase an error without frames is blamed on: the running one, else serving once startup moved on
        (``_startup_phase``: on a worker node; the warmup before a ready line)."""
        phase = self._state.current_phase
        if phase is not None and phase.status != "running" and self._scheduler_up and not self._ready:
            return self._startup_phase("serving")
        return phase.name if phase is not None else None

    def _enter(self, name: str) -> None:
        """Begin phase ``name`` (each phase is entered once), ending the one before it."""
        st = self._state
        if st.phase(name) is not None:
            return
        previous = st.current_phase
        if previous is not None and previous.status == "running":
            self._finish_phase(previous, "done")
        phase = Phase(name=name, status="running", started=self._ts)
        st.phases.append(phase)
        self._emit(PhaseChanged(phase=replace(phase), previous=previous.name if previous else None))

    def _finish_phase(self, phase: Phase, status: str) -> None:
        phase.status = status
        phase.ended = self.clock
        if phase.started is not None and phase.ended is not None:
            phase.elapsed_s = max(0.0, (phase.ended - phase.started).total_seconds())
        self._emit(PhaseChanged(phase=replace(phase), previous=None))

    def _memory(self, step: str, avail_gb: float) -> None:
        """Record the memory left after a step (a later line for the same step, e.g. rank 0's, replaces it)."""
        memory = self._state.memory
        for i, entry in enumerate(memory):
            if entry.step == step:
                memory[i] = MemoryStep(step=step, avail_gb=avail_gb, at=self._ts)
                return
        if len(memory) < 64:
            memory.append(MemoryStep(step=step, avail_gb=avail_gb, at=self._ts))

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
            else:
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
