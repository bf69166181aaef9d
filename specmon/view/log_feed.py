"""The app's log feed: follows a server log on a thread, feeds the StartupTracker, buffers lines for the UI.

UI-free (no Textual): the follower thread calls ``feed()``; the UI takes batches with ``take()`` on a
timer and reads ``state`` while holding ``lock``. Pending lines are bounded: if the UI falls behind, the
oldest pending lines are dropped (they would have been pruned from the bounded log pane anyway).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from specmon.logs.model import LineKind, StartupState, TrackerEvent
from specmon.logs.patterns import LAUNCH_BEGIN
from specmon.logs.tracker import STEADY_WHEN_READY, StartupTracker

POLL_KIND = "poll"
"""The kind of an access line of the app's own polling (hidden from the log pane by default)."""
POLL_ACCESS = re.compile(
    r'"GET /(?:health|health_generate|model_info|get_model_info|server_info|get_server_info|metrics)'
    r'(?:\?[^ "]*)? HTTP/[\d.]+" \d{3}'
)
"""A uvicorn access line of a request the app's poller (or `specmon check`) makes."""


_STEADY = re.compile(STEADY_WHEN_READY.decode(), re.ASCII)
"""A serving line that changes nothing but the tracker's line count and clock once the server is ready."""


class SteadyLines:
    """Tells steady lines (``_STEADY``), remembering the heads it matched lately (``[date time TAGS] Decode batch``).

    A line that begins with one of ``heads`` is steady too (the pattern matches a prefix and has no lookahead),
    which one ``str.startswith`` tells: SGLang's heads repeat within a second and per rank, so the pattern runs
    about once per head, not once per line.
    """

    KEPT = 8

    def __init__(self) -> None:
        self.heads: tuple[str, ...] = ()

    def match(self, text: str) -> bool:
        """Whether ``text`` is steady, by the pattern (call it after ``text.startswith(self.heads)`` failed)."""
        found = _STEADY.match(text)
        if found is None:
            return False
        self.heads = (*self.heads[1 - self.KEPT :], text[: found.end()])
        return True


def with_poll_kind(text: str, kind: str | None) -> str | None:
    """``kind``, or ``POLL_KIND`` for an unclassified access line of a polling request."""
    if kind is not None or '"GET /' not in text:  # most lines (`Decode batch`, POSTs): no regex search
        return kind
    return POLL_KIND if POLL_ACCESS.search(text) else kind


@dataclass
class FeedBatch:
    """What arrived since the previous ``take()``."""

    lines: list[str] = field(default_factory=list)
    kinds: list[LineKind | str | None] = field(default_factory=list)
    events: list[TrackerEvent] = field(default_factory=list)
    changed: bool = False
    generation: int = 0


