"""Confirm: a modal yes/no question (y / Enter: yes; n / Esc: no)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label


class Confirm(ModalScreen[bool]):
    """Asks ``question``; dismisses with True (y, Enter) or False (n, Esc)."""

    DEFAULT_CSS = """
    Confirm {
        align: center middle;
    }

    Confirm #confirm {
        width: 80%;
        max-width: 70;
        height: auto;
        border: thick $warning;
        background: $surface;
        padding: 0 1;
    }

    Confirm Label {
        width: 1fr;
    }
    """

    BINDINGS = [
        Binding("y,enter", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self._question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm"):
            yield Label(self._question)
            yield Label("y / Enter: yes    n / Esc: no", classes="dim")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
