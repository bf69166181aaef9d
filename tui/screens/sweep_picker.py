"""SweepPicker: a modal multi-select of the presets to sweep (space toggles, s starts, Esc cancels). Which are
selected reads without colour (a mark in the box, and a line naming them), and a selection that makes no sweep is
said there, the dialog left open."""

from __future__ import annotations

from collections.abc import Callable

from rich.segment import Segment
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.strip import Strip
from textual.widgets import SelectionList, Static

from specmon.text import cell_width, fit_cell

SELECTED_MARK, UNSELECTED_MARK = "X", " "


class MarkedSelectionList(SelectionList[str]):
    """Textual's SelectionList draws the same "X" in every box, selected or not, told apart by colour alone (a
    16-colour or monochrome terminal, a colour-blind reader: all look selected): here an unselected box is empty."""

    def render_line(self, y: int) -> Strip:
        line = super().render_line(y)
        segments = list(line)
        index = self.scroll_offset.y + y
        if len(segments) < 2 or index >= self.option_count:
            return line
        value = self.get_option_at_index(index).value
        mark = SELECTED_MARK if value in self.selected else UNSELECTED_MARK
        text, style, control = segments[1]
        segments[1] = Segment(mark.ljust(len(text)), style, control)
        return Strip(segments, line.cell_length)


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

    def __init__(self, choices: list[tuple[str, str, bool]],
                 problem: Callable[[list[str]], str | None] = lambda names: None) -> None:
        """``choices``: (preset name, one line about it, selected at first); ``problem``: why the selected names
        make no sweep (None: they do)."""
        super().__init__()
        self._choices = choices
        self._problem = problem

    def compose(self) -> ComposeResult:
        width = max((cell_width(name) for name, _, _ in self._choices), default=0)
        options = [(self._prompt(fit_cell(name, width), about), name, on) for name, about, on in self._choices]
        with Vertical(id="sweep-picker"):
            yield Static("Sweep: one preset without speculation (the baseline) and the speculative ones to compare. "
                         "The server restarts for each; the best is left serving. Space: toggle · s: start · Esc",
                         id="sweep-title")
            yield MarkedSelectionList(*options, id="sweep-list")
            yield Static(id="sweep-selected")

    @staticmethod
    def _prompt(name: str, about: str) -> Text:
        """One line (a selection list shows one per option): the name (padded to align), then its last result
        and what it is."""
        return Text.assemble((name, "bold"), ("│", "dim"), (about, "dim"))

    def on_mount(self) -> None:
        self.query_one("#sweep-list", SelectionList).focus()
        self._say_selected()

    def _selected(self) -> list[str]:
        chosen = set(self.query_one("#sweep-list", SelectionList).selected)
        return [name for name, _, _ in self._choices if name in chosen]  # in the list's order

    def _say_selected(self, problem: str | None = None) -> None:
        names = self._selected()
        text = Text(f"Selected ({len(names)} of {len(self._choices)}): {', '.join(names) or 'none'}")
        if problem:
            text.append(f"\nCannot start: {problem}", style="bold red")
        self.query_one("#sweep-selected", Static).update(text)

    def on_selection_list_selection_toggled(self) -> None:
        self._say_selected()

    def action_start(self) -> None:
        names = self._selected()
        problem = self._problem(names)
        if problem is not None:  # said here, the selection kept to fix
            self._say_selected(problem)
            return
        self.dismiss(names)

    def action_cancel(self) -> None:
        self.dismiss(None)
