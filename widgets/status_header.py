"""StatusHeader: one line with the server URL, the preset, the state and an EMULATOR badge."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

STATE_STYLES = {
    "ready": "bold green",
    "failed": "bold white on red",
    "unreachable": "bold white on red",
    "exited": "bold white on red",
    "stopped": "bold",
    "starting": "bold yellow",
    "switching": "bold yellow",
}


class StatusHeader(Static):
    """The app's header line (no clock, so screenshots are stable). When the line is wider than the screen,
    the URL loses its scheme, then goes: the state (e.g. ``capturing draft decode 3/8 · ETA 12s``) stays."""

    _fields: tuple[str, str | None, str, bool] = ("", None, "", False)

    def show(self, url: str, preset: str | None, state: str, emulator: bool = False) -> None:
        """Render: ``specmon  URL  preset NAME  ● STATE  EMULATOR``."""
        self._fields = (url, preset, state, emulator)
        self.refresh()

    def render(self) -> Text:
        url, preset, state, emulator = self._fields
        width = self.size.width or 200
        for shown_url in (url, url.split("://", 1)[-1], None):
            text = header_text(shown_url, preset, state, emulator)
            if text.cell_len <= width:
                break
        return text


def header_text(url: str | None, preset: str | None, state: str, emulator: bool) -> Text:
    """The header line with ``url`` (or without a URL when None)."""
    text = Text()
    text.append(" specmon ", style="bold reverse")
    if url:
        text.append(f"  {url}")
    if preset:
        text.append("  preset ", style="dim")
        text.append(preset, style="bold")
    if state:
        text.append("  ")
        text.append(f" {state} ", style=STATE_STYLES.get(state.split()[0], "bold cyan"))
    if emulator:
        text.append("  ")
        text.append(" EMULATOR ", style="bold black on magenta")
    return text
