"""ServerPane: the startup timeline, capture progress, error panel, server facts and the log."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input

from specmon.view.state import latest_capture
from specmon.widgets.capture_progress import CaptureProgress
from specmon.widgets.error_panel import ErrorPanel
from specmon.widgets.log_view import LogView
from specmon.widgets.phase_timeline import PhaseTimeline, phase_labels
from specmon.widgets.server_facts import ServerFacts, compact_startup_rows, startup_rows

if TYPE_CHECKING:
    from specmon.logs.model import LineKind


class ServerPane(Vertical):
    """Everything about the server: renders a ``StartupState`` plus live rows it is given."""

    DEFAULT_CSS = """
    ServerPane #search {
        dock: bottom;
        height: 3;
        display: none;
    }

    ServerPane #search.-open {
        display: block;
    }

    ServerPane.-wide ServerFacts {
        max-height: 14;
    }
    """

    def __init__(self, max_lines: int = 10_000, **kwargs) -> None:
        super().__init__(**kwargs)
        self._max_lines = max_lines

    def compose(self) -> ComposeResult:
        yield PhaseTimeline(id="timeline")
        yield CaptureProgress(id="capture")
        yield ErrorPanel(id="error-panel")
        yield ServerFacts(id="facts")
        yield LogView(max_lines=self._max_lines, id="log")
        yield Input(placeholder="search the log (Enter: next match, Esc: close)", id="search")

    @property
    def log_view(self) -> LogView:
        return self.query_one(LogView)

    def show(self, state, live_rows=(), notes=(), has_log: bool = True, running_extra_s: float = 0.0) -> None:
        """Render the startup state and the live server rows (``has_log``: whether a log is followed;
        ``running_extra_s``: how long the running phase went on past the log's newest timestamp)."""
        placeholder = "waiting for the server log…" if has_log else "no log followed (monitor --log PATH shows the startup)"
        self.query_one(PhaseTimeline).show(state.phases, placeholder, running_extra_s, phase_labels(state))
        capture = latest_capture(state) if state.state in ("starting", "failed") else None
        self.query_one(CaptureProgress).show(capture)
        self.query_one(ErrorPanel).show(state.error)
        self.query_one(ServerFacts).show(
            [*live_rows, *startup_rows(state)], notes, [*live_rows, *compact_startup_rows(state)]
        )

    @property
    def search_query(self) -> str:
        """The log's last search, or ""."""
        return self.log_view.search_query or ""

    def search(self, query: str, forward: bool = True) -> bool:
        """Jump to the next (or previous) line matching ``query``; False when none matches."""
        return self.log_view.search(query, forward=forward) is not None

    def write_log(self, lines: list[str], kinds: list[LineKind | str | None]) -> None:
        """Append lines (with their highlight kinds) to the log."""
        self.log_view.write_classified(lines, kinds)

    def clear_log(self) -> None:
        self.log_view.clear()

    def follow_tail(self) -> None:
        self.log_view.follow_tail()

    def open_search(self) -> None:
        """Show the search box and focus it."""
        search = self.query_one("#search", Input)
        search.add_class("-open")
        search.focus()

    def close_search(self) -> None:
        search = self.query_one("#search", Input)
        search.remove_class("-open")
        self.log_view.focus()
