"""SweepPicker: a modal multi-select of the presets to sweep (space toggles, s starts, Esc cancels)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import SelectionList, Static


class SweepPicker(ModalScreen[list[str] | None]):
    """Pick the presets of a sweep; dismisses with their names (s), or None (Esc)."""

    DEFAULT_CSS = """
    SweepPicker {
        align: center middle;
    }

    SweepPicker #sweep-picker {
        width: 80%;
        max-width: 90;
        height: auto;
        max-height: 80%;
        border: thick $primary;
        background: $surface;
        padding: 0 1;
    }

    SweepPicker #sweep-list {
        height: auto;
        max-height: 16;
    }
    """

    BINDINGS = [Binding("s", "start", "Start"), Binding("escape", "cancel", "Cancel")]

    def __init__(self, choices: list[tuple[str, str, bool]]) -> None:
        """``choices``: (preset name, one line about it, selected at first)."""
        super().__init__()
        self._choices = choices

    def compose(self) -> ComposeResult:
        options = [(Text.assemble((name, "bold"), (f"  {about}", "dim")), name, on) for name, about, on in self._choices]
        with Vertical(id="sweep-picker"):
            yield Static("Sweep: one preset without speculation (the baseline) and the speculative ones to compare. "
                        "The server restarts for each; the best is left serving. Space: toggle · s: start · Esc")
            yield SelectionList[str](*options, id="sweep-list")

    def on_mount(self) -> None:
        self.query_one("#sweep-list", SelectionList).focus()

    def action_start(self) -> None:
        self.dismiss(list(self.query_one("#sweep-list", SelectionList).selected))

    def action_cancel(self) -> None:
        self.dismiss(None)
