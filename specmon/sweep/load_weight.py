"""A grid sweep's recommendation weighted by the load a server was observed at: the share of time its
running-request count spent in each load band (each band ends at an asked concurrency), and each configuration's
speedup weighted by those shares. A count is read at the next measured concurrency at or above it (where
speculation's speedup falls with load, the less flattering of its two neighbours), never at a figure between two;
one above the highest is read at the highest and said so. Pure: the counts are given (the Live view's history, Prometheus)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from specmon.sweep.grid import GridConfig

MIN_SAMPLES = 2


def _band_label(low: int | None, high: int) -> str:
    if low is None:
        return f"≤ {high}"
    return str(high) if high == low + 1 else f"{low + 1}–{high}"


def load_shares(counts: Sequence[float | None], concurrencies: Sequence[int]) -> list[dict[str, Any]]:
    """Per asked concurrency the share of the counts at or below it (and above the one before); the counts above
    the highest concurrency are their own band (`above: true`), read at the highest."""
    asked = sorted(set(concurrencies))
    known = [c for c in counts if c is not None and math.isfinite(c) and c >= 0]
    if not asked or not known:
        return []
    tally = dict.fromkeys(asked, 0)
    above = 0
    for count in known:
        band = next((c for c in asked if count <= c), None)
        if band is None:
            above += 1
        else:
            tally[band] += 1
    bands: list[dict[str, Any]] = [{"band": _band_label(asked[i - 1] if i else None, c), "read_at": c, "above": False,
              "share": tally[c] / len(known)} for i, c in enumerate(asked)]
    if above:
        bands.append({"band": f"> {asked[-1]}", "read_at": asked[-1], "above": True, "share": above / len(known)})
    return [band for band in bands if band["share"] > 0]


def weigh_by_load(report: dict[str, Any], counts: Sequence[float | None], span_s: float,
                  source: str) -> dict[str, Any] | None:
    """The grid report's `observed_load`: the shares, each configuration's weighted speedup (only those measured
    at every concurrency the load was read at), the winner ("no speculation", `steps: 0`, when none is above 1)
    and the sentence that says how; None without enough history."""
    known = [c for c in counts if c is not None and math.isfinite(c) and c >= 0]
    shares = load_shares(known, report.get("concurrency") or [])
    if len(known) < MIN_SAMPLES or not shares:
        return None
    speeds: dict[tuple[int, int, int], dict[int, float]] = {}
    for cell in report.get("cells") or []:
        if cell.get("speedup") is not None:
            key = (cell["steps"], cell["topk"], cell["draft_tokens"])
            speeds.setdefault(key, {})[cell["concurrency"]] = cell["speedup"]
    weighted = []
    for (steps, topk, draft), by_c in speeds.items():
        if all(band["read_at"] in by_c for band in shares):
            value = sum(band["share"] * by_c[band["read_at"]] for band in shares)
            weighted.append({"steps": steps, "topk": topk, "draft_tokens": draft, "weighted_speedup": value})
    weighted.sort(key=lambda item: -item["weighted_speedup"])
    best = weighted[0] if weighted and weighted[0]["weighted_speedup"] > 1 else None
    winner = ({k: best[k] for k in ("steps", "topk", "draft_tokens", "weighted_speedup")} if best
              else {"steps": 0, "topk": 1, "draft_tokens": 1, "weighted_speedup": 1.0})
    minutes = max(1, round(span_s / 60))
    return {"source": source, "span_s": round(span_s, 1), "samples": len(known), "bands": shares,
            "configurations": weighted, "winner": winner,
            "text": f"weighted by observed load over the last {minutes} min, from {source}"}


def format_observed_load(observed: dict[str, Any]) -> list[str]:
    """The weighting in two lines within 80 columns (three with counts above the measured range)."""
    shares = ", ".join(f"{band['band']}: {band['share']:.0%}" for band in observed["bands"])
    winner = observed["winner"]
    wins = GridConfig.from_json(winner).label() + (f" {winner['weighted_speedup']:.2f}×" if winner["steps"] else "")
    lines = [observed["text"] + ":", f"  running {shares} → {wins}"]
    if any(band["above"] for band in observed["bands"]):
        lines.append(f"  (above {observed['bands'][-1]['read_at']}: read at the highest measured)")
    return lines
