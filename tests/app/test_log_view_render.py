"""LogView's plain lines (no kind, not a match, printable ASCII) are cut as text, one strip a line: each cell and
its style must be what Textual's Log renders for them, at any width and horizontal scroll."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import Log

from specmon.widgets.log_view import LogView

LINES = [
    "[2026-12-02 13:30:00 DP0 TP0] Decode batch, #running-req: 48, #full token: 1, gen throughput (token/s): 4211.07",
    "short",
    "   ",
    "tab\there",
    "ünïcode ✔ wide 漢字 line",
    "[2026-12-02 13:30:01] Load weight begin. avail mem=139.0 GB",
    "error: something went wrong",
]


class _LogApp(App):
    def compose(self) -> ComposeResult:
        yield LogView()


def _cells(strip) -> list[tuple[str, object]]:
    return [(char, segment.style) for segment in strip for char in segment.text]


async def test_plain_lines_render_cell_for_cell_as_logs_own_rendering():
    app = _LogApp()
    async with app.run_test(size=(60, 20)) as pilot:
        log = app.query_one(LogView)
        log.write_classified(LINES, [None, None, None, None, None, "phase", "error"])
        await pilot.pause()
        fast_lines = 0
        assert len(log.lines) == len(LINES)
        for y in range(len(LINES)):
            for scroll_x in (0, 3, 40, 200):
                for width in (1, 17, 60, 250):
                    fast_lines += log._plain_text(y) is not None
                    ours = log._render_line(y, scroll_x, width)
                    log._render_line_cache.clear()
                    textuals = Log._render_line(log, y, scroll_x, width)
                    assert ours.cell_length == textuals.cell_length == width
                    assert _cells(ours) == _cells(textuals), (y, scroll_x, width)
        assert fast_lines == 4 * 16  # the four plain ASCII lines (tabs expanded) took the fast way
