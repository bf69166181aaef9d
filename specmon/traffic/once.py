"""`specmon monitor --once`'s production traffic: the snapshot of `specmon.live` plus a `traffic` object (the last
DEFAULT_WINDOW_S of SGLang's request records, when they are local: `--traffic PATH`, or the flags of `--preset`'s
command line) and a line or two of text."""

from __future__ import annotations

import argparse
import time
from typing import Any

from specmon.traffic.categories import Categories
from specmon.traffic.cli import check_by, tau_text, with_tally
from specmon.traffic.locate import record_paths
from specmon.traffic.reader import PathRefused, ReadTally, read_records
from specmon.traffic.summary import TrafficSummary
from specmon.traffic.window import DEFAULT_WINDOW_S


def run_monitor_once(args: argparse.Namespace) -> int:
    """`monitor --once`: the live snapshot, with production traffic added."""
    from specmon.live.cli import run_once

    by = check_by(getattr(args, "by", None))
    paths = traffic_paths(args)
    categories = getattr(args, "prompt_categories", None)
    return run_once(args, addenda=[lambda: ("traffic", *traffic_once(paths, by, categories=categories))])


def traffic_paths(args: argparse.Namespace) -> list[str]:
    """The records named with --traffic, else where `--preset`'s server writes them, else where the server specmon
    launched at `--url` writes them (none known: [])."""
    if getattr(args, "traffic", None):
        return list(args.traffic)
    if getattr(args, "preset", None):
        from specmon.launch.presets import load_presets, require_preset

        preset = require_preset(load_presets(args.presets), args.preset)
        return record_paths(preset.argv(), getattr(args, "log", None))
    if getattr(args, "url", None):
        from specmon.traffic.locate import launched_at

        return launched_at(args.url)
    return []


def traffic_once(paths: list[str], by: str | None = None, window_s: float = DEFAULT_WINDOW_S,
                 now: float | None = None, categories: Categories | None = None,
                 ) -> tuple[dict[str, Any] | None, list[str]]:
    """The `traffic` object of the last `window_s` seconds and its text lines (classed by `categories` too, when
    given); (None, []) when no path is known."""
    if not paths:
        return None, []
    now = time.time() if now is None else now
    tally = ReadTally()
    summary = TrafficSummary(by=by, buckets=True, categorise=categories.of_record if categories else None)
    head = {"paths": paths, "window_s": window_s, "categories": categories.to_json() if categories else None}
    try:
        summary.feed(read_records(paths, tally, now - window_s, want_params=by is not None or categories is not None))
    except PathRefused as refused:
        return {**head, "error": str(refused)}, [f"traffic: {refused}"]
    result = {**head, **with_tally(summary.result(), tally)}
    return result, traffic_lines(result)


def traffic_lines(result: dict[str, Any]) -> list[str]:
    """One or two lines of text (80 columns) for the `traffic` object."""
    minutes = f"{result['window_s'] / 60:.0f} min"
    if not result["requests"]:
        skipped = result["skipped"]["count"]
        return [f"traffic, last {minutes}: no usable request record" + (f" ({skipped:,} skipped)" if skipped else "")]
    accept = result["accept_length"]
    lines = [f"traffic, last {minutes}: {result['requests']:,} requests, τ "
             f"{tau_text(accept['token_weighted'], accept['ci'])} token-weighted"]
    notes = []
    rows = [c for c in result["classes"] if c["accept_length"] is not None and c["share"]]
    if len(rows) > 1:
        low = min(rows, key=lambda c: c["accept_length"])
        notes.append(f"lowest {low['by'].replace('_tokens', '')} {low['value'][:20]} τ {low['accept_length']:.2f} "
                     f"({100 * low['share']:.0f}% of tokens)")
    counts = result["outlier_counts"]
    if result["outliers"]:
        first = result["outliers"][0]
        notes.append(f"{sum(counts.values()):,} outliers ({first['rid'][:16]}…)" if len(first["rid"]) > 16 else
                     f"{sum(counts.values()):,} outliers ({first['rid']})")
    if result["skipped"]["count"]:
        notes.append(f"{result['skipped']['count']:,} skipped")
    if notes:
        lines.append("  " + "; ".join(notes)[:78])
    return lines
