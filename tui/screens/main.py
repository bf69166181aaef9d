"""MainScreen: header, the three panes (tabs when narrow, a grid when wide) and the footer."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, TypeVar

from textual import on
from textual.app import ComposeResult
from textual.containers import Container
from textual.events import Resize
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Input, Tab, Tabs

from specmon.tui.patches.footer import KeysFooter
from specmon.view.bench_pane import BenchPaneModel, bench_pane
from specmon.view.grid_pane import grid_of_newest, sweep_store
from specmon.widgets.bench_panel import NARROW_COLUMNS as BENCH_COLUMNS
from specmon.widgets.bench_panel import BenchPanel
from specmon.widgets.gpu_pane import COMPACT_FROM, DETAIL_INFO_LINES, GpuPane
from specmon.widgets.live_view import LiveView
from specmon.widgets.server_pane import ServerPane
from specmon.widgets.status_header import StatusHeader
from specmon.widgets.traffic_view import TrafficView

if TYPE_CHECKING:
    from textual.widget import Widget

    from specmon.bench.model import BenchProgress, BenchResult
    from specmon.gpu.model import GpuSnapshot
    from specmon.live.model import LiveSnapshot
    from specmon.logs.model import LineKind, StartupState
    from specmon.view.state import Note, Row
    from specmon.view.traffic_pane import TrafficPaneModel

W = TypeVar("W", bound="Widget")

PANES = ("server", "gpus", "bench", "live")
TABS = (*PANES, "traffic")
"""The Traffic tab is the Live pane showing production traffic instead of the Live view."""
WIDE_COLUMNS = 160
PANE_CHROME = 4
"""A pane's border and padding, in columns."""
SERVER_MIN_COLUMNS = 92
"""The Server pane keeps this much (its log) before the Benchmark pane gets its full width."""
RIGHT_SHARE = 0.4
LIVE_ROWS = 16
"""The Live view's rows at full width: state, figures, speculation, three latency windows, alerts, history."""


