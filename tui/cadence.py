"""FlushCadence: when the log pane is written. During a startup, or while lines stream in, the feed is flushed
at ``flush_hz``; otherwise it is looked at four times a second. Except during a startup, a few lines (health
checks, access lines) wait up to ``trickle_s`` and a stream of serving lines up to ``busy_flush_s``, so that each
repaint of the log pane carries many lines."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specmon.tui.config import AppConfig
    from specmon.view.log_feed import LogFeed

TRICKLE_LINES = 50
SELDOM_FLUSH_S = 0.25
"""How often the feed is looked at while no startup runs and no stream of lines arrives (else at flush_hz)."""


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

    def start(self, set_interval: Callable[..., Any], flush: Callable[[], None]) -> None:
        self._flush = flush
        self._often = set_interval(1 / self.config.flush_hz, self._flush_often)
        set_interval(SELDOM_FLUSH_S, self._flush_seldom)

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
