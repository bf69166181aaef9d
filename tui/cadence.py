"""FlushCadence: when the log pane is written. During a startup, or while lines stream in, the feed is flushed
at ``flush_hz``; otherwise it is looked at once a second, and woken at once by the log feed when a stream of lines
(or a startup) begins. Except during a startup, a few lines (health checks, access lines) wait up to ``trickle_s``
and a stream of serving lines up to ``busy_flush_s``, so that each repaint of the log pane carries many lines."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specmon.tui.config import AppConfig
    from specmon.view.log_feed import LogFeed

TRICKLE_LINES = 50
SELDOM_FLUSH_S = 1.0
"""How often the feed is looked at while no startup runs and no stream of lines arrives (else at flush_hz). Each
look of a Textual timer costs; a stream that begins wakes the cadence at once (``wake``)."""


class FlushCadence:
    """The two flush timers of one app and the rule that defers a trickle of lines."""

    def __init__(self, feed: LogFeed, config: AppConfig) -> None:
        self.feed = feed
        self.config = config
        self.shown_generation = feed.generation
        """The feed generation (one per log followed) the log pane shows."""
        self.written_at = 0.0
        self._often: Any = None
        self._often_paused = False

    def start(self, set_interval: Callable[..., Any], flush: Callable[[], None],
              call_soon_threadsafe: Callable[..., Any] | None = None) -> None:
        """Start the timers; with ``call_soon_threadsafe`` (the app's event loop's), lines arriving on the follower's
        thread wake the cadence as soon as they make it busy."""
        self._flush = flush
        self._often = set_interval(1 / self.config.flush_hz, self._flush_often)
        set_interval(SELDOM_FLUSH_S, self._flush_seldom)
        if call_soon_threadsafe is not None:
            self._call_soon_threadsafe = call_soon_threadsafe
            self.feed.observers.append(self._lines_arrived)

    _call_soon_threadsafe: Callable[..., Any] | None = None
    _woken = False

    def _lines_arrived(self, lines: list) -> None:
        """On the follower's thread, under the feed's lock: wake the paused cadence once it has become busy."""
        if self._often_paused and not self._woken and self.busy():
            self._woken = True
            with contextlib.suppress(RuntimeError):  # the app's loop has closed: the app is gone
                self._call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        self._woken = False
        self._flush_seldom()

    def written(self) -> None:
        """Lines were just written to the log pane."""
        self.written_at = time.monotonic()

    @property
    def often_active(self) -> bool:
        """The flush_hz timer runs (a startup, or a stream of lines)."""
        return self._often is not None and not self._often_paused

    def _flush_often(self) -> None:
        self._flush()
        if not self.busy():
            self._often.pause()  # an idle server's few lines wait seconds anyway (trickle_s): 4 looks a second do
            self._often_paused = True

    def _flush_seldom(self) -> None:
        if not self._often_paused:
            return  # the often timer flushes
        if self.busy():
            self._often.resume()
            self._often_paused = False
        self._flush()

    def busy(self) -> bool:
        """A startup shows its progress, or lines stream in: the feed is flushed at flush_hz."""
        with self.feed.lock:
            starting = self.feed.state.state in ("starting", "failed")
        return starting or self.feed.pending >= TRICKLE_LINES or self.feed.generation != self.shown_generation

    def defer(self) -> bool:
        """Whether pending lines wait for more (see the module's docstring); never during a startup."""
        if self.feed.generation != self.shown_generation:
            return False
        wait = self.config.trickle_s if self.feed.pending < TRICKLE_LINES else self.config.busy_flush_s
        if time.monotonic() - self.written_at >= wait:
            return False
        with self.feed.lock:  # the follower thread may be feeding the tracker
            return self.feed.state.state not in ("starting", "failed")