class MainScreen(Screen):
    """The monitor: Server, GPUs, Benchmark and Live panes. Below ``WIDE_COLUMNS`` columns they are tabs."""

    class Composed(Message):
        """The screen and its panes are mounted: the app may start its sources."""

    def __init__(self, max_lines: int = 10_000, **kwargs) -> None:
        super().__init__(**kwargs)
        self._max_lines = max_lines
        self.active_pane = "server"
        self.composed = False
        self._pending_gpus: GpuSnapshot | None = None
        self._pending_live: LiveSnapshot | None = None
        self._pending_traffic: TrafficPaneModel | None = None
        self.live_tab = "live"
        self._failed_panes: set[str] = set()
        self._found: dict[str, Widget] = {}
        self._gpu_shape: tuple[int, int] = (0, 0)
        self._bench_asked = 0

    def compose(self) -> ComposeResult:
        yield StatusHeader(id="header")
        yield Tabs(
            Tab("1 Server", id="tab-server"),
            Tab("2 GPUs", id="tab-gpus"),
            Tab("3 Benchmark", id="tab-bench"),
            Tab("4 Live", id="tab-live"),
            Tab("5 Traffic", id="tab-traffic"),
            id="pane-tabs",
        )
        with Container(id="panes"):  # in this order for the wide grid: Live above Server, GPUs above Benchmark
            with Container(id="pane-live", classes="pane"):
                yield LiveView(id="live-view")
                yield TrafficView(id="traffic-view")
            with Container(id="pane-gpus", classes="pane"):
                yield GpuPane(id="gpu-pane")
            yield ServerPane(max_lines=self._max_lines, id="pane-server", classes="pane -active")
            with Container(id="pane-bench", classes="pane"):
                yield BenchPanel(id="bench-panel")
        yield KeysFooter(compact=True)

    def on_mount(self) -> None:
        self.query_one("#pane-server").border_title = "Server"
        self.query_one("#pane-gpus").border_title = "GPUs"
        self.query_one("#pane-bench").border_title = "Benchmark"
        self.query_one("#pane-live").border_title = "Live"
        self.query_one("#traffic-view").display = False
        self.call_after_refresh(self._composed)

    def _composed(self) -> None:
        self.composed = True
        self.post_message(self.Composed())

    def _one(self, selector: str, kind: type[W]) -> list[W]:
        """The widget with this id selector (``[]`` before it is mounted), found once: a DOM query costs about
        1 ms, and the Live view, GPU pane, header and Server pane are looked up at every update."""
        widget = self._found.get(selector)
        if widget is None or not widget.is_attached:
            widget = next(iter(self.query(selector)), None)
            if widget is None:
                return []
            self._found[selector] = widget
        return [widget] if isinstance(widget, kind) else []

    @property
    def header(self) -> StatusHeader:
        found = self._one("#header", StatusHeader)
        return found[0] if found else self.query_one(StatusHeader)

    @property
    def server_pane(self) -> ServerPane:
        found = self._one("#pane-server", ServerPane)
        return found[0] if found else self.query_one(ServerPane)

    def show_header(self, url: str, preset: str | None, state: str, emulator: bool) -> None:
        self.header.show(url, preset, state, emulator)

    def show_server(self, startup: StartupState, rows: list[Row], notes: list[Note], has_log: bool,
                    running_extra_s: float) -> None:
        """Render the startup state and the live rows in the Server pane."""
        self.server_pane.show(startup, rows, notes, has_log, running_extra_s)

    def write_log(self, lines: list[str], kinds: list[LineKind | str | None]) -> None:
        self.server_pane.write_log(lines, kinds)

    def clear_log(self) -> None:
        self.server_pane.clear_log()

    def follow_tail(self) -> None:
        self.server_pane.follow_tail()

    def toggle_polls(self) -> bool:
        """Show or hide the app's own polling requests in the log; whether they show now."""
        log = self.server_pane.log_view
        log.set_show_polls(not log.show_polls)
        return log.show_polls

    def open_search(self) -> None:
        """Show the Server pane with its search box open."""
        self.show_pane("server")
        self.server_pane.open_search()

    def search_again(self, forward: bool) -> None:
        """The next (or previous) match of the last search; opens the search box when there was none."""
        query = self.server_pane.search_query
        if not query:
            self.open_search()
        elif not self.server_pane.search(query, forward=forward):
            self.notify(f"No match for {query!r}", severity="warning")

    @property
    def wide(self) -> bool:
        return self.has_class("-wide")

    def on_resize(self, event: Resize) -> None:
        self.set_class(event.size.width >= WIDE_COLUMNS, "-wide")
        self.server_pane.set_class(self.wide, "-wide")
        if self.wide:
            self._layout_wide()
            self._flush_gpus()

    def _layout_wide(self) -> None:
        """Size the wide grid by what the panes hold: the Benchmark pane as wide as its CIs and acceptance
        chart need when the Server pane keeps room for its log, the top row as high as the Live view or the
        GPU rows need (so neither sits over empty rows), the bottom rows to the Server pane and the benchmark."""
        width, height = self.size
        right = max(BENCH_COLUMNS + PANE_CHROME, round(width * RIGHT_SHARE))
        if width - right < SERVER_MIN_COLUMNS:
            right = round(width * RIGHT_SHARE)
        top = max(LIVE_ROWS, self._gpu_rows_needed()) + 1
        top = max(8, min(top, (height - 2) // 2))
        panes = self.query_one("#panes")
        panes.styles.grid_columns = f"1fr {right}"
        panes.styles.grid_rows = f"{top} 1fr"

    def _gpu_rows_needed(self) -> int:
        """The GPU pane's rows for its GPUs: one line each when compact, else readings and a short chart."""
        snapshot = self._pending_gpus or next((p.snapshot for p in self._one("#gpu-pane", GpuPane)), None)
        gpus = len(snapshot.gpus) if snapshot is not None and snapshot.available else 1
        processes = min(len(snapshot.processes), 8) if snapshot is not None else 2
        per_gpu = 1 if gpus >= COMPACT_FROM else DETAIL_INFO_LINES + 4
        return 2 + 1 + gpus * per_gpu + 1 + max(2, processes)

    def show_pane(self, name: str) -> None:
        """Make ``name`` ("server", "gpus", "bench", "live", or "traffic": the Live pane's other tab) the active
        pane (and tab); "traffic" again, while it shows, classes its requests the next way."""
        if name not in TABS:
            return
        if name == "traffic" and self.traffic_shown:
            self.cycle_traffic_classes()
            return
        if name in ("live", "traffic"):
            self._show_live_tab(name)
            name = "live"
        self.active_pane = name
        for pane in PANES:
            self.query_one(f"#pane-{pane}").set_class(pane == name, "-active")
        if name == "gpus":
            self._flush_gpus()
        if name == "live" and self.live_tab == "live":
            self._flush_live()
        tab = self.live_tab if name == "live" else name
        tabs = self.query_one(Tabs)
        if tabs.active != f"tab-{tab}":
            tabs.active = f"tab-{tab}"

    def _show_live_tab(self, tab: str) -> None:
        """The Live pane shows the Live view or the Traffic tab."""
        self.live_tab = tab
        self.query_one("#live-view").display = tab == "live"
        self.query_one("#traffic-view").display = tab == "traffic"
        self.query_one("#pane-live").border_title = "Live" if tab == "live" else "Traffic"
        if tab == "traffic":
            self._flush_traffic()
        else:
            self._flush_live()

    @on(Tabs.TabActivated)
    def _tab_activated(self, event: Tabs.TabActivated) -> None:
        if event.tab.id:
            name = event.tab.id.removeprefix("tab-")
            shown = self.live_tab if self.active_pane == "live" else self.active_pane
            if name != shown:
                self.show_pane(name)

    @on(Input.Submitted, "#search")
    def _search_submitted(self, event: Input.Submitted) -> None:
        if event.value and not self.server_pane.search(event.value):
            self.notify(f"No match for {event.value!r}", severity="warning")
        self.server_pane.close_search()

    def key_escape(self) -> None:
        """Esc closes the search box, else dismisses the notifications."""
        if self.query_one("#search", Input).has_class("-open"):
            self.server_pane.close_search()
        else:
            self.app.clear_notifications()

    def show_gpus(self, snapshot: GpuSnapshot) -> None:
        """Hand a GPU snapshot to the GPU pane; while the pane is hidden (another tab), keep only the latest."""
        shape = (len(snapshot.gpus), min(len(snapshot.processes), 8))
        if shape != self._gpu_shape:
            self._gpu_shape = shape
            self._pending_gpus = snapshot
            if self.wide:
                self._layout_wide()
        self._pending_gpus = snapshot
        if self.wide or self.active_pane == "gpus":
            self._flush_gpus()

    def _flush_gpus(self) -> None:
        snapshot, self._pending_gpus = self._pending_gpus, None
        if snapshot is not None:
            for pane in self._one("#gpu-pane", GpuPane):
                self._guarded("GPU pane", pane.show, snapshot)

    def show_live(self, snapshot: LiveSnapshot) -> None:
        """Hand a live snapshot to the Live view; while it is hidden (another tab), keep only the latest, shown
        when its tab is (not a blank view until the next one)."""
        self._pending_live = snapshot
        if self.live_tab == "live" and (self.wide or self.active_pane == "live"):
            self._flush_live()

    def _flush_live(self) -> None:
        snapshot, self._pending_live = self._pending_live, None
        if snapshot is not None:
            for view in self._one("#live-view", LiveView):
                self._guarded("Live view", view.show, snapshot)

    def show_traffic(self, model: TrafficPaneModel) -> None:
        """Hand the Traffic tab its model; while the tab is hidden, keep only the latest."""
        self._pending_traffic = model
        if self.live_tab == "traffic" and (self.wide or self.active_pane == "live"):
            self._flush_traffic()

    def _flush_traffic(self) -> None:
        model, self._pending_traffic = self._pending_traffic, None
        if model is not None:
            for view in self._one("#traffic-view", TrafficView):
                self._guarded("Traffic tab", view.show, model)

    def cycle_traffic_classes(self) -> None:
        for view in self._one("#traffic-view", TrafficView):
            view.cycle()

    @property
    def traffic_shown(self) -> bool:
        return self.live_tab == "traffic" and (self.wide or self.active_pane == "live")

    def show_bench_progress(self, progress: BenchProgress) -> None:
        for panel in self._one("#bench-panel", BenchPanel):
            self._guarded("Benchmark panel", panel.show_progress, progress)

    def show_bench_note(self, text: str) -> None:
        for panel in self.query("#bench-panel").results(BenchPanel):
            self._guarded("Benchmark panel", panel.show_note, text)

    def show_bench_results(self, results: list[BenchResult]) -> None:
        """Show these runs in the Benchmark pane, once their model is built on a worker thread (it bootstraps each
        speedup's CI); a model built for older runs than the last asked is dropped."""
        panels = self._one("#bench-panel", BenchPanel)
        if not panels:
            return
        self._bench_asked += 1
        asked, baseline = self._bench_asked, panels[0].baseline
        live = getattr(self.app, "live", None)
        observed = live.running_history() if live is not None else None

        def build() -> None:
            try:
                model = bench_pane(results, baseline, grid_of_newest(results, sweep_store(), observed))
            except Exception as exc:  # shown as a pane that failed to render, never raised into Textual's worker
                with contextlib.suppress(RuntimeError):  # the app has gone
                    self.app.call_from_thread(self._pane_failed, "Benchmark panel", exc)
                return
            with contextlib.suppress(RuntimeError):
                self.app.call_from_thread(self._bench_pane_built, asked, model)

        self.run_worker(build, thread=True, group="bench-pane", exit_on_error=False)

    def _bench_pane_built(self, asked: int, model: BenchPaneModel) -> None:
        if asked == self._bench_asked:
            for panel in self._one("#bench-panel", BenchPanel):
                self._guarded("Benchmark panel", panel.show_results, model)

    def _guarded(self, what: str, show, value) -> None:
        """A pane that fails to render must not take the monitor down: say so once, keep going."""
        try:
            show(value)
        except Exception as exc:
            self._pane_failed(what, exc)

    def _pane_failed(self, what: str, exc: BaseException) -> None:
        if what not in self._failed_panes:
                self._failed_panes.add(what)
                self.log.error(f"{what} failed to render", exc)
                self.notify(f"{what} failed to render: {exc!r}", severity="error", timeout=10)
