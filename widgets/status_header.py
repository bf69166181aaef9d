"""StatusHeader: one line with the server URL, the preset, the state and an EMULATOR badge."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

STATE_STYLES = {
    "ready": "bold green",
    "failed": "bold white on red",
    "unreachable": "bold white on red",
    "stopped": "bold",
    "starting": "bold yellow",
    "switching": "bold yellow",
}


class StatusHeader(Static):
    """The app's header line (no clock, so screenshots are stable)."""

    def show(self, url: str, preset: str | None, state: str, emulator: bool = False) -> None:
        """Render: ``specmon  URL  preset NAME  ● STATE  EMULATOR``."""
        text = Text()
        text.append(" specmon ", style="bold reverse")
        text.append(f"  {url}")
        if preset:
            text.append("  preset ", style="dim")
            text.append(preset, style="bold")
        text.append("  ")
        style = STATE_STYLES.get(state.split()[0], "bold cyan")
        text.append(f" {state} ", style=style)
        if emulator:
            text.append("  ")
            text.append(" EMULATOR ", style="bold black on magenta")
        self.update(text)
