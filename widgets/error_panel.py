"""ErrorPanel: a startup failure shown prominently: its kind, message, phase and hint."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from specmon.widgets.phase_timeline import PHASE_LABELS


class ErrorPanel(Static):
    """A bordered panel for a classified ``StartupError``; hidden while there is none."""

    DEFAULT_CSS = """
    ErrorPanel {
        display: none;
        height: auto;
        max-height: 8;
        border: heavy $error;
        border-title-color: $error;
        border-title-style: bold;
        color: $text;
        padding: 0 1;
    }
    """

    _shown: tuple | None = ("unset",)

    def show(self, error) -> None:
        """Show a ``specmon.logs.model.StartupError`` (or hide when None); a no-op when it did not change."""
        key = (error.kind, error.message, error.phase, error.hint) if error is not None else None
        if key == self._shown:
            return
        self._shown = key
        self.display = error is not None
        if error is None:
            return
        kind = error.kind.replace("_", " ")
        self.border_title = f"Startup failed: {kind}"
        if error.phase:
            self.border_subtitle = f"during {PHASE_LABELS.get(error.phase, error.phase)}"
        text = Text()
        if error.hint:  # first, so the panel's height never cuts it: the message is in the log too
            text.append("Hint: ", style="bold yellow")
            text.append(error.hint + "\n")
        text.append(error.message, style="bold")
        self.update(text)
