"""PhaseTimeline: the startup phases, each with its status and duration."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.content import Content
from textual.css.styles import RulesMap
from textual.strip import Strip
from textual.style import Style
from textual.visual import RenderOptions, Visual
from textual.widgets import Static

from specmon.units import format_seconds

PHASE_LABELS = {
    "server_args": "args",
    "init_distributed": "dist init",
    "load_weights": "weights",
    "load_draft_weights": "draft weights",
    "kv_cache": "KV cache",
    "attention_backend": "attn backend",
    "capture": "target graphs",
    "capture_draft": "draft graphs",
    "capture_draft_extend": "draft-extend graphs",
    "capture_prefill": "prefill graphs",
    "http_server": "HTTP",
    "warmup": "warmup",
    "ready": "ready",
    "shutdown": "shutdown",
}
STATUS_MARKS = {"done": ("✔", "green"), "running": ("▶", "bold yellow"), "failed": ("✘", "bold red")}
PHASE_GAP = "  "


def phase_labels(state) -> dict[str, str]:
    """Labels a ``StartupState``'s log names: the target graphs as "verify graphs" or "decode graphs"."""
    target = state.capture("target", "target")
    if target is None or state.log_family != "new":  # older logs do not say; their label is a guess
        return {}
    for kind in ("verify", "decode"):
        if kind in target.label:
            return {"capture": f"{kind} graphs"}
    return {}


class PhaseRow(Visual):
    """Phases laid out in lines of the width given, breaking only between phases, never inside one."""

    def __init__(self, phases: Sequence[Content]) -> None:
        self.phases = list(phases)

    def __str__(self) -> str:
        return PHASE_GAP.join(phase.plain for phase in self.phases)

    def lines(self, width: int) -> list[Content]:
        """The phases packed greedily into lines of at most ``width`` cells (a phase wider than that alone)."""
        lines: list[Content] = []
        for phase in self.phases:
            if lines and lines[-1].cell_length + len(PHASE_GAP) + phase.cell_length <= width:
                lines[-1] = lines[-1] + PHASE_GAP + phase
            else:
                lines.append(phase)
        return lines

    def _packed(self, width: int) -> Content:
        return Content("\n").join(self.lines(width))

    def render_strips(self, width: int, height: int | None, style: Style, options: RenderOptions) -> list[Strip]:
        return self._packed(width).render_strips(width, height, style, options)

    def get_optimal_width(self, rules: RulesMap, container_width: int) -> int:
        return len(str(self))

    def get_minimal_width(self, rules: RulesMap) -> int:
        return max((phase.cell_length for phase in self.phases), default=1)

    def get_height(self, rules: RulesMap, width: int) -> int:
        return self._packed(width).get_height(rules, width)


class PhaseTimeline(Static):
    """Renders a list of ``specmon.logs.model.Phase`` as a wrapped row: ``✔ weights 12.1s  ▶ verify graphs 3.0s``."""

    DEFAULT_CSS = """
    PhaseTimeline {
        height: auto;
        max-height: 4;
    }
    """

    _shown: tuple | None = ("unset",)
    row: PhaseRow | None = None
    """The phases shown (None while the placeholder is)."""

    @property
    def plain(self) -> str:
        """The text shown, phases separated by two spaces."""
        return str(self.row) if self.row is not None else str(self.visual)

    def show(
        self,
        phases: Sequence,
        placeholder: str = "waiting for the server log…",
        running_extra_s: float = 0.0,
        labels: dict[str, str] | None = None,
    ) -> None:
        """Show these phases (oldest first), or ``placeholder`` while there are none. No-op when unchanged.

        ``running_extra_s`` is added to running phases' durations: time the server went on past the log's
        newest timestamp. ``labels`` override ``PHASE_LABELS`` by phase name.
        """
        labels = {**PHASE_LABELS, **(labels or {})}
        if not any(p.status == "running" for p in phases):
            running_extra_s = 0.0  # it only lengthens running phases: no reason to draw the row again
        key = (tuple((p.name, p.status, p.elapsed_s) for p in phases), placeholder, running_extra_s, tuple(labels.items()))
        if key == self._shown:
            return
        self._shown = key
        if not phases:
            self.row = None
            self.update(Text(placeholder, style="dim"))
            return
        row = []
        for phase in phases:
            mark, style = STATUS_MARKS.get(phase.status, ("·", ""))
            text = Text()
            text.append(mark + " ", style=style)
            text.append(labels.get(phase.name, phase.name), style="bold" if phase.status == "running" else "")
            elapsed = phase.elapsed_s
            if phase.status == "running" and running_extra_s:
                elapsed = (elapsed or 0.0) + running_extra_s
            duration = format_seconds(elapsed)
            if duration:
                text.append(f" {duration}", style="dim")
            row.append(Content.from_rich_text(text, console=self.app.console))
        self.row = PhaseRow(row)
        self.update(self.row)
