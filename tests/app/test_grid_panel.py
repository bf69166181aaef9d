"""A grid sweep in the Benchmark pane: its model (specmon.view.grid_pane) from a sweep stored with the emulator's
known speedups (every clear cell a win or a loss on the right side, a line per configuration and the baseline's,
the recommendation, the weighting by the Live view's load), the pane switching to it when the newest run is the
grid's, and its picture at 80x24 and 200x50."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from specmon.bench.results import ResultStore
from specmon.live.model import SeriesPoint
from specmon.sweep.plan import SweepStore
from specmon.view.bench_pane import bench_pane
from specmon.view.grid_pane import GridPaneModel, grid_of_newest, grid_pane
from specmon.widgets.bench_panel import BenchPanel
from specmon.widgets.grid_panel import GridPanel
from tests.support.app_harness import wait_for
from tests.support.grid_sweeps import truth, write_grid_sweep

CONCURRENCY = [1, 2, 4, 8, 16]
CONFIGS = [(3, 1, 4), (1, 1, 2), (2, 2, 6), (5, 1, 6)]
CLEAR = 0.05


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("grid")
    write_grid_sweep(root, "20261203-100000-aaaa", CONFIGS, CONCURRENCY)
    return root


def _results(root: Path) -> list:
    return ResultStore(root / "results").load_all()


def _model(root: Path, observed=None) -> GridPaneModel:
    results = {r.run_id: r for r in _results(root)}
    plan = SweepStore(root / "sweeps").load("20261203-100000-aaaa")
    return grid_pane(plan, lambda run_id: results.get(run_id or ""), observed)


def test_the_model_is_the_emulator_s_truth(stored: Path) -> None:
    model = _model(stored)
    assert model.concurrency == tuple(CONCURRENCY)
    assert [line.label for line in model.lines] == ["no speculation", "s3 k1 d4", "s1 k1 d2", "s2 k2 d6", "s5 k1 d6"]
    assert all(len(line.points) == len(CONCURRENCY) for line in model.lines)
    for label, cells in model.rows:
        config = next(c for c in CONFIGS if f"s{c[0]} k{c[1]} d{c[2]}" == label)
        for c, cell in zip(CONCURRENCY, cells, strict=True):
            expected = truth(config, c)
            assert cell.text == f"{expected:.2f}×"
            if abs(expected - 1) > CLEAR:
                assert cell.verdict == ("win" if expected > 1 else "loss"), (label, c, expected)
    assert model.notes[0].startswith("at 1")
    assert not any("weighted" in note for note in model.notes)
    weighted = _model(stored, ([1, 1, 2, 2, 16], 3480.0, "the Live view"))
    assert "weighted by observed load over the last 58 min, from the Live view:" in weighted.notes


def test_the_pane_shows_the_grid_while_the_newest_run_is_the_grid_s(stored: Path, tmp_path: Path) -> None:
    results = _results(stored)
    store = SweepStore(stored / "sweeps")
    newest_is_grid = sorted(results, key=lambda r: r.run_id)
    model = grid_of_newest(newest_is_grid, store)
    assert model is not None and model.run_id == "20261203-100000-aaaa"
    other = ResultStore(tmp_path).load_all()  # no runs: nothing to show
    assert grid_of_newest(other, store) is None
    later = [*newest_is_grid, type(results[0])("20261204-000000-bench", "p", "http://127.0.0.1:1", 0.0)]
    assert grid_of_newest(later, store) is None  # a later `specmon bench`: the usual pane again
    assert grid_of_newest(newest_is_grid, SweepStore(tmp_path / "none")) is None


class GridApp(App):
    def __init__(self, model: GridPaneModel) -> None:
        super().__init__()
        self.model = model

    def compose(self) -> ComposeResult:
        yield BenchPanel(id="bench-panel")

    def on_mount(self) -> None:
        self.query_one(BenchPanel).show_results(bench_pane([], grid=self.model))


async def test_the_grid_replaces_the_preset_charts_and_colours_each_cell(stored: Path) -> None:
    app = GridApp(_model(stored))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        panel = app.query_one(BenchPanel)
        assert panel.has_class("-grid") and app.query_one(GridPanel).display
        assert not app.query_one("#bench-charts").display and not app.query_one("#bench-table").display
        table = app.query_one("#grid-table", DataTable)
        row = table.get_row("s2 k2 d6")
        assert [cell.style for cell in row[1:]] == ["bold green", "bold green", "bold red", "bold red", "bold red"]  # 1.08x at 2: its CI above 1
        panel.show_results(bench_pane([]))  # a model without a grid: the usual pane
        await pilot.pause()
        assert not panel.has_class("-grid") and app.query_one("#bench-charts").display


@pytest.mark.parametrize("width", [60, 100, 200])
async def test_the_legend_breaks_between_configurations_never_inside_one(tmp_path: Path, width: int) -> None:
    configs = [(3, 1, 4), (1, 1, 2), (3, 4, 8), (3, 4, 4), (1, 4, 4), (5, 4, 16)]
    write_grid_sweep(tmp_path, "20261203-100000-aaaa", configs, [1, 4, 8])
    model = _model(tmp_path)
    app = GridApp(model)
    async with app.run_test(size=(width, 50)) as pilot:
        assert await wait_for(pilot, lambda: app.query_one(GridPanel).model is not None)
        await pilot.pause()
        title = str(app.query_one("#grid-title").render())
        lines = title.splitlines()
        assert len(lines) <= 3 and (width != 200 or len(lines) == 1), lines
        for line in model.lines:
            assert sum(f"━ {line.label}" in text for text in lines) == 1, (line.label, lines)
        assert all(len(text) <= width for text in lines), lines


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
def test_snapshot(snap_compare, stored: Path, size) -> None:
    async def settle(pilot):
        await wait_for(pilot, lambda: pilot.app.query_one(GridPanel).model is not None)
        await pilot.pause()

    model = _model(stored, ([1, 1, 2, 2, 16], 3480.0, "the Live view"))
    assert snap_compare(GridApp(model), terminal_size=size, run_before=settle)


async def test_the_app_shows_the_grid_of_its_newest_run_weighted_by_the_live_view_s_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specmon.widgets.bench_panel import BenchPanel as Panel
    from tests.support.app_harness import ready_app, screen_text

    monkeypatch.setenv("SPECMON_STATE_DIR", str(tmp_path))
    write_grid_sweep(tmp_path, "20261203-100000-aaaa", CONFIGS, CONCURRENCY)
    results = sorted(ResultStore(tmp_path / "results").load_all(), key=lambda r: r.run_id)
    app = ready_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        with app.live.monitor.lock:  # an hour of the Live view's history: a point per 5 s, at 2 then at 16 running
            points = app.live.monitor.tracker.run.points
            points.clear()
            points += [SeriesPoint(1_796_000_000.0 + 5 * i, None, None, 2 if i < 600 else 16, 0, None)
                       for i in range(720)]
        app.main.show_bench_results(results)
        await pilot.press("3")
        assert await wait_for(pilot, lambda: app.main.query_one(GridPanel).model is not None, timeout=30)
        await pilot.pause()
        assert app.main.query_one(Panel).has_class("-grid")
        text = screen_text(app)
        assert "s2 k2 d6" in text and "c=16" in text
        assert "weighted by observed load over the last 60 min, from the Live view:" in text
        assert "running 2: 83%, 9–16: 17%" in text
