"""GpuPane: per-GPU memory, utilization, power, clocks, PCIe and throttling, with trends and processes.

It renders what `show(snapshot)` hands it and does no I/O; the GpuSampler's thread reads NVML (or the
emulator) and the app delivers each snapshot. With 8 or more GPUs each GPU gets one compact row; with
fewer, two lines of detail. Zombie processes (dead or defunct, still holding GPU memory) are highlighted.
"""

from __future__ import annotations

from collections import deque

from rich.bar import Bar
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.events import Resize
from textual.widget import Widget
from textual.widgets import DataTable, Label, Static

from specmon import units
from specmon.gpu import describe
from specmon.gpu.model import GpuProcess, GpuReading, GpuSnapshot
from specmon.widgets.gpu_trend import TrendChart

COMPACT_FROM = 8
WIDE_FROM = 120  # columns from which rows keep a fixed width and the trends take the rest
TREND_POINTS = 180  # three minutes at the sampler's default 1 Hz
SEPARATOR = "  ·  "
DETAIL_INFO_LINES = 4
MIN_CHART_LINES, MAX_CHART_LINES = 1, 16
ROWS_SHARE = 0.7  # the #gpu-rows max-height in DEFAULT_CSS
MIN_PROCESS_ROWS, MAX_PROCESS_ROWS = 2, 8  # room kept for the process table when sizing the charts


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min"


def _memory_bar(reading: GpuReading, width: int) -> Bar | Text:
    fraction = reading.memory_fraction
    if fraction is None:
        return Text(units.NA.center(width), style="dim")
    color = "green" if fraction < 0.8 else "yellow" if fraction < 0.95 else "red"
    return Bar(1.0, 0.0, min(1.0, fraction), width=width, color=color, bgcolor="grey23")


def _flags(reading: GpuReading) -> Text:
    if reading.error:
        return Text(reading.error, style="bold red")
    parts = []
    if reading.slowdowns:
        parts.append(Text(", ".join(reading.slowdowns), style="bold yellow"))
    ecc = describe.ecc(reading)
    if ecc:
        parts.append(Text(ecc, style="bold red"))
    if reading.zombie_mib:
        parts.append(Text(f"zombie {reading.zombie_mib / 1024:.1f} GiB", style="bold red"))
    return Text("  ").join(parts)


def _clock_events(reading: GpuReading) -> Text:
    """Every clock-event reason in words: slowdowns in yellow, the others (idle, sync boost) dim."""
    if not reading.throttle_reasons:
        return Text("clocks: no limit active", style="dim")
    text = Text("clocks: ", style="dim")
    slow = set(reading.slowdowns)
    text.append_text(Text(", ").join(
        Text(reason, style="bold yellow" if reason in slow else "dim") for reason in reading.throttle_reasons))
    return text


# The trends a detailed row charts: (key, label). Each is drawn from 0 to a fixed top (see `_trend_top`).
DETAIL_TRENDS = (("util", "util"), ("mem", "mem"), ("power", "power"), ("temp", "temp"))
COMPACT_TRENDS = ("util", "mem")
TEMP_TOP_C = 100.0


def _cells(table: Table) -> tuple:
    """What a readings table shows, cell by cell (nested tables too), to compare two of them."""
    return tuple(tuple(_cells(cell) if isinstance(cell, Table) else repr(cell) for cell in column._cells)
                 for column in table.columns)


