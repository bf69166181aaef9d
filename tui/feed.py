"""The app's log feed: follows a server log on a thread, feeds the StartupTracker, buffers lines for the UI.

UI-free (no Textual): the follower thread calls ``feed()``; the UI takes batches with ``take()`` on a
timer and reads ``state`` while holding ``lock``. Pending lines are bounded: if the UI falls behind, the
oldest pending lines are dropped (they would have been pruned from the bounded log pane anyway).
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from specmon.tui.logs.model import LineKind, StartupState, TrackerEvent
from specmon.tui.logs.tracker import StartupTracker

POLL_KIND = "poll"
"""The kind of an access line of the app's own polling (hidden from the log pane by default)."""
POLL_ACCESS = re.compile(
    r'"GET /(?:health|health_generate|model_info|get_model_info|server_info|get_server_info|metrics)'
    r'(?:\?[^ "]*)? HTTP/[\d.]+" \d{3}'
)
"""A uvicorn access line of a request the app's poller (or `specmon check`) makes."""


def with_poll_kind(text: str, kind: str | None) -> str | None:
    """``kind``, or ``POLL_KIND`` for an unclassified access line of a polling request."""
    return POLL_KIND if kind is None and POLL_ACCESS.search(text) else kind


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
        """When the log's newest timestamp arrived (progress frames carry none)."""

    @property
    def state(self) -> StartupState:
        """The tracker's state; hold ``lock`` while reading it from another thread."""
        return self.tracker.state

    def feed(self, items: Iterable, generation: int | None = None) -> None:
        """Feed follower items (``kind`` "line" or "frame", ``text``); ignored if fed for an older generation."""
        with self.lock:
            if generation is not None and generation != self.generation:
                return
            stamp = self.tracker.state.last_ts
            lines = self.tracker.feed_items(items)
            self.grew_at = time.monotonic()
            if self.tracker.state.last_ts != stamp:
                self.stamped_at = self.grew_at
            self._pending.extend((text, with_poll_kind(text, kind)) for text, kind in lines)
            self.lines_fed += len(lines)
            self._changed = True

    def unstamped_s(self, alive_at: float | None = None) -> float:
        """Seconds the server went on past the log's newest timestamp (a long capture prints only frames).

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
                events=self.tracker.drain_events(),
                changed=True,
                generation=self.generation,
            )
            self._changed = False
            return batch

    def reset(self) -> None:
        """Forget everything: a new server (or log) starts from scratch."""
        with self.lock:
            self.tracker = StartupTracker()
            self._pending.clear()
            self._changed = True
            self.lines_fed = 0
            self.grew_at = self.stamped_at = None
            self.generation += 1


def follow_log(path: str, feed: LogFeed, stop_event: threading.Event, interval: float = 0.05) -> None:
    """Follow ``path`` from its start into ``feed`` (for its current generation) until ``stop_event`` is set.

    Runs on a worker thread; a ``reset()`` of the feed makes the rest of this follower's lines ignored.
    """
    from specmon.tui.logs.follower import follow

    generation = feed.generation
    follow(path, lambda items: feed.feed(items, generation), stop_event, interval=interval, from_start=True)


def feed_text(feed: LogFeed, data: bytes, final: bool = True) -> None:
    """Feed a log's bytes (a fixture, a finished file) through the same splitter the follower uses.

    ``final=False`` leaves an incomplete last line unsaid, as a live follower would.
    """
    from specmon.tui.logs.follower import LineSplitter

    splitter = LineSplitter()
    items = splitter.feed(data)
    if final:
        items.extend(splitter.flush())
    feed.feed(items)
