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
        width: 94%;
        max-width: 100;
        height: auto;
        max-height: 80%;
        border: thick $primary;
        background: $surface;
        padding: 0 1;
    }

    SweepPicker #sweep-title {
        width: 100%;
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
        width = max((len(name) for name, _, _ in self._choices), default=0)
        options = [(self._prompt(name.ljust(width), about), name, on) for name, about, on in self._choices]
        with Vertical(id="sweep-picker"):
            yield Static("Sweep: one preset without speculation (the baseline) and the speculative ones to compare. "
                         "The server restarts for each; the best is left serving. Space: toggle · s: start · Esc",
                         id="sweep-title")
            yield SelectionList[str](*options, id="sweep-list")

    @staticmethod
    def _prompt(name: str, about: str) -> Text:
        """One line (a selection list shows one per option): the name (padded to align), then its last result
        and what it is."""
        return Text.assemble((name, "bold"), ("│", "dim"), (about, "dim"))

    def on_mount(self) -> None:
        self.query_one("#sweep-list", SelectionList).focus()

    def action_start(self) -> None:
        self.dismiss(list(self.query_one("#sweep-list", SelectionList).selected))

    def action_cancel(self) -> None:
        self.dismiss(None)
