"""BenchPanel: live decode tok/s per request (one series per preset), acceptance length per preset with
its CI, a table comparing presets, and the current run's progress. It renders only what it is given."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.events import Resize
from textual.timer import Timer
from textual.widgets import DataTable, Static
from textual_plotext import PlotextPlot

from specmon.bench.model import BenchProgress, BenchResult
from specmon.bench.report import describe_progress
from specmon.units import number
from specmon.view.bench_pane import COLUMNS, BenchPaneModel
from specmon.widgets.gpu_trend import columns
from specmon.widgets.grid_panel import GridPanel

REDRAW_INTERVAL_S = 0.5
NARROW_COLUMNS = 100
NARROW_HIDDEN = {"ci"}
"""Columns left out below ``NARROW_COLUMNS`` (the speedup loses its CI too), so the flags always show."""
IDLE_TEXT = "No benchmark yet: press b to benchmark the current server."
TOK_TITLE = "decode tok/s per request"
SERIES_COLORS = ("cyan", "magenta", "green", "yellow", "blue", "white")
"""Each preset's line colour (plotext's and Rich's names for the same ANSI colours; red is the CIs')."""


def downsample(values: list[float], width: int) -> tuple[list[float], list[float]]:
    """(x, y) with at most `width` points: buckets of consecutive values averaged, x at bucket centres."""
    xs = [float(i + 1) for i in range(len(values))]
    if width < 1:
        return xs, list(values)
    return columns(xs, width), columns(values, width)


class BenchPanel(Vertical):
    """The Benchmark pane: call `show_progress(BenchProgress)` while a run goes and `show_results(model)` with the
    `BenchPaneModel` of every run to compare (earlier runs and presets stay on show)."""

    DEFAULT_CSS = """
    BenchPanel {
        height: 1fr;
        width: 1fr;
    }

    BenchPanel #bench-progress {
        height: auto;
        max-height: 3;
        padding: 0 1;
        color: $text-muted;
    }

    BenchPanel #bench-charts {
        height: 1fr;
        min-height: 8;
    }

    BenchPanel #bench-tok {
        width: 2fr;
    }

    BenchPanel #bench-tok-legend {
        height: 1;
        text-align: center;
    }

    BenchPanel #bench-accept-chart {
        width: 1fr;
    }

    BenchPanel.-narrow #bench-accept-chart {
        display: none;
    }

    BenchPanel #bench-table {
        height: auto;
        max-height: 9;
    }

    BenchPanel GridPanel, BenchPanel.-grid #bench-charts, BenchPanel.-grid #bench-table {
        display: none;
    }

    BenchPanel.-grid GridPanel {
        display: block;
    }
    """

    def __init__(self, baseline: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.baseline = baseline
        self._series: dict[str, list[float]] = {}
        self._accept: dict[str, tuple[float, tuple[float, float] | None]] = {}
        self._rows: dict[str, dict[str, str]] = {}
        self._narrow = False
        self._charts_dirty = False
        self._redraw_timer: Timer | None = None
        self.results: list[BenchResult] = []
        self.progress: BenchProgress | None = None
        self._note_shown = False

    def compose(self) -> ComposeResult:
        yield Static(IDLE_TEXT, id="bench-progress")
        with Horizontal(id="bench-charts"):
            with Vertical(id="bench-tok"):  # its title and legend above the plot: plotext's covers the lines
                yield Static(TOK_TITLE, id="bench-tok-legend")
                yield PlotextPlot(id="bench-tok-chart")
            yield PlotextPlot(id="bench-accept-chart")
        yield DataTable(id="bench-table", cursor_type="row", zebra_stripes=True)
        yield GridPanel(id="bench-grid")

    def on_mount(self) -> None:
        self._build_table()
        self._charts_dirty = True
        self._redraw()

    def on_resize(self, event: Resize) -> None:
        narrow = event.size.width < NARROW_COLUMNS
        self.set_class(narrow, "-narrow")
        if narrow != self._narrow:
            self._narrow = narrow
            self._build_table()
        self._mark_dirty()

    def _columns(self) -> list[tuple[str, str]]:
        return [(key, label) for key, label in COLUMNS if not (self._narrow and key in NARROW_HIDDEN)]

    def _cell(self, cells: dict[str, str], key: str) -> str:
        if key == "speedup" and self._narrow:
            return cells.get("speedup_short", cells[key])
        return cells[key]

    def _build_table(self) -> None:
        """(Re)build the table's columns for the current width, with every row."""
        table = self.query_one("#bench-table", DataTable)
        table.clear(columns=True)
        for key, label in self._columns():
            table.add_column(label, key=key)
        for row_key, cells in self._rows.items():
            table.add_row(*(self._cell(cells, k) for k, _ in self._columns()), key=row_key)

    # -- input ---------------------------------------------------------------------------------------
    def show_progress(self, progress: BenchProgress) -> None:
        """Show a running benchmark's progress (its preset's series and row update live)."""
        self.progress = progress
        self._note_shown = False
        self.query_one("#bench-progress", Static).update(describe_progress(progress))
        self._series[progress.preset] = list(progress.decode_tok_s)
        if progress.accept_length is not None:
            self._accept[progress.preset] = (progress.accept_length, None)
        live = f"{progress.preset} (run)"
        if progress.finished:
            self._remove_row(live)
        elif progress.median_tok_s is not None or live not in self._rows:
            row = {key: "–" for key, _ in COLUMNS}
            row.update(
                preset=live,
                runs=f"{progress.done - progress.failed}/{progress.total}",
                tok_s=number(progress.median_tok_s),
                tau=number(progress.accept_length, ".2f"),
                flags=progress.phase,
            )
            self._set_row(live, row)
        self._mark_dirty()

    def show_note(self, text: str) -> None:
        """Text in place of the progress line (a sweep's progress, its recommendation), wrapped to three lines; it
        stays over the results' summary until the next run's progress."""
        self._note_shown = True
        self.query_one("#bench-progress", Static).update(Text(text))

    def show_results(self, model: BenchPaneModel) -> None:
        """Show finished runs (`specmon.view.bench_pane`): each preset's shown run fills its row, series and bar."""
        self.results = list(model.results)
        for preset, row in model.rows.items():
            self._remove_row(f"{preset} (run)")
            self._set_row(preset, dict(row.cells))
            self._series[preset] = list(row.series)
            if row.accept is not None:
                self._accept[preset] = row.accept
        if (self.progress is None or self.progress.finished) and model.note and not self._note_shown:
            flag = f"\nFLAG unrepresentative: {model.production}" if model.production else ""
            self.query_one("#bench-progress", Static).update(Text(model.note + flag))
        self.set_class(model.grid is not None, "-grid")  # the newest run is a grid sweep's: its picture instead
        if model.grid is not None:
            self.query_one(GridPanel).show(model.grid)
        self._mark_dirty()

    # -- rendering -----------------------------------------------------------------------------------
    def _set_row(self, key: str, cells: dict[str, str]) -> None:
        table = self.query_one("#bench-table", DataTable)
        new = key not in self._rows
        self._rows[key] = cells
        if new:
            table.add_row(*(self._cell(cells, k) for k, _ in self._columns()), key=key)
            return
        for column, _ in self._columns():
            table.update_cell(key, column, self._cell(cells, column), update_width=True)

    def _remove_row(self, key: str) -> None:
        if self._rows.pop(key, None) is not None:
            self.query_one("#bench-table", DataTable).remove_row(key)

    def _mark_dirty(self) -> None:
        """The charts are redrawn within REDRAW_INTERVAL_S (one redraw for many changes; no timer while idle)."""
        self._charts_dirty = True
        if self._redraw_timer is None and self.is_mounted:
            self._redraw_timer = self.set_timer(REDRAW_INTERVAL_S, self._redraw_if_dirty)

    def _redraw_if_dirty(self) -> None:
        self._redraw_timer = None
        if self._charts_dirty:
            self._redraw()

    def _redraw(self) -> None:
        self._charts_dirty = False
        self._draw_tok_chart()
        self._draw_accept_chart()

    def _draw_tok_chart(self) -> None:
        widget = self.query_one("#bench-tok-chart", PlotextPlot)
        plt = widget.plt
        plt.clear_data()
        plt.clear_figure()
        width = max(8, (widget.size.width - 10) * 2)
        legend = Text(no_wrap=True, overflow="ellipsis")
        drawn = [(preset, values) for preset, values in self._series.items() if values]
        for index, (preset, values) in enumerate(drawn):
            color = SERIES_COLORS[index % len(SERIES_COLORS)]
            xs, ys = downsample(values, width)
            plt.plot(xs, ys, color=color, marker="braille")  # no label: plotext's legend is drawn over the data
            legend.append("  " if index else "")
            legend.append("━ ", style=f"bold {color}")
            legend.append(preset)
        if drawn:
            plt.xlabel("request")
        titled = Text.assemble(TOK_TITLE, ": " if drawn else "", legend, no_wrap=True, overflow="ellipsis")
        room = self.query_one("#bench-tok-legend", Static).size.width
        self.query_one("#bench-tok-legend", Static).update(titled if titled.cell_len <= room or not drawn else legend)
        widget.refresh()

    def _draw_accept_chart(self) -> None:
        widget = self.query_one("#bench-accept-chart", PlotextPlot)
        plt = widget.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("acceptance length τ (95% CI)")
        items = [(p, v) for p, v in self._accept.items()]
        if items:
            names = [p for p, _ in items]
            values = [v for _, (v, _) in items]
            plt.bar(names, values, width=0.4)
            for x, (_, (_, ci)) in enumerate(items, start=1):
                if ci and ci[1] > ci[0]:
                    plt.plot([x, x], list(ci), color="red", marker="braille")
            plt.ylim(0, max(values) * 1.25 + 0.1)
        widget.refresh()