class GpuRow(Widget):
    """One GPU. Compact (8+ GPUs): one line of readings, then utilization and memory trends on the right.
    Detailed (fewer GPUs): four lines of readings, then charts of utilization, memory, power and temperature
    over the last minutes, each on a fixed scale."""

    def __init__(self, index: int, compact: bool = False) -> None:
        super().__init__(classes="gpu-row -compact-row" if compact else "gpu-row -detailed-row")
        self.index = index
        self.compact = compact
        self.chart_lines = MIN_CHART_LINES
        self._history: dict[str, deque[float]] = {key: deque(maxlen=TREND_POINTS) for key, _ in DETAIL_TRENDS}
        self._latest: tuple[GpuReading, bool] | None = None
        self._info_failed: bool | None = None  # whether the shown readings are an error (fewer lines)
        self._info_shown: tuple | None = None  # what the readings' table shows, cell by cell

    def compose(self) -> ComposeResult:
        if self.compact:
            with Horizontal(classes="gpu-line"):
                yield Static(classes="gpu-info")
                with Horizontal(classes="gpu-trends"):
                    for key in COMPACT_TRENDS:
                        yield TrendChart(classes=f"trend {key}-trend")
            return
        yield Static(classes="gpu-info")
        with Horizontal(classes="gpu-charts"):
            for key, _ in DETAIL_TRENDS:
                with Vertical(classes="chart"):
                    yield Label(classes=f"chart-label {key}-label")
                    yield TrendChart(classes=f"trend {key}-trend")

    def set_chart_lines(self, lines: int) -> None:
        """How tall a detailed row's charts are (the pane shares its spare height between the GPUs)."""
        if lines == self.chart_lines or self.compact:
            return
        self.chart_lines = lines
        self._apply_chart_lines()

    def _apply_chart_lines(self) -> None:
        for chart in self.query(TrendChart):
            chart.styles.height = self.chart_lines

    def on_mount(self) -> None:
        if not self.compact:
            self._apply_chart_lines()
        self._render_latest()

    def show(self, reading: GpuReading, wide: bool = False) -> None:
        """Add the reading to the trends and render it (once mounted)."""
        fraction = reading.memory_fraction
        values = {
            "util": reading.util_gpu_pct,
            "mem": None if fraction is None else reading.memory_used_mib,
            "power": reading.power_w,
            "temp": reading.temp_c,
        }
        for key, value in values.items():
            if value is not None:
                self._history[key].append(value)
        self._latest = (reading, wide)
        if self.is_mounted:
            self._render_latest()

    def trend(self, key: str) -> list[float]:
        """The readings kept for one trend ("util", "mem" in MiB, "power" in W, "temp" in °C), oldest first."""
        return list(self._history[key])

    def _trend_top(self, key: str, r: GpuReading) -> float:
        history = self._history[key]
        if key == "util":
            return 100.0
        if key == "mem":
            return r.memory_total_mib or max(history, default=1.0)
        if key == "power":
            return r.power_limit_w or max(history, default=1.0)
        return max(TEMP_TOP_C, max(history, default=0.0))

    def _render_latest(self) -> None:
        if self._latest is None:
            return
        reading, wide = self._latest
        for chart in self.query(TrendChart):
            key = next(c for c in chart.classes if c.endswith("-trend")).removesuffix("-trend")
            chart.show(self._history[key], self._trend_top(key, reading))
        # Only a change of height needs a layout of the screen (costly at 1 Hz): the readings' line count
        # changes only when an error replaces them; the chart labels are one line.
        failed = bool(reading.error)
        relayout, self._info_failed = failed != self._info_failed, failed
        infos = self.query(".gpu-info")
        if not infos:  # the row is being torn down (the app exits while a reading is shown)
            return
        info = infos.first(Static)
        table = self._compact(reading, wide) if self.compact else self._detailed(reading)
        shown = _cells(table)
        if shown != self._info_shown:  # an idle GPU's readings often stand still: no repaint of an unchanged row
            self._info_shown = shown
            info.update(table, layout=relayout)
        if self.compact:
            return
        labels = {
            "util": f"util {units.pct(reading.util_gpu_pct)}",
            "mem": f"mem {describe.memory(reading)}",
            "power": f"power {describe.power(reading)}",
            "temp": f"temp {units.temp(reading.temp_c)}",
        }
        for key, text in labels.items():
            label = self.query_one(f".{key}-label", Label)
            if label.content != text:
                label.update(text, layout=False)

    def _compact(self, r: GpuReading, wide: bool = False) -> Table:
        grid = Table.grid(padding=(0, 1), expand=True)
        grid.add_column(width=1, justify="right")
        grid.add_column(width=8)
        grid.add_column(width=10, no_wrap=True)
        grid.add_column(width=4, justify="right")
        grid.add_column(width=4, justify="right", no_wrap=True)
        grid.add_column(width=4, justify="right")
        grid.add_column(width=7, justify="right", no_wrap=True)
        grid.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
        if r.error:
            grid.add_row(str(r.index), Text(r.error, style="bold red"))
            return grid
        used, total = r.memory_used_mib, r.memory_total_mib
        memory = f"{units.gib(used)}/{units.gib(total, 0)}G" if used is not None else units.NA
        watts = units.NA if r.power_w is None else f"{r.power_w:.0f}W"
        clock = units.NA if r.sm_clock_mhz is None else f"{r.sm_clock_mhz:.0f}MHz"
        flags = _flags(r)
        if wide:
            last = Text.assemble((describe.pcie(r), "dim"), "  ", flags)
        else:
            last = flags if flags.plain else Text(describe.pcie(r), style="dim")
        grid.add_row(str(r.index), _memory_bar(r, 8), memory, units.pct(r.util_gpu_pct), watts, units.temp(r.temp_c),
                     clock, last)
        return grid

    def _detailed(self, r: GpuReading) -> Table:
        grid = Table.grid(expand=True)
        grid.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
        head = Text.assemble((f"GPU {r.index}", "bold"), " ", (r.name or units.NA, "bold"), "  ")
        flags = _flags(r)
        if flags.plain:
            head.append_text(flags)
            head.append("  ")
        head.append(r.uuid or "", style="dim")
        grid.add_row(head)
        if r.error:
            return grid
        mem_line = Table.grid(padding=(0, 1), expand=True)
        mem_line.add_column(width=12)
        mem_line.add_column(width=15, no_wrap=True)
        mem_line.add_column(ratio=1, no_wrap=True, overflow="ellipsis")
        util = f"util {units.pct(r.util_gpu_pct)}  membw {units.pct(r.util_mem_pct)}"
        mem_line.add_row(_memory_bar(r, 12), describe.memory(r), util)
        grid.add_row(mem_line)
        grid.add_row(
            f"{describe.power(r)}  {units.temp(r.temp_c)}  SM {units.mhz(r.sm_clock_mhz)}  mem {units.mhz(r.mem_clock_mhz)}"
        )
        grid.add_row(Text.assemble(f"PCIe {describe.pcie(r)}  ", _clock_events(r)))
        return grid


