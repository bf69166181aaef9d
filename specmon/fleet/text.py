"""A FleetSnapshot as text: the fleet table's columns (in the order they are dropped from the right when the
screen is narrow) and their cells, shared by `fleet --once` and the fleet screen. No Textual here."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from specmon.fleet.model import FleetRow, FleetSnapshot
from specmon.fleet.promql import HISTORY_STEPS
from specmon.live.quantiles import Quantile
from specmon.text import aligned_rows, printable

MISSING = "—"
SPARK = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class TableColumn:
    """One column of the fleet table: header, width and how a row's cell reads."""

    key: str
    header: str
    width: int
    cell: Callable[[FleetRow], str]
    right: bool = False


def _num(value: float | None, spec: str) -> str:
    return MISSING if value is None else format(value, spec)


def _pct(value: float | None) -> str:
    return MISSING if value is None else f"{value * 100:.0f}%"


def sparkline(values: Sequence[float | None], width: int, span: int = HISTORY_STEPS) -> str:
    """`values` (the last `span` points: 15 minutes) in `width` block characters on a 0..max scale, each the
    mean of its share of the points (gaps as spaces); a short history fills the right-hand end."""
    values = list(values)[-span:]
    per = max(1.0, span / width)
    buckets: list[list[float]] = [[] for _ in range(width)]
    known_any = False
    for i, value in enumerate(reversed(values)):
        slot = width - 1 - int(i / per)
        if slot < 0:
            break
        if value is not None:
            buckets[slot].append(value)
            known_any = True
    if not known_any:
        return ""
    points = [sum(b) / len(b) if b else None for b in buckets]
    first = next(i for i, b in enumerate(buckets) if b)
    points = points[first:]
    known = [v for v in points if v is not None]
    if not known:
        return ""
    top = max(known) or 1.0
    return "".join(" " if v is None else SPARK[min(len(SPARK) - 1, int(v / top * (len(SPARK) - 1) + 0.5))]
                   for v in points)


def state_text(row: FleetRow) -> str:
    if row.state == "down" and row.last_seen_s is not None:
        return f"down {_short_ago(row.last_seen_s)}"
    return row.state


def _short_ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.0f}h"


def accept_text(row: FleetRow) -> str:
    if row.accept_length is None:
        return MISSING
    return f"{row.accept_length:.2f}" + ("g" if row.accept_source == "gauge" else "")


def latency_text(seconds: Quantile) -> str:
    """A latency quantile in a few cells by the Live view's rule: "85ms", "<100ms" (the first bucket's bound),
    ">400s" (the highest finite bound), in seconds from 10 s."""
    known = next((v for v in (seconds.value, seconds.below, seconds.above) if v is not None), None)
    if known is None:
        return MISSING
    text = seconds.scaled(1000.0).text("ms", ".0f") if known < 10 else seconds.text("s", ".0f")
    return text.replace(" ", "")


def spec_text(row: FleetRow) -> str:
    parts = [row.preset or MISSING, row.algorithm or MISSING, str(row.draft_tokens) if row.draft_tokens else MISSING]
    return " · ".join(parts)


def paying_text(row: FleetRow) -> str:
    """Speculation's measured speedup at the running count ("1.42×") where that count was measured, else the
    verdict of the measured neighbours ("pays", "loses", "?"); "—" with no curve or configuration known."""
    paying = row.speculation_pays
    if paying is None or paying.verdict == "no curve":
        return MISSING
    points = paying.measured
    if len(points) == 1 and points[0].concurrency == paying.running:
        return f"{points[0].speedup:.2f}×"
    return {"pays": "pays", "loses": "loses"}.get(paying.verdict, "?")


def alert_text(row: FleetRow) -> str:
    return row.alerts[0].kind if row.alerts else ""


