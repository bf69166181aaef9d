"""BenchPanel fed with recorded runs (tests/fixtures/bench/*.jsonl, written by real BenchRuns) and progress."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.widgets import DataTable, Static

from specmon.bench.model import BenchProgress
from specmon.bench.results import ResultStore
from specmon.view.bench_pane import bench_pane
from specmon.widgets.bench_panel import BenchPanel, downsample
from tests.support.app_harness import wait_for

RECORDED = Path(__file__).parents[1] / "fixtures" / "bench"


def recorded_runs():
    return ResultStore(RECORDED).load_all()


class PanelApp(App):
    def __init__(self, results=None, progress=None):
        super().__init__()
        self._results = results
        self._progress = progress

    def compose(self) -> ComposeResult:
        yield BenchPanel(id="bench-panel")

    def on_mount(self) -> None:
        panel = self.query_one(BenchPanel)
        if self._results:
            panel.show_results(bench_pane(self._results))
        if self._progress:
            panel.show_progress(self._progress)


def _rows(app) -> dict[str, list[str]]:
    table = app.query_one(DataTable)
    return {str(key.value): [str(c) for c in table.get_row(key)] for key in table.rows}


async def test_recorded_runs_fill_the_table_with_speedup_against_the_baseline():
    runs = recorded_runs()
    assert [r.preset for r in runs] == ["baseline", "eagle3-5", "eagle3-10"]
    app = PanelApp(results=runs)
    async with app.run_test(size=(140, 36)) as pilot:
        await pilot.pause()
        rows = _rows(app)
        assert list(rows) == ["baseline", "eagle3-5", "eagle3-10"]
        base, e5 = rows["baseline"], rows["eagle3-5"]
        assert base[6] == "baseline" and base[4] == "–"
        tau = runs[1].summary.accept_length.token_weighted
        assert e5[4] == f"{tau:.2f}/4"
        assert e5[2] == f"{runs[1].summary.median_tok_s:.1f}"
        speedup = float(e5[6].split("×")[0])
        assert 2.0 < speedup < 3.0
        progress = str(app.query_one("#bench-progress", Static).render())
        assert "eagle3-10" in progress and "3 preset(s)" in progress


async def test_progress_updates_its_row_in_place_and_charts_are_throttled():
    app = PanelApp(results=recorded_runs())
    async with app.run_test(size=(140, 36)) as pilot:
        panel = app.query_one(BenchPanel)
        table = app.query_one(DataTable)
        draws = []
        original = panel._draw_tok_chart
        panel._draw_tok_chart = lambda: (draws.append(1), original())[1]
        for done in range(1, 41):
            panel.show_progress(
                BenchProgress(run_id="r", preset="eagle3-16", phase="measuring", done=done, total=40,
                              decode_tok_s=tuple(300.0 + i for i in range(done)), accept_length=3.4,
                              median_tok_s=300.0 + done / 2)
            )
        assert table.row_count == 4
        assert _rows(app)["eagle3-16 (run)"][:5] == ["eagle3-16 (run)", "40/40", "320.0", "–", "3.40"]
        assert await wait_for(pilot, lambda: draws and not panel._charts_dirty)
        assert 1 <= len(draws) <= 3, "40 updates, a redraw per interval at most"
        assert "eagle3-16: measuring 40/40" in str(app.query_one("#bench-progress", Static).render())
        assert panel._series["eagle3-16"][-1] == 339.0


async def test_it_fits_a_small_pane():
    app = PanelApp(results=recorded_runs())
    async with app.run_test(size=(78, 18)) as pilot:
        panel = app.query_one(BenchPanel)
        assert await wait_for(pilot, lambda: panel.has_class("-narrow") and not panel._charts_dirty)
        assert not app.query_one("#bench-accept-chart").display or app.query_one("#bench-accept-chart").size.width == 0
        table = app.query_one(DataTable)
        assert table.region.height >= 4 and table.region.bottom <= 18
        assert app.query_one("#bench-tok-chart").region.height >= 6


def test_downsample_averages_buckets():
    xs, ys = downsample([float(i) for i in range(1000)], 100)
    assert len(xs) == len(ys) == 100
    assert ys[0] == pytest.approx(4.5) and ys[-1] == pytest.approx(994.5)
    assert downsample([1.0, 2.0], 10) == ([1.0, 2.0], [1.0, 2.0])


@pytest.mark.parametrize("size", [(80, 24), (160, 40)])
def test_snapshot(snap_compare, size):
    async def settle(pilot):
        panel = pilot.app.query_one(BenchPanel)
        await wait_for(pilot, lambda: not panel._charts_dirty)
        await pilot.pause()

    assert snap_compare(PanelApp(results=recorded_runs()), terminal_size=size, run_before=settle)


async def test_a_failed_run_with_no_figures_is_shown_not_crashed(tmp_path):
    from specmon.bench.run import BenchRun, RunSettings
    from specmon.testing.loopback_server import LoopbackConfig, LoopbackServer

    with LoopbackServer(LoopbackConfig(fail_status=500)) as server:
        bench = BenchRun(server.url, "broken", RunSettings(requests=6, max_new_tokens=8, warmup=0),
                         results_dir=str(tmp_path))
        bench.start()
        assert bench.wait(20)
    failed = bench.result
    assert failed.status == "failed"
    app = PanelApp(results=[*recorded_runs(), failed])
    async with app.run_test(size=(120, 30)) as pilot:
        panel = app.query_one(BenchPanel)
        panel.show_progress(BenchProgress(run_id=failed.run_id, preset="broken", phase="failed", done=5, total=6,
                                          failed=5, message="stopped after 5 failures in a row"))
        panel.show_results(bench_pane([*recorded_runs(), failed]))
        await pilot.pause()
        row = _rows(app)["broken"]
        assert row[2] == "–" and row[0] == "broken"
        assert row[-1].startswith("failed,") and "aborted" in row[-1]
        assert app.is_running


def _screen(app) -> str:
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


@pytest.mark.parametrize("width", [60, 80, 100, 200])
async def test_the_flags_column_shows_at_every_width(width):
    app = PanelApp(results=recorded_runs())
    async with app.run_test(size=(width, 30)) as pilot:
        assert await wait_for(pilot, lambda: any("preset" in ln and "tok/s" in ln for ln in _screen(app).splitlines()))
        text = _screen(app)
        header = next(line for line in text.splitlines() if "preset" in line and "tok/s" in line)
        assert header.rstrip().endswith("flags")
        for preset in ("baseline", "eagle3-5", "eagle3-10"):
            line = next(line for line in text.splitlines() if line.strip().startswith(preset))
            flags = _rows(app)[preset][-1]
            assert line.rstrip().endswith(flags), (line, flags)


async def test_a_cancelled_run_never_hides_or_spoils_an_earlier_completed_run():
    import copy

    runs = recorded_runs()
    cancelled = copy.deepcopy(runs[0])
    cancelled.run_id, cancelled.status = "cancelled-run", "cancelled"
    for request in cancelled.requests:
        request.ok, request.decode_tok_s = False, None
    app = PanelApp(results=runs)
    async with app.run_test(size=(140, 36)) as pilot:
        await pilot.pause()
        before = _rows(app)
        app.query_one(BenchPanel).show_results(bench_pane([*runs, cancelled]))
        await pilot.pause()
        assert _rows(app) == before  # the baseline row and every speedup unchanged
        assert "last run: baseline cancelled" in str(app.query_one("#bench-progress", Static).render())
        only_cancelled = copy.deepcopy(cancelled)
        only_cancelled.preset = "eagle3-16"
        app.query_one(BenchPanel).show_results(bench_pane([*runs, cancelled, only_cancelled]))
        await pilot.pause()
        assert _rows(app)["eagle3-16"][-1].startswith("cancelled")


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_no_legend_is_drawn_over_the_lines_each_preset_is_named_above_in_its_colour(size):
    """plotext draws its legend inside the plot, over the top-left of the lines (the recorded runs' first
    requests are their fastest, right where it goes): the legend is a line of its own above the plot."""
    app = PanelApp(results=recorded_runs())
    async with app.run_test(size=size) as pilot:
        panel = app.query_one(BenchPanel)
        assert await wait_for(pilot, lambda: not panel._charts_dirty)
        await pilot.pause()
        chart = app.query_one("#bench-tok-chart")
        plot = [strip.text for strip in chart.render_lines(chart.region.reset_offset)]
        for preset in ("baseline", "eagle3-5", "eagle3-10"):
            assert not any(preset in line for line in plot), (preset, plot)
        legend = app.query_one("#bench-tok-legend", Static).render()
        assert legend.plain.startswith("decode tok/s per request: ━ ")
        for preset in ("baseline", "eagle3-5", "eagle3-10"):
            assert preset in legend.plain
        assert len({span.style.foreground for span in legend.spans}) == 3, legend.spans
