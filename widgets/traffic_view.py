"""TrafficView: the Live pane's Traffic tab. Renders a `TrafficPaneModel` (production τ over the last minutes: its
token-weighted distribution, τ per class of the axis chosen with `cycle()`, outliers with their rids, notes)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from specmon.view.traffic_pane import TrafficPaneModel

BARS = " ▁▂▃▄▅▆▇█"
HISTOGRAM_ROWS = 2


def histogram_lines(tokens: tuple[int, ...], bin_width: float, width: int) -> list[str]:
    """Tokens per τ bin as HISTOGRAM_ROWS rows of vertical bars (two columns a bin while they fit), and a scale."""
    last = max((i for i, n in enumerate(tokens) if n), default=-1)
    if last < 0:
        return []
    shown = tokens[: max(last + 1, int(2 / bin_width) + 1)]
    column = 2 if len(shown) * 2 <= width else 1
    top = max(shown)
    levels = [round(n / top * 8 * HISTOGRAM_ROWS) if n else 0 for n in shown]
    rows = []
    for row in range(HISTOGRAM_ROWS - 1, -1, -1):
        cells = [BARS[max(0, min(8, level - 8 * row))] * column for level in levels]
        rows.append("".join(cells))
    scale = [" "] * (len(shown) * column)
    per_unit = round(1 / bin_width)
    for i in range(0, len(shown), per_unit):
        mark = f"{1 + i * bin_width:g}"
        at = i * column
        if at + len(mark) <= len(scale):
            scale[at:at + len(mark)] = mark
    return rows + ["".join(scale)]


class TrafficView(Static):
    """Renders the Traffic tab; `cycle()` shows the next axis of classes (prompt length, output length, --by)."""

    DEFAULT_CSS = """
    TrafficView {
        height: auto;
    }
    """

    _model: TrafficPaneModel | None = None
    axis = 0

    def show(self, model: TrafficPaneModel) -> None:
        if model == self._model:
            return
        self._model = model
        self._render_model()

    def cycle(self) -> None:
        """Show the classes of the next axis."""
        if self._model is not None and self._model.axes:
            self.axis = (self.axis + 1) % len(self._model.axes)
            self._render_model()

    def _render_model(self) -> None:
        model = self._model
        if model is None:
            return
        width = max(40, (self.size.width or 76))
        parts: list = [Text(model.headline, style="bold" if model.state == "reading" else "dim")]
        hist = histogram_lines(model.distribution, model.bin_width, width - 2)
        if hist:
            parts.append(Text("per-request τ, by tokens", style="dim"))
            parts += [Text(line, style="cyan" if i < HISTOGRAM_ROWS else "dim") for i, line in enumerate(hist)]
        if model.axes:
            title, rows = model.axes[self.axis % len(model.axes)]
            table = Table(box=None, padding=(0, 1), header_style="bold", pad_edge=False)
            table.add_column(f"by {title} (5: next)")
            table.add_column("requests", justify="right")
            table.add_column("share", justify="right")
            table.add_column("τ [95% CI]")
            for row in rows:
                table.add_row(row.value[:24], row.requests, row.share, row.tau)
            parts.append(table)
        if model.outliers:
            parts.append(Text("outliers (longest first)", style="bold"))
            parts += [Text(line, overflow="ellipsis", no_wrap=True) for line in model.outliers]
        parts += [Text(note, style="yellow", overflow="ellipsis", no_wrap=True) for note in model.notes]
        self.update(Group(*parts))
