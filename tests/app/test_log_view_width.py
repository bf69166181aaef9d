"""The log pane's width (its horizontal scroll extent) is the widest line's cells, measured at once for ASCII
lines (Log measures every line on a worker thread: 3 % of a core at 10,000 lines a second)."""

from __future__ import annotations

import asyncio

from rich.cells import cell_len
from textual.app import App, ComposeResult

from specmon.widgets.log_view import LogView


class _OneLog(App):
    def compose(self) -> ComposeResult:
        yield LogView(id="log")


async def _width_after(batches: list[list[str]]) -> tuple[int, int]:
    app = _OneLog()
    async with app.run_test(size=(80, 24)) as pilot:
        log = app.query_one(LogView)
        workers_before = len(app.workers)
        for lines in batches:
            log.write_classified(lines, [None] * len(lines))
        started = len(app.workers) - workers_before
        for _ in range(100):
            if log.virtual_size.width == max(cell_len(line) for batch in batches for line in batch):
                break
            await pilot.pause(0.02)
        return log.virtual_size.width, started


def test_ascii_lines_are_measured_without_a_worker():
    lines = ["short", "x" * 300, "a line of middling length"]
    width, workers = asyncio.run(_width_after([lines, ["y" * 120]]))
    assert width == 300 and workers == 0


def test_wide_and_tabbed_lines_are_measured_in_cells():
    lines = ["日本語のログ行" * 10, "tab\there", "ascii"]
    width, _ = asyncio.run(_width_after([lines]))
    assert width == max(cell_len(LogView._process_line(line)) for line in lines)