COLUMNS: tuple[TableColumn, ...] = (
    TableColumn("server", "server", 20, lambda r: printable(r.server)),
    TableColumn("state", "state", 9, state_text),
    TableColumn("alert", "alert", 12, alert_text),
    TableColumn("tok_s", "tok/s", 7, lambda r: _num(r.decode_tok_s, ".0f"), right=True),
    TableColumn("history", "15 min tok/s", 12, lambda r: sparkline(r.history, 12)),
    TableColumn("accept", "accept", 6, accept_text, right=True),
    TableColumn("load", "run/q", 7, lambda r: MISSING if r.running is None else
                f"{r.running:.0f}/{_num(r.queued, '.0f')}", right=True),
    TableColumn("paying", "spec×", 5, paying_text, right=True),
    TableColumn("kv", "KV", 4, lambda r: _pct(r.kv_used_ratio), right=True),
    TableColumn("ttft", "TTFT99", 7, lambda r: latency_text(r.ttft_p99), right=True),
    TableColumn("gpu_mem", "GPU mem", 7, lambda r: _pct(r.gpu_memory_used_ratio), right=True),
    TableColumn("gpu_util", "GPU min", 7, lambda r: _pct(r.gpu_util_min_ratio), right=True),
    TableColumn("role", "role", 8, lambda r: printable(r.role or MISSING)),
    TableColumn("nodes", "nodes", 5, lambda r: f"{r.nodes_up}/{r.nodes_total}", right=True),
    TableColumn("host", "host", 14, lambda r: printable(r.host or MISSING)),
    TableColumn("spec", "preset · algorithm · draft", 28, lambda r: printable(spec_text(r))),
)
MESSAGE = TableColumn("message", "alerts", 24, lambda r: printable("; ".join(a.text for a in r.alerts)))
"""The alerts in words: after the fixed columns that fit, it takes the width left (at least its own)."""


def has_paying(snapshot: FleetSnapshot) -> bool:
    """Whether a row has a measured curve read (the `spec×` column is shown only then)."""
    return any(row.speculation_pays is not None for row in snapshot.rows)


def columns_for(width: int, gap: int = 1, paying: bool = False) -> tuple[TableColumn, ...]:
    """The columns that fit in `width` cells (`gap` cells between), dropped right to left (`spec×` only with
    ``paying``: a row's measured curve read). When all fit, the alerts in words replace the alert's kind and
    take the width left."""
    chosen: list[TableColumn] = []
    used = 0
    offered = [c for c in COLUMNS if paying or c.key != "paying"]
    for column in offered:
        need = column.width + (gap if chosen else 0)
        if chosen and used + need > width:
            break
        chosen.append(column)
        used += need
    if len(chosen) == len(offered):
        kept = [c for c in chosen if c.key != "alert"]
        left = width - sum(c.width for c in kept) - gap * len(kept)
        if left >= MESSAGE.width:
            return (*kept, replace(MESSAGE, width=left))
    return tuple(chosen)


def header_line(snapshot: FleetSnapshot, with_error: bool = True) -> str:
    """One line: counts first (they survive a narrow screen), the window and Prometheus, then what is wrong."""
    rows = snapshot.rows
    down = sum(1 for r in rows if r.state == "down")
    alerting = sum(1 for r in rows if r.worst <= 1)
    text = (f"{len(rows)} servers · {down} down · {alerting} alerting · window {snapshot.window_s:g} s · "
            f"{printable(snapshot.prometheus.split('://', 1)[-1])}")
    if with_error and snapshot.error:
        text += f" · {error_line(snapshot)}"
    elif snapshot.gpu_note:
        text += f" · {snapshot.gpu_note}"
    return text


def error_line(snapshot: FleetSnapshot) -> str:
    """Why Prometheus could not be read, in one line (and that the last snapshot is kept), without Prometheus'
    address: the header line says it."""
    error = snapshot.error or ""
    for url in (snapshot.prometheus, snapshot.prometheus.rstrip("/")):
        error = error.replace(f"Prometheus at {url} ", "Prometheus ")
    return ("last snapshot kept: " if snapshot.stale else "") + printable(error)


def snapshot_lines(snapshot: FleetSnapshot, width: int | None = None) -> list[str]:
    """The snapshot as a header line and a table (for `fleet --once` without --json): the columns that fit in
    `width` (a terminal's), or with `width` None (piped, to a file) every column and every cell whole, each
    column as wide as its longest cell, the alerts in words last."""
    paying = has_paying(snapshot)
    columns = ((*(c for c in COLUMNS if c.key != "alert" and (paying or c.key != "paying")), MESSAGE)
               if width is None else columns_for(width, paying=paying))
    table = [[c.header for c in columns], *([c.cell(row) for c in columns] for row in snapshot.rows)]
    widths = [c.width for c in columns]
    aligned = aligned_rows(table, right={i for i, c in enumerate(columns) if c.right}, gap=" ", min_widths=widths,
                           max_widths=widths if width is not None else ())
    return [header_line(snapshot), "", *aligned]
