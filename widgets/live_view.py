"""LiveView: what the server is doing now (throughput, load, acceptance, latency windows, speculation, alerts)
and one history line per run, labelled with its preset. Renders a LiveSnapshot it is given."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import Static

from specmon.live.model import LiveSnapshot, Series
from specmon.live.text import SOURCE_TEXT, effective_text, figure_rows, latency_rows

BARS = "▁▂▃▄▅▆▇█"
STATE_STYLE = {"serving": "bold green", "idle": "bold", "stalled": "bold red", "unreachable": "bold red",
               "exited": "bold red", "starting": "bold yellow", "waiting": "dim", "absurd": "bold red",
               "unreadable": "bold red"}
ALERT_STYLE = {"error": "bold red", "warning": "yellow", "info": "dim"}
MAX_SERIES_SHOWN = 3
PAYING_STYLE = {"pays": "green", "loses": "yellow", "no curve": "dim"}


def _paying_line(s: LiveSnapshot, width: int) -> str | None:
    """The measured curve at the running count, one line ("speculation: no measured curve for this configuration"
    where no stored grid sweep measured it); none for a server without speculation."""
    paying = s.speculation_pays
    return paying.line(width) if paying is not None else None


def spark(values: list[float | None], width: int) -> str:
    """Values as a line of block characters (scaled from 0 to the maximum); a gap for None."""
    values = values[-width:] if width > 0 else []
    present = [v for v in values if v is not None]
    top = max(present) if present else 0.0
    if top <= 0:
        return "".join(" " if v is None else BARS[0] for v in values)
    return "".join(" " if v is None else BARS[min(7, int(v / top * 7.999))] for v in values)


def history_lines(series: tuple[Series, ...], width: int) -> list[Text]:
    lines = []
    for s in series[-MAX_SERIES_SHOWN:]:
        values = [p.decode_tok_s for p in s.points]
        last = next((v for v in reversed(values) if v is not None), None)
        label = f"{s.label[:18]} · run {s.run + 1}"
        tail = "—" if last is None else f"{last:,.0f}"
        room = max(4, width - len(label) - len(tail) - 4)
        lines.append(Text.assemble((f"{label} ", "bold"), (spark(values, room), "cyan"), f" {tail}"))
    return lines


class LiveView(Widget):
    """The Live view: renders a ``LiveSnapshot``; skips updates that would not change what it shows.

    The figures and the history lines are two widgets: a history line grows by a point every 5 s, and repainting
    it alone costs a tenth of repainting the figures' tables."""

    DEFAULT_CSS = """
    LiveView {
        height: auto;
    }
    LiveView > Static {
        height: auto;
    }
    """

    _shown: object = None
    _shape: tuple = ()
    _history_shown: tuple = ()

    def compose(self) -> ComposeResult:
        yield Static(id="live-figures")
        yield Static(id="live-history")

    def show(self, snapshot: LiveSnapshot) -> None:
        width = max(40, self.size.width or 80)
        history = history_lines(snapshot.series, width)
        self._show_figures(snapshot, width)
        # The history as drawn: an idle server's flat line does not change once it fills the width.
        drawn = tuple(line.plain for line in history)
        if drawn != self._history_shown:
            layout = len(drawn) != len(self._history_shown)
            self._history_shown = drawn
            title = [Text("decode tok/s history (a point per 5 s, a line per run)", style="dim")] if history else []
            self.query_one("#live-history", Static).update(Group(*title, *history), layout=layout)

    def _show_figures(self, snapshot: LiveSnapshot, width: int) -> None:
        # What it shows, as text: not the snapshot, whose scrape times (window_from/to) move every scrape while the
        # figures of an idle server stay. Each render, and the screen update after it, costs ~4-10 ms.
        s = snapshot
        key = ((s.state, s.source, s.preset, s.restarts), tuple(figure_rows(s)), tuple(latency_rows(s)),
               effective_text(s), _paying_line(s, width), tuple((a.severity, a.text) for a in s.alerts), width)
        if key == self._shown:
            return
        self._shown = key
        parts = self._render_parts(snapshot, width)
        shape = (len(parts), len(snapshot.alerts), len(snapshot.latencies))
        figures = self.query_one("#live-figures", Static)
        figures.update(Group(*parts), layout=shape != self._shape)  # a layout only when its height can change
        self._shape = shape

    def _render_parts(self, s: LiveSnapshot, width: int) -> list:
        head = Text.assemble(
            (s.state, STATE_STYLE.get(s.state, "bold")),
            f" · {SOURCE_TEXT.get(s.source, s.source)}",
            f" · preset {s.preset}" if s.preset else "",
            f" · {s.restarts} restart(s)" if s.restarts else "",
        )
        figures = figure_rows(s)
        grid = Table.grid(padding=(0, 1))
        wide = width >= 100
        columns = 6 if wide else 4
        for i in range(columns):
            grid.add_column(style="bold" if i % 2 == 0 else None, no_wrap=i % 2 == 0)
        per_row = columns // 2
        for i in range(0, len(figures), per_row):
            row: list[str] = []
            for label, value in figures[i:i + per_row]:
                row += [label, value]
            grid.add_row(*row)
        grid.add_row("Speculation", effective_text(s), *([""] * (columns - 2)))
        latency = Table("window", "TTFT p50/p90/p99", "ITL", "E2E", box=None, padding=(0, 1), header_style="bold",
                        pad_edge=False)
        for cells in latency_rows(s):
            latency.add_row(*cells)
        parts: list = [head, grid]
        if (paying := _paying_line(s, width)) is not None:
            parts.append(Text(paying, style=PAYING_STYLE.get(s.speculation_pays.verdict, ""),  # type: ignore[union-attr]
                              overflow="ellipsis", no_wrap=True))
        parts.append(latency)
        for alert in s.alerts:
            parts.append(Text(f"! {alert.text}", style=ALERT_STYLE.get(alert.severity, ""), overflow="ellipsis",
                              no_wrap=True))
        return parts
