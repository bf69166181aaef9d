"""TrendChart: a bar chart of recent readings on a fixed scale (0..100 %, 0..total memory, 0..power limit).

Textual's Sparkline scales each series between its own minimum and maximum, so a constant series (memory
held steady at 20 of 140 GiB) draws nothing and 99 vs 100 % looks like a cliff. Here the scale is fixed,
the newest reading is the rightmost column, and when there are more readings than columns, consecutive
readings are averaged into one column. The chart may be several lines tall.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from rich.text import Text
from textual.widget import Widget

BARS = " ▁▂▃▄▅▆▇█"
LEVELS = len(BARS) - 1
BLANK_STYLE = "not bold"


def columns(values: Sequence[float], width: int) -> list[float]:
    """At most `width` values: consecutive ones averaged into buckets once there are more than `width`."""
    n = len(values)
    if n <= width:
        return list(values)
    out = []
    for b in range(width):
        lo, hi = b * n // width, (b + 1) * n // width
        chunk = values[lo:hi]
        out.append(sum(chunk) / len(chunk))
    return out


def bar_lines(values: Sequence[float], top: float, width: int, height: int) -> list[str]:
    """The chart as `height` strings of `width` characters, top line first; values right-aligned."""
    cols = columns(values, width)
    eighths = []
    for value in cols:
        fraction = 0.0 if top <= 0 else min(1.0, max(0.0, value / top))
        level = round(fraction * LEVELS * height)
        if value > 0 and level == 0:
            level = 1  # something above zero never looks like nothing
        eighths.append(level)
    pad = width - len(eighths)
    lines = []
    for row in reversed(range(height)):
        base = row * LEVELS
        cells = (BARS[min(LEVELS, max(0, e - base))] for e in eighths)
        lines.append(" " * pad + "".join(cells))
    return lines


class TrendChart(Widget):
    """Recent readings of one quantity as bars from 0 to `top` (set with `show(values, top)`)."""

    DEFAULT_CSS = """
    TrendChart {
        height: 1;
        width: 1fr;
    }
    """

    def __init__(self, top: float = 100.0, *, classes: str | None = None) -> None:
        super().__init__(classes=classes)
        self.values: list[float] = []
        self.top = top
        self._drawn: list[str] | None = None  # the chart's lines at the last refresh (at that size)

    def show(self, values: Sequence[float], top: float | None = None) -> None:
        """Chart these values (oldest first) against 0..`top`."""
        values = list(values)
        top = float(top) if top is not None and top > 0 else self.top
        if values == self.values and top == self.top:
            return
        self.values, self.top = values, top
        width, height = self.size.width, self.size.height
        drawn = bar_lines(values, top, width, height) if width > 0 and height > 0 else None
        if drawn is None or drawn != self._drawn:  # an idle GPU's flat trend, once it fills the width, stays drawn
            self._drawn = drawn
            self.refresh()

    def render(self) -> Text:
        width, height = self.size.width, self.size.height
        if width <= 0 or height <= 0:
            return Text()
        text = Text(no_wrap=True)
        for number, line in enumerate(bar_lines(self.values, self.top, width, height)):
            if number:
                text.append("\n")
            # blank runs get their own (invisible) style so that SVG exports position the bars exactly
            for blank, run in itertools.groupby(line, key=lambda char: char == " "):
                text.append("".join(run), style=BLANK_STYLE if blank else None)
        return text
