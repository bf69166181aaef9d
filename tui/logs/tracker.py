"""StartupTracker: pure, incremental recognition of an SGLang server's startup from its log lines."""

from __future__ import annotations

from tui.logs.model import LineKind, StartupState, TrackerEvent


class StartupTracker:
    """Feed log lines and ``\\r`` progress frames; read ``state`` and ``drain_events()``.

    Pure: no I/O and no clock (times come from the log's timestamps).
    """

    def __init__(self) -> None:
        self.state = StartupState()
        self._events: list[TrackerEvent] = []

    def feed_line(self, line: str) -> LineKind | None:
        """Feed one complete log line; returns how to highlight it ("phase", "error", "warning" or None)."""
        self.state.lines_seen += 1
        return None

    def feed_frame(self, frame: str) -> None:
        """Feed one ``\\r``-redrawn progress frame (tqdm)."""

    def drain_events(self) -> list[TrackerEvent]:
        """Return and forget the events since the last call."""
        events, self._events = self._events, []
        return events
