"""GridPanel: a grid sweep in the Benchmark pane: total output tok/s against concurrency (one line per
configuration, the baseline's first) and the configuration × concurrency table of speedups coloured by win or
loss (predicted cells marked "~"), then the recommendation per load band; under 22 rows (80x24), the table
alone. Renders the `GridPaneModel` it is given."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static
from textual_plotext import PlotextPlot

from specmon.view.grid_pane import GridPaneModel

LINE_COLORS = ("white", "cyan", "magenta", "green", "blue", "red")
"""The baseline's line first (white), then each configuration's in turn."""
CELL_STYLES = {"win": "bold green", "loss": "bold red", "unclear": "yellow", "predicted": "dim italic", "none": "dim"}


class GridPanel(Vertical):
    """`show(model)`: the chart, the table and the notes of one grid sweep."""

    DEFAULT_CSS = """
    GridPanel { height: 1fr; }
    GridPanel #grid-title { height: auto; max-height: 3; }
    GridPanel #grid-chart { height: 1fr; min-height: 6; }
    GridPanel #grid-table { height: auto; max-height: 8; }
    GridPanel #grid-notes { height: auto; max-height: 6; color: $text-muted; }
    GridPanel.-short #grid-title, GridPanel.-short #grid-chart { display: none; }
    """
    SHORT_BELOW = 22
    """Rows under which the chart would be a sliver: the table alone is shown (80x24 gives about 19)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model: GridPaneModel | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="grid-title")
        yield PlotextPlot(id="grid-chart")
        yield DataTable(id="grid-table", zebra_stripes=True, cursor_type="none")
        yield Static("", id="grid-notes")

    def show(self, model: GridPaneModel) -> None:
        if model == self.model:
            return
        self.model = model
        self._draw_title()
        table = self.query_one(DataTable)
        table.clear(columns=True)
        table.add_column("config", key="config")
        for c in model.concurrency:
            table.add_column(f"c={c}", key=f"c{c}")
        for label, cells in model.rows:
            table.add_row(label, *(Text(cell.text, style=CELL_STYLES.get(cell.verdict, ""), justify="right")
                                   for cell in cells), key=label)
        self.query_one("#grid-notes", Static).update(Text("\n".join(model.notes), no_wrap=True, overflow="ellipsis"))
        self._draw_chart()

    def on_resize(self) -> None:
        self.set_class(self.size.height < self.SHORT_BELOW, "-short")
        if self.model is not None:
            self._draw_title()
            self._draw_chart()

    def _draw_title(self) -> None:
        """The title and the lines' legend, broken between entries, never inside a configuration's name."""
        assert self.model is not None
        width = max(self.size.width - 2, 20)
        title = Text()
        title.append("output tok/s by concurrency: ", "bold")
        for index, line in enumerate(self.model.lines):
            entry = Text.assemble(("━ ", f"bold {LINE_COLORS[index % len(LINE_COLORS)]}"), line.label)
            last_line = title.plain.rpartition("\n")[2]
            if index and len(last_line) + 2 + entry.cell_len > width:
                title.append("\n")
            elif index:
                title.append("  ")
            title.append_text(entry)
        self.query_one("#grid-title", Static).update(title)

    def _draw_chart(self) -> None:
        model = self.model
        widget = self.query_one("#grid-chart", PlotextPlot)
        plt = widget.plt
        plt.clear_data()
        plt.clear_figure()
        if model is None:
            return
        position = {c: i for i, c in enumerate(model.concurrency, start=1)}  # evenly spaced: 1, 2, 4 ... 64
        for index, line in enumerate(model.lines):
            if line.points:
                plt.plot([position[c] for c, _ in line.points], [v for _, v in line.points],
                         color=LINE_COLORS[index % len(LINE_COLORS)], marker="braille")
        plt.xticks(list(position.values()), [str(c) for c in model.concurrency])
        plt.xlabel("concurrency")
        widget.refresh()
