"""A LiveSnapshot as rows of (label, value) text: one place for the Live view's and `--once`'s wording."""

from __future__ import annotations

from specmon.live.model import LiveSnapshot
from specmon.live.quantiles import Percentiles
from specmon.sglang.metric_names import PREFIX

SOURCE_TEXT = {"metrics": "/metrics", "prometheus": f"Prometheus (its {PREFIX}* samples)",
               "log": "log (Decode batch lines)", "none": "no data yet"}


def _num(value: float | None, fmt: str = ",.0f") -> str:
    return "—" if value is None else format(value, fmt)


def _of(value: float | None, total: float | None, fmt: str = ",.0f") -> str:
    if value is None:
        return "—"
    if not total:
        return _num(value, fmt)
    return f"{_num(value, fmt)} / {_num(total, fmt)} ({value / total:.0%})"


def percentiles_text(p: Percentiles) -> str:
    """"50 / 90 / 120 ms"; a quantile in the first or the +Inf bucket as its bound ("< 100 / 180 / > 8,000 ms");
    the one bucket every observation fell in: "< 100 ms", "100–250 ms"."""
    if p.within_ms is not None:
        low, high = p.within_ms
        return f"< {high:,.0f} ms" if low <= 0 else f"{low:,.0f}–{high:,.0f} ms"
    if not p.p50.known:
        return "—"
    return " / ".join(q.text("ms").removesuffix(" ms") for _, q in p.quantiles) + " ms"


def window_text(seconds: float) -> str:
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


ABSURD = "absurd (see alerts)"
"""What a figure that cannot be true shows instead of a value."""


def figure_rows(s: LiveSnapshot) -> list[tuple[str, str]]:
    """The main figures, label and value (ABSURD for a figure that cannot be true)."""
    accept = "—" if s.accept_length is None else f"{s.accept_length:.2f}"
    if s.accept_rate is not None:
        accept += f" (rate {s.accept_rate:.2f})"
    if s.baseline_accept:
        accept += f", bench {s.baseline_accept:.2f}"
    tok = _num(s.decode_tok_s, ",.1f")
    if s.own_tok_s:
        tok += f" (+{s.own_tok_s:,.1f} specmon bench)"
    rows = [
        ("Decode tok/s", tok, ("decode_tok_s",)),
        ("Running", _of(s.running, s.max_running), ("running",)),
        ("Queued", _num(s.queued), ("queued",)),
        ("KV tokens", _of(s.kv_used, s.kv_total), ("kv_used", "kv_total")),
        ("Accept len", accept, ("accept_length", "accept_rate")),
        ("Cache hit", "—" if s.cache_hit_rate is None else f"{s.cache_hit_rate:.0%}", ("cache_hit_rate",)),
    ]
    return [(label, ABSURD if any(f in s.absurd for f in fields) else value) for label, value, fields in rows]


def latency_rows(s: LiveSnapshot) -> list[tuple[str, str, str, str]]:
    """(window, TTFT, ITL, E2E) p50/p90/p99 per window; the snapshot's own window when no others."""
    if "latency" in s.absurd:
        return [("all", ABSURD, "", "")]
    if s.latencies:
        return [(window_text(lat.window_s), percentiles_text(lat.ttft), percentiles_text(lat.itl),
                 percentiles_text(lat.e2e)) for lat in s.latencies]
    return [(window_text(s.window_s), percentiles_text(s.ttft_ms), percentiles_text(s.itl_ms),
             percentiles_text(s.e2e_ms))]


def effective_text(s: LiveSnapshot) -> str:
    e = s.effective
    if not e:
        return "—"
    if not e.get("algorithm"):
        return "no speculation"
    parts = [str(e["algorithm"])]
    for key, short in (("num_steps", "steps"), ("eagle_topk", "topk"), ("num_draft_tokens", "draft")):
        if e.get(key) is not None:
            parts.append(f"{short} {e[key]}")
    return " ".join(parts)


def snapshot_lines(s: LiveSnapshot) -> list[str]:
    """Plain text for `monitor --once` without --json."""
    lines = [f"state {s.state}, source {SOURCE_TEXT.get(s.source, s.source)}, window {window_text(s.window_s)}"
             + (f", {s.restarts} restart(s)" if s.restarts else "")]
    lines += [f"{label:<13} {value}" for label, value in figure_rows(s)]
    lines.append(f"{'Speculation':<13} {effective_text(s)}")
    lines.append(f"{'Latency':<13} TTFT / ITL / E2E p50/p90/p99")
    for window, ttft, itl, e2e in latency_rows(s):
        lines.append(f"  {window:<11} {ttft}   {itl}   {e2e}")
    if s.startup_s:
        shown = ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in s.startup_s.items())
        lines.append(f"{'Startup':<13} SGLang's own timings: {shown}")
    if s.speculation_pays is not None:
        lines.append(s.speculation_pays.line())
    lines += [f"! {alert.severity}: {alert.text}" for alert in s.alerts]
    return lines