class LogFeed:
    """Thread-safe bridge between a log follower (producer thread) and the app (consumer)."""

    def __init__(self, max_pending: int = 10_000) -> None:
        self.lock = threading.RLock()
        self.tracker = StartupTracker()
        self.generation = 0
        self.lines_fed = 0
        self._max_pending = max_pending
        self._pending: deque[tuple[str, LineKind | str | None]] = deque(maxlen=max_pending)
        self._changed = False
        self.grew_at: float | None = None
        """When (``time.monotonic()``) the log last grew: lines or progress frames arrived."""
        self.stamped_at: float | None = None
        """When the log's time last moved on: a newer timestamp, or a progress bar's elapsed time past it."""
        self.history: list[StartupState] = []
        """Earlier runs in the same log (a restart appended to it, or the file recreated), oldest first."""
        self.restarts = 0
        self._startup_seen = False
        self._carried_events: list[TrackerEvent] = []
        self._steady = SteadyLines()
        self.observers: list[Callable[[list[str]], None]] = []
        """Called (on the follower's thread, under ``lock``) with the texts of each batch of new lines (the live
        view's)."""

    @property
    def state(self) -> StartupState:
        """The tracker's state; hold ``lock`` while reading it from another thread."""
        return self.tracker.state

    def feed(self, items: Iterable, generation: int | None = None) -> None:
        """Feed follower items (``kind`` "line" or "frame", ``text``); ignored if fed for an older generation."""
        with self.lock:
            if generation is not None and generation != self.generation:
                return
            stamp = self.tracker.clock  # the log's time: its timestamps, or a progress bar's own elapsed time
            lines = self._feed_tracker(items if isinstance(items, list) else list(items))
            self.grew_at = time.monotonic()
            if self.tracker.clock != stamp:
                self.stamped_at = self.grew_at
            self._pending.extend(lines)
            if self.observers:
                texts = [text for text, _ in lines]
                for observer in self.observers:
                    observer(texts)
            self.lines_fed += len(lines)
            self._changed = True

    def _feed_tracker(self, items: list) -> list[tuple[str, LineKind | str | None]]:
        """Feed the tracker; where a second startup begins (a restart appended to the log, or the file
        recreated), the tracker starts a fresh timeline and the earlier run goes to ``history``."""
        if "server_args=" not in "\n".join([text for kind, text in items if kind == "line"]):
            return self._feed_run(items)  # no startup among them (one search, not one a line)
        lines: list[tuple[str, LineKind | str | None]] = []
        chunk: list = []
        for item in items:
            kind, text = item
            if kind == "line" and is_new_startup(text):
                if chunk:
                    lines.extend(self._feed_run(chunk))
                    chunk = []
                if self._startup_seen:
                    self._carried_events.extend(self.tracker.drain_events())
                    self.history.append(self.tracker.state)
                    self.tracker = StartupTracker()
                    self.restarts += 1
                self._startup_seen = True
            chunk.append(item)
        if chunk:
            lines.extend(self._feed_run(chunk))
        return lines

    def _feed_run(self, items: list) -> list[tuple[str, LineKind | str | None]]:
        """Feed one run's items, each line with its highlight kind (``POLL_KIND`` for the app's own polling).

        Once the server is ready, a stretch of steady serving lines (``Decode batch``, INFO, ...) is counted and
        only its last line read, as ``log-summary`` does: the same state as feeding every line, at a fraction of
        the cost (following 10,000 lines a second)."""
        tracker = self.tracker
        feed_line, feed_frame, steady = tracker.feed_line, tracker.feed_frame, self._steady
        lines: list[tuple[str, LineKind | str | None]] = []
        steady_from = -1  # where the stretch of steady lines now being counted begins in ``lines``
        for kind, text in items:
            if kind == "line" and (steady_from >= 0 or tracker.skips_steady) and (
                text.startswith(steady.heads) or steady.match(text)
            ):
                if steady_from < 0:
                    steady_from = len(lines)
                lines.append((text, None if '"GET /' not in text else with_poll_kind(text, None)))
                continue
            if steady_from >= 0:
                self._count_steady(lines, steady_from)
                steady_from = -1
            if kind == "line":
                lines.append((text, with_poll_kind(text, feed_line(text))))
            elif kind == "frame":
                feed_frame(text)
            else:
                tracker.feed_frames(text)
        if steady_from >= 0:
            self._count_steady(lines, steady_from)
        return lines

    def _count_steady(self, lines: list[tuple[str, LineKind | str | None]], start: int) -> None:
        last = lines[-1][0]
        self.tracker.skip_steady_lines(len(lines) - start - 1)
        lines[-1] = (last, with_poll_kind(last, self.tracker.feed_line(last)))

    def unstamped_s(self, alive_at: float | None = None) -> float:
        """Seconds the server went on past the log's latest time (``StartupTracker.clock``).

        Measured up to ``alive_at`` (a ``time.monotonic()`` when the server was known to be alive), else up to
        the log's last growth: 0 for a finished log read at once, however old.
        """
        end = alive_at if alive_at is not None else self.grew_at
        if end is None or self.stamped_at is None:
            return 0.0
        return max(0.0, end - self.stamped_at)

    @property
    def pending(self) -> int:
        """Lines waiting for the next ``take()``."""
        return len(self._pending)

    def take(self) -> FeedBatch:
        """Everything pending since the last call (lines with their highlight kinds, tracker events)."""
        with self.lock:
            if not self._changed:
                return FeedBatch(generation=self.generation)
            pending, self._pending = self._pending, deque(maxlen=self._max_pending)
            batch = FeedBatch(
                lines=[text for text, _ in pending],
                kinds=[kind for _, kind in pending],
                events=[*self._carried_events, *self.tracker.drain_events()],
                changed=True,
                generation=self.generation,
            )
            self._changed = False
            self._carried_events = []
            return batch

    def reset(self) -> None:
        """Forget everything: a new server (or log) starts from scratch."""
        with self.lock:
            self.tracker = StartupTracker()
            self.history = []
            self._startup_seen = False
            self._carried_events = []
            self._pending.clear()
            self._changed = True
            self.lines_fed = 0
            self.grew_at = self.stamped_at = None
            self.generation += 1


    def next_log(self) -> None:
        """Another log follows: the server restarted into a new file. The current run goes to ``history`` (it
        counts as a restart); the old follower's further lines are ignored (a new generation)."""
        with self.lock:
            if self._startup_seen or self.lines_fed:
                self.history.append(self.tracker.state)
                self.restarts += 1
            self.tracker = StartupTracker()
            self._startup_seen = False
            self._carried_events = []
            self._pending.clear()
            self._changed = True
            self.grew_at = self.stamped_at = None
            self.generation += 1


def is_new_startup(text: str) -> bool:
    """The line SGLang writes at the start of every launch (its parsed arguments)."""
    return any(begin in text for begin in LAUNCH_BEGIN)


STREAM_READ_S = 0.1
"""How often the app's follower reads a stream of lines: as often as the log pane can be written (10 Hz during a
startup), half as often as ``log-summary --follow`` (each read of a stream is a wake of the thread and a hand-over
of the feed's lock: 20 a second cost 0.3 % of a core more at 1,000 lines/s)."""


def follow_log(path: str, feed: LogFeed, stop_event: threading.Event, interval: float = STREAM_READ_S) -> None:
    """Follow ``path`` from its start into ``feed`` (for its current generation) until ``stop_event`` is set.

    Runs on a worker thread; a ``reset()`` of the feed makes the rest of this follower's lines ignored. A log
    of ``BIG_LOG_BYTES`` or more is attached from its end (``specmon.live.attach``).
    """
    from specmon.live.attach import BIG_LOG_BYTES, follow_attached
    from specmon.logs.follower import follow

    generation = feed.generation
    on_items = lambda items: feed.feed(items, generation)  # noqa: E731
    try:
        big = os.path.getsize(path) >= BIG_LOG_BYTES
    except OSError:
        big = False
    if big:  # a server that served for days: its last startup and recent lines, not every line since
        try:
            follow_attached(path, on_items, stop_event, interval=interval)
            return
        except (OSError, ValueError):  # replaced by something else than a file since: followed as any log
            pass
    follow(path, on_items, stop_event, interval=interval, from_start=True, frame_runs=True)


def feed_text(feed: LogFeed, data: bytes, final: bool = True) -> None:
    """Feed a log's bytes (a fixture, a finished file) through the same splitter the follower uses.

    ``final=False`` leaves an incomplete last line unsaid, as a live follower would.
    """
    from specmon.logs.follower import LineSplitter

    splitter = LineSplitter()
    items = splitter.feed(data)
    if final:
        items.extend(splitter.flush())
    feed.feed(items)
