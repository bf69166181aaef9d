"""An idle app repaints nothing that did not change (issue 24: each screen update is ~4-10 ms at 200x50, and a
layout ~40 ms): the Live view's figures when only the scrape times moved, the GPU header of an unchanged reading,
and the capture bar, which shows no ETA, runs no once-a-second timer."""

from __future__ import annotations

import io
import re
from dataclasses import replace

from rich.console import Console
from textual.app import App, ComposeResult
from textual.widgets import Static

from specmon.gpu.model import GpuSnapshot
from specmon.live.model import LiveSnapshot
from specmon.widgets.capture_progress import CaptureBar, CaptureProgress
from specmon.widgets.gpu_pane import GpuPane
from specmon.widgets.live_view import LiveView


class _Host(App):
    def __init__(self, widget) -> None:
        super().__init__()
        self.widget = widget

    def compose(self) -> ComposeResult:
        yield self.widget


def _count_updates(static: Static, monkeypatch) -> list:
    updates: list = []
    real = static.update
    monkeypatch.setattr(static, "update", lambda *a, **k: updates.append(a) or real(*a, **k))
    return updates


async def test_the_live_figures_are_repainted_when_a_figure_changes_not_when_a_scrape_came(monkeypatch):
    app = _Host(LiveView())
    async with app.run_test(size=(200, 50)) as pilot:
        view = app.query_one(LiveView)
        figures = app.query_one("#live-figures", Static)
        updates = _count_updates(figures, monkeypatch)
        idle = LiveSnapshot(state="idle", source="metrics", decode_tok_s=0.0, running=0, max_running=48)
        for n in range(5):
            view.show(replace(idle, window_from=1000.0 + n, window_to=1060.0 + n))
            await pilot.pause()
        assert len(updates) == 1
        view.show(replace(idle, running=3, window_from=2000.0))
        await pilot.pause()
        assert len(updates) == 2
        console = Console(width=200, record=True, file=io.StringIO())
        console.print(updates[-1][0])
        assert re.search(r"Running +3 ", console.export_text()), console.export_text()


async def test_an_unchanged_gpu_reading_does_not_repaint_or_lay_out_the_header(monkeypatch):
    app = _Host(GpuPane())
    async with app.run_test(size=(200, 50)) as pilot:
        pane = app.query_one(GpuPane)
        header = app.query_one("#gpu-header", Static)
        updates = _count_updates(header, monkeypatch)
        for n in range(5):
            pane.show(replace(GpuSnapshot.unavailable("libnvidia-ml.so.1 not found"), taken_at=float(n)))
            await pilot.pause()
        assert len(updates) == 1
        pane.show(GpuSnapshot.unavailable("driver gone"))
        await pilot.pause()
        assert len(updates) == 2 and "driver gone" in str(header.render())


async def test_the_capture_bar_runs_no_timer_and_still_shows_progress():
    app = _Host(CaptureProgress())
    async with app.run_test(size=(80, 24)) as pilot:
        bar = app.query_one(CaptureBar)
        assert not list(bar._timers)  # Textual's ProgressBar ticks once a second for its ETA
        bar.update(total=8, progress=2)
        await pilot.pause()
        assert bar.percentage == 0.25