class GpuPane(Vertical):
    """Renders GpuSnapshots: call `show(snapshot)` for each new one."""

    DEFAULT_CSS = """
    GpuPane {
        height: 1fr;
    }

    GpuPane #gpu-header {
        height: 1;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }

    GpuPane.-unavailable #gpu-header {
        height: auto;
        text-wrap: wrap;
        padding: 1 0;
    }

    GpuPane.-unavailable #gpu-rows,
    GpuPane.-unavailable #gpu-processes {
        display: none;
    }

    GpuPane #gpu-rows {
        height: auto;
        max-height: 70%;
    }

    GpuPane .gpu-row {
        height: auto;
    }

    GpuPane .-detailed-row {
        margin-bottom: 1;
    }

    GpuPane .gpu-line {
        height: 1;
    }

    GpuPane .gpu-info {
        width: 1fr;
        height: auto;
    }

    GpuPane .gpu-trends {
        width: 21;
        height: 1;
    }

    GpuPane.-wide .gpu-line .gpu-info {
        width: 84;
    }

    GpuPane.-wide .gpu-trends {
        width: 1fr;
        margin-left: 1;
    }

    GpuPane .gpu-trends .trend {
        margin-left: 1;
    }

    GpuPane .gpu-charts {
        height: auto;
    }

    GpuPane .chart {
        width: 1fr;
        height: auto;
        margin-right: 1;
    }

    GpuPane .chart-label {
        width: 1fr;
        height: 1;
        color: $text-muted;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }

    GpuPane TrendChart {
        background: $boost;
    }

    GpuPane .util-trend {
        color: $primary;
    }

    GpuPane .mem-trend {
        color: $secondary;
    }

    GpuPane .power-trend {
        color: $warning;
    }

    GpuPane .temp-trend {
        color: $error;
    }

    GpuPane #gpu-processes {
        height: 1fr;
        min-height: 4;
    }
    """

    PROCESS_COLUMNS = (("gpu", "GPU"), ("pid", "PID"), ("user", "USER"), ("memory", "MEMORY"),
                       ("state", "STATE"), ("command", "COMMAND"))

    def __init__(self, *, id: str | None = "gpu-pane", classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.snapshot: GpuSnapshot | None = None
        self._rows: dict[int, GpuRow] = {}
        self._process_cells: dict[str, tuple[Text, ...]] = {}
        self._composed = False
        self._taken: deque[float] = deque(maxlen=TREND_POINTS)

    def compose(self) -> ComposeResult:
        yield Static("Waiting for the first GPU reading…", id="gpu-header")
        yield VerticalScroll(id="gpu-rows")
        table: DataTable = DataTable(id="gpu-processes", cursor_type="none", zebra_stripes=True)
        for key, label in self.PROCESS_COLUMNS:
            table.add_column(label, key=key)
        yield table

    def on_mount(self) -> None:
        self._composed = True
        if self.snapshot is not None:
            self.show(self.snapshot)

    def show(self, snapshot: GpuSnapshot) -> None:
        """Render one snapshot (keeping trends from the previous ones)."""
        self.snapshot = snapshot
        if snapshot.available and (not self._taken or snapshot.taken_at > self._taken[-1]):
            self._taken.append(snapshot.taken_at)
        if not self._composed:
            return  # rendered on mount
        # the header is one line unless NVML is (or was) unavailable: only then may its height change
        relayout = not snapshot.available or self.has_class("-unavailable")
        self.set_class(not snapshot.available, "-unavailable")
        self._show_header(snapshot, layout=relayout)
        if not snapshot.available:
            return
        compact = len(snapshot.gpus) >= COMPACT_FROM
        self.set_class(compact, "-compact")
        self._show_rows(snapshot, compact, self.has_class("-wide"))
        self._show_processes(snapshot.processes)

    _header_shown: Text | None = None

    def _show_header(self, snapshot: GpuSnapshot, layout: bool = False) -> None:
        header = self._header(snapshot, self.content_size.width)
        if header == self._header_shown:
            return  # unchanged (an unavailable reading, idle): no repaint, and no layout of the screen
        self._header_shown = header
        self.query_one("#gpu-header", Static).update(header, layout=layout)

    def _header(self, snapshot: GpuSnapshot, width: int = 0) -> Text:
        """The header line; where it would overflow ``width``, the driver version, then the links, are left out."""
        if not snapshot.available:
            what = {"emulator": "Emulated GPUs unavailable", "dcgm": "DCGM unavailable"}.get(snapshot.source,
                                                                                           "NVML unavailable")
            return Text.assemble((f"{what}: ", "bold red"), snapshot.reason or "unknown reason")
        names = sorted({g.name for g in snapshot.gpus if g.name})
        text = Text()
        label = f"{len(snapshot.gpus)} × {names[0]}" if len(names) == 1 else f"{len(snapshot.gpus)} GPUs"
        text.append(label, style="bold")
        if snapshot.source == "emulator" and not any("emulated" in name.lower() for name in names):
            text.append(" (emulated)", style="italic")
        if snapshot.source == "dcgm":
            text.append(" (DCGM via Prometheus: no process table)", style="italic")
        lost = sum(1 for g in snapshot.gpus if g.error)
        if lost:
            text.append(f"{SEPARATOR}{lost} lost", style="bold red")
        zombies = [p for p in snapshot.processes if p.zombie]
        if zombies:
            held = sum(p.used_mib or 0 for p in zombies) / 1024
            noun = "zombie holds" if len(zombies) == 1 else "zombies hold"
            text.append(f"{SEPARATOR}{len(zombies)} {noun} {held:.1f} GiB", style="bold red")
        others = [p for p in snapshot.processes if p.leftover and not p.zombie]
        if others:
            held = sum(p.used_mib or 0 for p in others) / 1024
            kinds = "/".join(sorted({p.leftover or "" for p in others}))
            text.append(f"{SEPARATOR}{len(others)} {kinds} hold {held:.1f} GiB", style="bold yellow")
        links = {link.kind for link in snapshot.topology}
        optional = []  # left out from the last when the line would overflow
        if links:
            optional.append(SEPARATOR + ("NVLink" if links == {"NVLink"} else "/".join(sorted(links))))
        if snapshot.driver:
            optional.append(f"{SEPARATOR}driver {snapshot.driver}")
        span = self._taken[-1] - self._taken[0] if len(self._taken) > 1 else 0.0
        what = "trends: util | mem" if len(snapshot.gpus) >= COMPACT_FROM else "trends"
        trends = f"{SEPARATOR}{what}, last {_duration(span)}"
        while optional and width and text.cell_len + sum(map(len, optional)) + len(trends) > width:
            optional.pop()
        text.append("".join(optional))
        text.append(trends, style="dim")
        return text

    def on_resize(self, event: Resize) -> None:
        wide = event.size.width >= WIDE_FROM
        if wide != self.has_class("-wide"):
            self.set_class(wide, "-wide")
            if self.snapshot is not None and self.snapshot.available:
                self.show(self.snapshot)
        elif self.snapshot is not None and self.snapshot.available:
            self._show_header(self.snapshot)
        self._size_charts(event.size.height)

    def _show_rows(self, snapshot: GpuSnapshot, compact: bool, wide: bool) -> None:
        container = self.query_one("#gpu-rows", VerticalScroll)
        indices = [g.index for g in snapshot.gpus]
        if list(self._rows) != indices or any(row.compact != compact for row in self._rows.values()):
            container.remove_children()
            self._rows = {i: GpuRow(i, compact) for i in indices}
            for reading in snapshot.gpus:
                self._rows[reading.index].show(reading, wide)
            container.mount_all(self._rows.values())
            self.call_after_refresh(lambda: self._size_charts(self.size.height))
        else:
            for reading in snapshot.gpus:
                self._rows[reading.index].show(reading, wide)
        self._size_charts(self.size.height)

    def _size_charts(self, pane_lines: int) -> None:
        """Give detailed rows' charts the height the pane has to spare, shared between the GPUs."""
        if not self._rows or self.has_class("-compact") or pane_lines <= 0:
            return
        processes = len(self.snapshot.processes) if self.snapshot else 0
        table_rows = 1 + max(MIN_PROCESS_ROWS, min(processes, MAX_PROCESS_ROWS))
        # the rows' box may take ROWS_SHARE of the pane, and leaves the header line and the process table
        spare = min(int(pane_lines * ROWS_SHARE), pane_lines - 1 - table_rows)
        per_gpu = spare // len(self._rows) - DETAIL_INFO_LINES - 2  # readings, chart labels, the gap
        height = max(MIN_CHART_LINES, min(MAX_CHART_LINES, per_gpu))
        for row in self._rows.values():
            row.set_chart_lines(height)

    def _show_processes(self, processes: list[GpuProcess]) -> None:
        """Add, update and remove the table's rows; a cell is touched only when its text or style changed."""
        table = self.query_one("#gpu-processes", DataTable)
        shown: dict[str, tuple[Text, ...]] = {}
        for proc in sorted(processes, key=lambda p: (p.gpu_index or 0, p.pid)):
            key = f"{proc.gpu_index}:{proc.pid}"
            style = "bold red" if proc.zombie else "bold yellow" if proc.leftover else "dim" if not proc.alive else ""
            cells = shown[key] = (
                Text(str(proc.gpu_index if proc.gpu_index is not None else "?"), style=style),
                Text(str(proc.pid), style=style),
                Text(proc.user or "", style=style),
                Text(describe.process_memory(proc), style=style, justify="right"),
                Text(describe.process_state(proc), style=style),
                Text(proc.name, style=style),
            )
            before = self._process_cells.get(key)
            if before is None:
                table.add_row(*cells, key=key)
                continue
            for (column, _), old, new in zip(self.PROCESS_COLUMNS, before, cells, strict=True):
                if (old.plain, old.style) != (new.plain, new.style):
                    table.update_cell(key, column, new, update_width=True)
        for key in self._process_cells.keys() - shown.keys():
            table.remove_row(key)
        self._process_cells = shown
