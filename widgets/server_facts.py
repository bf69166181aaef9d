"""ServerFacts: weights, KV cache and memory from the startup log, then the live server's state."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from specmon.units import format_seconds

MEMORY_AFTER = {
    "load_weights": "weights",
    "load_draft_weights": "draft weights",
    "kv_cache": "KV cache",
    "kv_cache_draft": "draft KV cache",
}
"""What a memory step comes after; the others (graph captures, max_total_num_tokens) come after both."""


def startup_rows(state) -> list[tuple[str, str]]:
    """Label/value rows summarising a ``StartupState``: weights, KV pools, memory, time to ready."""
    rows: list[tuple[str, str]] = []
    for weights in state.weights:
        parts = [weights.type or "?"]
        if weights.shards_total:
            parts.append(f"shards {weights.shards_done or 0}/{weights.shards_total}")
        if weights.mem_usage_gb is not None:
            parts.append(f"{weights.mem_usage_gb:.2f} GB")
        if weights.elapsed_s is not None:
            parts.append(format_seconds(weights.elapsed_s))
        rows.append((f"{weights.model} weights", " · ".join(parts)))
    for pool in state.kv_pools:
        parts = [f"{pool.tokens:,} tokens" if pool.tokens is not None else "? tokens"]
        if pool.k_size_gb is not None and pool.v_size_gb is not None:
            parts.append(f"K {pool.k_size_gb:.2f} + V {pool.v_size_gb:.2f} GB")
        rows.append((f"{pool.model} KV", " · ".join(parts)))
    return rows + _closing_rows(state, compact=False)


def _closing_rows(state, compact: bool) -> list[tuple[str, str]]:
    """Max tokens, the GPU memory left after the last step, and the time to ready (shortened when compact)."""
    rows = []
    if state.max_total_num_tokens is not None:
        rows.append(("max tokens", f"{state.max_total_num_tokens:,}"))
    if state.memory:
        last = state.memory[-1]
        after = MEMORY_AFTER.get(last.step, "KV cache and graphs")
        if compact:
            rows.append(("free", f"{last.avail_gb:.2f} GB after {COMPACT_AFTER.get(after, after)}"))
        else:
            rows.append(("free GPU mem", f"{last.avail_gb:.2f} GB after {after}"))
    if state.ready_after_s is not None:
        rows.append(("ready after", format_seconds(state.ready_after_s)))
    return rows


COMPACT_BELOW = 100
"""Narrower than this (80x24: 76 columns), the facts flow several to a line, in their short forms."""
COMPACT_LABELS = {"speculative": "spec", "accept length": "accept"}
COMPACT_AFTER = {"KV cache and graphs": "KV+graphs", "draft weights": "draft", "draft KV cache": "draft KV"}


def compact_startup_rows(state) -> list[tuple[str, str]]:
    """``startup_rows`` in short: the models' weights on one row, their KV pools on another, then max tokens,
    free memory and time to ready, so the memory summary fits next to the live rows at 80x24."""
    rows: list[tuple[str, str]] = []
    weights = []
    for w in state.weights:
        if w.mem_usage_gb is not None:
            weights.append(f"{w.mem_usage_gb:.2f} GB")
        elif w.shards_total:
            weights.append(f"shards {w.shards_done or 0}/{w.shards_total}")
        else:
            weights.append("?")
    if weights:
        rows.append(("weights", " + ".join(weights)))
    if state.kv_pools:
        tokens = " + ".join(f"{p.tokens:,}" if p.tokens is not None else "?" for p in state.kv_pools)
        value = f"{tokens} tok"
        sizes = [(p.k_size_gb or 0.0) + (p.v_size_gb or 0.0) for p in state.kv_pools if p.k_size_gb is not None]
        if sizes:
            value += f" · {sum(sizes):.2f} GB"
        rows.append(("KV", value))
    return rows + _closing_rows(state, compact=True)


def compact_live_row(label: str, value: str) -> tuple[str, str]:
    """A live row in short: "spec EAGLE3 steps 3 topk 1 draft 4", "accept 1.00"."""
    if label == "speculative":
        value = value.replace(" · ", " ").replace("draft tokens", "draft")
    elif label == "accept length":
        value = value.split(" (")[0]
    return COMPACT_LABELS.get(label, label), value


def flow(chunks: Sequence[Text], width: int, sep: str, breaks: str = " · ") -> list[Text]:
    """Pack ``chunks`` into lines of at most ``width`` cells, each into the first line with room (order kept
    within a line). A chunk wider than a line goes on lines of its own, broken where it says ``breaks`` (a note's
    figures after its words are not cut off); a piece wider than a line is cut with an ellipsis."""
    lines: list[Text] = []
    for chunk in chunks:
        if chunk.cell_len > width:
            lines.extend(_broken(chunk, width, breaks))
            continue
        for line in lines:
            if line.cell_len + len(sep) + chunk.cell_len <= width:
                line.append(sep)
                line.append_text(chunk)
                break
        else:
            lines.append(chunk.copy())
    for line in lines:
        line.truncate(width, overflow="ellipsis")
    return lines


def _broken(chunk: Text, width: int, breaks: str) -> list[Text]:
    """``chunk`` on as many lines as it needs, broken at the ``breaks`` that end a line (dropped there)."""
    pieces: list[Text] = []
    start = 0
    plain = chunk.plain
    while (at := plain.find(breaks, start)) >= 0:
        pieces.append(chunk[start:at])
        start = at + len(breaks)
    pieces.append(chunk[start:])
    lines: list[Text] = []
    for piece in pieces:
        if lines and lines[-1].cell_len + len(breaks) + piece.cell_len <= width:
            lines[-1].append(breaks)
            lines[-1].append_text(piece)
        else:
            lines.append(piece.copy())
    return lines


MAX_LINES = 5
"""The facts' most lines (their CSS max-height)."""


