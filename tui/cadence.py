"""FlushCadence: when the log pane is written. During a startup (or when another log begins) the feed is flushed
at ``flush_hz``, to show its progress as it comes. Otherwise no timer runs: lines wait, a few (health checks,
access lines) up to ``trickle_s`` and a stream of serving lines up to ``busy_flush_s`` after the last write, so that
each repaint of the log pane carries many lines; a one-shot timer flushes them when they are due. The log feed
wakes the cadence from the follower's thread when lines arrive and nothing is set for them yet, when a stream
begins (its lines are due sooner), or when a startup begins."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specmon.tui.config import AppConfig
    from specmon.view.log_feed import LogFeed

TRICKLE_LINES = 50
RETRY_S = 1.0
"""A one-shot flush that could not write (the screen is not up) is tried again this much later."""
DUE_SLACK_S = 0.05
"""A one-shot flush runs this long after its lines are due, so that the defer rule lets them through."""


class FlushCadence:
    """The flush timers of one app, the wake from the log feed, and the rule that defers waiting lines."""

    def __init__(self, feed: LogFeed, config: AppConfig) -> None:
        self.feed = feed
        self.config = config
        self.shown_generation = feed.generation
        """The feed generation (one per log followed) the log pane shows."""
        self.written_at = 0.0
        self._often: Any = None
        self._often_paused = False
        self._due: Any = None
        self._due_for_stream = False
        self._woken = False

    def start(self, set_interval: Callable[..., Any], set_timer: Callable[..., Any], flush: Callable[[], None],
              call_soon_threadsafe: Callable[..., Any]) -> None:
        """Start flushing at ``flush_hz``; lines arriving on the follower's thread wake the cadence (through
        ``call_soon_threadsafe``, the app's event loop's) once it has paused."""
        self._flush = flush
        self._set_timer = set_timer
        self._call_soon_threadsafe = call_soon_threadsafe
        self._often = set_interval(1 / self.config.flush_hz, self._flush_often)
        self.feed.observers.append(self._lines_arrived)

    def _lines_arrived(self, lines: list) -> None:
        """On the follower's thread, under the feed's lock: wake the paused cadence when these lines need it."""
        if not self._often_paused or self._woken:
            return
        if self._due is not None and not self.needs_often() and (self._due_for_stream or not self.streaming()):
            return  # their flush is set already
        self._woken = True
        with contextlib.suppress(RuntimeError):  # the app's loop has closed: the app is gone
            self._call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        self._woken = False
        if not self._often_paused:
            return
        if self.needs_often():
            self._cancel_due()
            self._often.resume()
            self._often_paused = False
            self._flush()
        else:
            if self._due is not None and not self._due_for_stream and self.streaming():
                self._cancel_due()  # a stream began: its lines are due sooner than a trickle's
            self._set_due()

    def written(self) -> None:
        """Lines were just written to the log pane."""
        self.written_at = time.monotonic()

    @property
    def often_active(self) -> bool:
        """The flush_hz timer runs (a startup, or another log began)."""
        return self._often is not None and not self._often_paused

    @property
    def due_set(self) -> bool:
        """A one-shot flush of waiting lines is set."""
        return self._due is not None

    def _flush_often(self) -> None:
        self._flush()
        if not self.needs_often():
            self._often.pause()  # a ready server's lines wait (trickle_s, busy_flush_s): a one-shot flushes them
            self._often_paused = True
            self._set_due()

    def _flush_due(self) -> None:
        self._due = None
        if self._often_paused:
            pending = self.feed.pending
            self._flush()
            self._set_due(RETRY_S if pending and self.feed.pending == pending else 0.0)

    def _set_due(self, at_least: float = 0.0) -> None:
        """Set the one-shot flush for when the waiting lines are due (nothing if none wait)."""
        if self._due is not None or not (self.feed.pending or self.feed.generation != self.shown_generation):
            return
        self._due_for_stream = self.streaming()
        due = max(at_least, self.written_at + self._wait_s() - time.monotonic()) + DUE_SLACK_S
        self._due = self._set_timer(due, self._flush_due)

    def _cancel_due(self) -> None:
        if self._due is not None:
            self._due.stop()
            self._due = None

    def _wait_s(self) -> float:
        """How long after the last write waiting lines wait: a few ``trickle_s``, a stream ``busy_flush_s``."""
        return self.config.busy_flush_s if self.streaming() else self.config.trickle_s

    def streaming(self) -> bool:
        """Enough lines wait to be a stream (``TRICKLE_LINES``)."""
        return self.feed.pending >= TRICKLE_LINES

    def needs_often(self) -> bool:
        """A startup shows its progress (or failed), or another log began: the feed is flushed at flush_hz."""
        with self.feed.lock:
            starting = self.feed.state.state in ("starting", "failed")
        return starting or self.feed.generation != self.shown_generation

    def defer(self) -> bool:
        """Whether pending lines wait for more (see the module's docstring); never during a startup."""
        if self.feed.generation != self.shown_generation:
            return False
        if time.monotonic() - self.written_at >= self._wait_s():
            return False
        with self.feed.lock:  # the follower thread may be feeding the tracker
            return self.feed.state.state not in ("starting", "failed")
