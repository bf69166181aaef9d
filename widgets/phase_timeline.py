"""PhaseTimeline: the startup phases, each with its status and duration."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Static

from tui.format import format_seconds

PHASE_LABELS = {
    "server_args": "args",
    "init_distributed": "dist init",
    "load_weights": "weights",
    "load_draft_weights": "draft weights",
    "kv_cache": "KV cache",
    "capture": "graphs",
    "capture_draft": "draft graphs",
    "capture_draft_extend": "draft-extend graphs",
    "capture_prefill": "prefill graphs",
    "http_server": "HTTP",
    "warmup": "warmup",
    "ready": "ready",
    "shutdown": "shutdown",
}
STATUS_MARKS = {"done": ("✔", "green"), "running": ("▶", "bold yellow"), "failed": ("✘", "bold red")}


class PhaseTimeline(Static):
    """Renders a list of ``tui.logs.model.Phase`` as a wrapped row: ``✔ weights 12.1s  ▶ graphs``."""

    _shown: tuple | None = ("unset",)

    def show(self, phases: Sequence, placeholder: str = "waiting for the server log…", running_extra_s: float = 0.0) -> None:
        """Show these phases (oldest first), or ``placeholder`` while there are none. No-op when unchanged.

        ``running_extra_s`` is added to running phases' durations: time the server went on past the log's
        newest timestamp.
        """
        key = (tuple((p.name, p.status, p.elapsed_s) for p in phases), placeholder, running_extra_s)
        if key == self._shown:
            return
        self._shown = key
        if not phases:
            self.update(Text(placeholder, style="dim"))
            return
        text = Text()
        for i, phase in enumerate(phases):
            mark, style = STATUS_MARKS.get(phase.status, ("·", ""))
            if i:
                text.append("  ")
            text.append(mark + " ", style=style)
            text.append(PHASE_LABELS.get(phase.name, phase.name), style="bold" if phase.status == "running" else "")
            elapsed = phase.elapsed_s
            if phase.status == "running" and running_extra_s:
                elapsed = (elapsed or 0.0) + running_extra_s
            duration = format_seconds(elapsed)
            if duration:
                text.append(f" {duration}", style="dim")
        self.update(text)
