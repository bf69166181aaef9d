"""ServerFacts: weights, KV cache and memory from the startup log, then the live server's state."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from specmon.tui.units import format_seconds

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
    if state.max_total_num_tokens is not None:
        rows.append(("max tokens", f"{state.max_total_num_tokens:,}"))
    if state.memory:
        last = state.memory[-1]
        after = MEMORY_AFTER.get(last.step, "KV cache and graphs")
        rows.append(("free GPU mem", f"{last.avail_gb:.2f} GB after {after}"))
    if state.ready_after_s is not None:
        rows.append(("ready after", format_seconds(state.ready_after_s)))
    return rows


class ServerFacts(Static):
    """Two-column facts table: what the log said during startup, and what the live server reports."""

    DEFAULT_CSS = """
    ServerFacts {
        height: auto;
        max-height: 5;
    }
    """

    _shown: tuple | None = ("unset",)

    def show(self, rows: Sequence[tuple[str, str]], notes: Sequence[tuple[str, str]] = ()) -> None:
        """Render label/value rows; ``notes`` are (text, style) lines shown first. No-op when unchanged."""
        key = (tuple(rows), tuple(notes))
        if key == self._shown:
            return
        self._shown = key
        self.display = bool(rows or notes)
        table = Table.grid(padding=(0, 1))
        table.add_column(style="bold", no_wrap=True)
        table.add_column()
        for label, value in rows:
            table.add_row(label, value)
        self.update(Group(*(Text(text, style=style) for text, style in notes), table))