class ServerFacts(Static):
    """Two-column facts table: what the log said during startup, and what the live server reports."""

    DEFAULT_CSS = f"""
    ServerFacts {{
        height: auto;
        max-height: {MAX_LINES};
    }}
    """

    _shown: tuple | None = ("unset",)
    _compact: bool | None = None
    _given: tuple = ((), (), ())

    def show(
        self,
        rows: Sequence[tuple[str, str]],
        notes: Sequence[tuple[str, str]] = (),
        compact_rows: Sequence[tuple[str, str]] | None = None,
    ) -> None:
        """Render label/value rows; ``notes`` are (text, style) lines shown first. No-op when unchanged.

        Narrower than ``COMPACT_BELOW``, the notes and the facts flow several to a line, the facts in their short
        form: ``compact_rows`` where given (else ``rows``), each through ``compact_live_row``."""
        self._given = (tuple(rows), tuple(notes), tuple(compact_rows if compact_rows is not None else rows))
        self._render_facts()

    def on_resize(self) -> None:
        if (self.size.width < COMPACT_BELOW) != self._compact:
            self.call_after_refresh(self._render_facts)  # after this layout, so the new height is laid out

    def _render_facts(self) -> None:
        rows, notes, compact_rows = self._given
        width = self.size.width
        self._compact = compact = 0 < width < COMPACT_BELOW
        key = (rows, notes, compact_rows, width) if compact else (rows, notes)
        if key == self._shown:
            return
        self._shown = key
        self.display = bool(rows or notes)
        if compact:
            facts = [compact_live_row(label, value) for label, value in compact_rows]
            chunks = [Text.assemble((label, "bold"), " ", value) for label, value in facts]
            lines = [*flow([Text(text, style=style) for text, style in notes], width, " · "), *flow(chunks, width, "  ")]
            self._update_keeping_height(Group(*lines), ("compact", min(len(lines), MAX_LINES)))
            return
        table = Table.grid(padding=(0, 1))
        table.add_column(style="bold", no_wrap=True)
        table.add_column()
        for label, value in rows:
            table.add_row(label, value)
        if len(notes) + len(rows) >= MAX_LINES:  # as high as it may be, however the values wrap
            shape: tuple = ("rows", MAX_LINES)
        else:
            shape = ("rows", tuple(notes), tuple((label, len(value)) for label, value in rows), width)
        self._update_keeping_height(Group(*(Text(text, style=style) for text, style in notes), table), shape)

    _shape: tuple = ()

    def _update_keeping_height(self, renderable: Group, shape: tuple) -> None:
        """A layout of the screen (~40 ms at 200x50) only when the facts' height can change: a value that changes
        in place (the health check's latency, every few seconds) repaints these lines alone."""
        self.update(renderable, layout=shape != self._shape)
        self._shape = shape
