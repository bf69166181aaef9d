"""Confirm: a modal yes/no question (y: yes; n / Esc: no; Enter: the default answer, yes unless told)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label


class Confirm(ModalScreen[bool]):
    """Asks ``question``; dismisses with True (y) or False (n, Esc), and with ``default`` on Enter (where a second
    Enter typed ahead must not act: restarting what serves, ``default=False``)."""

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
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
        Binding("enter", "answer_default", "Default", show=False),
    ]

    def __init__(self, question: str, default: bool = True) -> None:
        super().__init__()
        self._question = question
        self.default = default

    def compose(self) -> ComposeResult:
        keys = "y / Enter: yes    n / Esc: no" if self.default else "y: yes    n / Esc / Enter: no"
        with Vertical(id="confirm"):
            yield Label(self._question)
            yield Label(keys, classes="dim")

    def action_answer_default(self) -> None:
        self.dismiss(self.default)

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
