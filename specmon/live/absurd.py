"""A live snapshot's figures checked against what can be true, before anyone shows them.

Each figure from /metrics, the log or /server_info has a range: running requests at most the server's own
`max_running_requests` (per data-parallel rank), KV tokens used at most the KV cache, an acceptance length at
most the longest draft chain, rates between 0 and 1, latencies under a day. A figure outside it is taken out
of the snapshot (None) and named in `LiveSnapshot.absurd`, so the view shows it as absurd and alerts on it,
never as data.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from specmon.live.quantiles import Percentiles
from specmon.plausible import (
    MAX_DRAFT,
    MAX_LATENCY_MS,
    MAX_REQUESTS,
    MAX_TOK_S,
    MAX_TOKENS,
    Figures,
)
from specmon.sglang.metric_names import SPEC_NUM_DRAFT_TOKENS, SPEC_NUM_STEPS

KV_SLACK = 1.01
"""KV tokens used may pass the cache's size by rounding (a usage ratio times the size), not more."""
_LATENCY_FIELDS = ("ttft_ms", "itl_ms", "e2e_ms")


def drop_absurd(snap: dict[str, Any], effective: dict[str, Any], max_running: int | None) -> dict[str, str]:
    """Take every absurd figure out of `snap` and `effective` (set to None, or removed); returns
    {field: why} for those taken out."""
    absurd: dict[str, str] = {}

    def check(field: str, read) -> None:
        figures = Figures()
        value = read(figures)
        if figures.absurd:
            absurd[field] = str(figures.absurd[0])
            snap[field] = None
        elif field in snap:
            snap[field] = value

    per_dp = snap.get("per_dp_running") or {}
    if max_running is not None:
        ranks = max(1, len(per_dp))
        running_max, why = max_running * ranks, f"more than the server's max_running_requests {max_running:,}" + (
            f" × {ranks} DP ranks" if ranks > 1 else "")
    else:
        running_max, why = MAX_REQUESTS, ""
    kv_total_checked = Figures().count("kv_total", snap.get("kv_total"), maximum=MAX_TOKENS, minimum=1)

    if "decode_tok_s" in snap:
        check("decode_tok_s", lambda f: f.amount("decode tok/s", snap["decode_tok_s"], maximum=MAX_TOK_S))
    if "own_tok_s" in snap:
        check("own_tok_s", lambda f: f.amount("specmon's own tok/s", snap["own_tok_s"], maximum=MAX_TOK_S))
    check("running", lambda f: f.count("running requests", snap.get("running"), maximum=running_max, why_max=why))
    check("queued", lambda f: f.count("queued requests", snap.get("queued"), maximum=MAX_REQUESTS * 10))
    check("kv_total", lambda f: f.count("KV cache tokens", snap.get("kv_total"), maximum=MAX_TOKENS, minimum=1))
    kv_max = kv_total_checked * KV_SLACK if kv_total_checked else MAX_TOKENS
    kv_why = f"more than the KV cache's {kv_total_checked:,} tokens" if kv_total_checked else ""
    check("kv_used", lambda f: f.amount("KV tokens used", snap.get("kv_used"), maximum=kv_max, why_max=kv_why))
    steps, drafts = effective.get("num_steps"), effective.get("num_draft_tokens")
    longest = max((n for n in (drafts, steps and steps + 1) if isinstance(n, int)), default=MAX_DRAFT)
    check("accept_length", lambda f: f.amount(
        "acceptance length", snap.get("accept_length"), maximum=longest,
        why_max=f"more than the {longest} tokens a verify step can accept" if longest != MAX_DRAFT else ""))
    check("accept_rate", lambda f: f.amount("acceptance rate", snap.get("accept_rate"), maximum=1.0))
    check("cache_hit_rate", lambda f: f.amount("cache hit rate", snap.get("cache_hit_rate"), maximum=1.0))
    _check_latencies(snap, absurd)
    for rank, value in per_dp.items():
        figures = Figures()
        figures.count(f"running requests on DP rank {rank}", value, maximum=max_running or MAX_REQUESTS)
        if figures.absurd:  # one rank's count cannot be true: nor can their sum
            absurd["running"] = str(figures.absurd[0])
            snap["per_dp_running"], snap["running"] = {}, None
            break
    for key, name in (("metrics_num_steps", SPEC_NUM_STEPS), ("metrics_num_draft_tokens", SPEC_NUM_DRAFT_TOKENS)):
        figures = Figures()
        if key in effective and figures.count(name, effective[key],
                                              maximum=MAX_DRAFT) is None:
            absurd[key] = str(figures.absurd[0])
            del effective[key]
    return absurd


def _check_latencies(snap: dict[str, Any], absurd: dict[str, str]) -> None:
    """A percentile over a day (or not finite) empties its window's figures: the histogram cannot be true."""

    def sane(p: Percentiles, name: str) -> Percentiles:
        figures = Figures()
        for q_name, q in p.quantiles:
            for value in (q.value, q.below, q.above):
                figures.amount(f"{name} {q_name} (ms)", value, maximum=MAX_LATENCY_MS)
        if p.within_ms is not None:  # every observation in one bucket: its bound is all the histogram says
            figures.amount(f"{name} bucket bound (ms)", p.within_ms[1], maximum=MAX_LATENCY_MS)
        if figures.absurd:
            absurd.setdefault("latency", str(figures.absurd[0]))
            return Percentiles()
        return p

    for field in _LATENCY_FIELDS:
        if isinstance(snap.get(field), Percentiles):
            snap[field] = sane(snap[field], field.removesuffix("_ms").upper())
    latencies = snap.get("latencies")
    if latencies:
        snap["latencies"] = tuple(
            replace(lat, ttft=sane(lat.ttft, "TTFT"), itl=sane(lat.itl, "ITL"), e2e=sane(lat.e2e, "E2E"))
            for lat in latencies)
