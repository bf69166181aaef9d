"""The Live view's "is speculation paying now?" line: one line within the view's width (the longest reading:
two measured neighbours; at 80 columns without the sweep's id, which `monitor --once` gives), nothing where no
sweep measured the configuration (`monitor --once` says that)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console
from textual.app import App, ComposeResult
from textual.widgets import Static

from specmon.live.model import LiveSnapshot
from specmon.live.paying import CurvePoint, MeasuredCurve, read_curve
from specmon.widgets.live_view import LiveView

CURVE = MeasuredCurve("20261203-100000-aaaa", 1_796_000_000.0,
                      (CurvePoint(1, 2.06, (2.01, 2.1)), CurvePoint(4, 1.12, (1.1, 1.14)),
                       CurvePoint(8, 0.93, (0.91, 0.95)), CurvePoint(16, 0.82, (0.8, 0.84))), crossover=8)
BETWEEN = "speculation 1.12× at 4, 0.93× at 8 (measured); 6 running"


class _Host(App):
    def compose(self) -> ComposeResult:
        yield LiveView()


async def _shown(snapshot: LiveSnapshot, width: int) -> str:
    app = _Host()
    async with app.run_test(size=(width, 24)) as pilot:
        app.query_one(LiveView).show(snapshot)
        await pilot.pause()
        console = Console(width=width, record=True, file=io.StringIO())
        console.print(app.query_one("#live-figures", Static).content)
        return console.export_text()


@pytest.mark.parametrize(("width", "tail"), [(80, " (sweep 2 h ago)"),
                                             (200, " (sweep 20261203-100000-aaaa, 2 h ago)")])
async def test_the_reading_is_one_line_within_the_width(width: int, tail: str) -> None:
    reading = read_curve(CURVE, 6, CURVE.measured_at + 7200)
    text = await _shown(LiveSnapshot(state="serving", source="metrics", running=6, speculation_pays=reading), width)
    lines = [line.rstrip() for line in text.splitlines() if line.startswith("speculation ")]
    assert lines == [BETWEEN + tail] and len(lines[0]) <= width


async def test_no_curve_says_so() -> None:
    text = await _shown(LiveSnapshot(state="serving", source="metrics", running=6,
                                     speculation_pays=read_curve(None, 6, 0.0)), 80)
    said = [line for line in text.splitlines() if "speculation: no measured curve for this configuration" in line]
    assert len(said) == 1 and "Speculation" in text


async def test_a_server_without_speculation_has_no_curve_line() -> None:
    text = await _shown(LiveSnapshot(state="serving", source="metrics", running=6), 80)
    assert "measured curve" not in text and "speculation " not in text
