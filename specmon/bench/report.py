"""A run's headline figures as flat values, shared by `specmon bench`, `specmon results` and the panel."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from specmon.acceptance import MIN_USEFUL_ACCEPT_LENGTH
from specmon.bench.compare import Comparison, is_speculative
from specmon.bench.model import BenchProgress, BenchResult, Summary
from specmon.text import printable

ACCEPT_NEAR_ONE = "accept-near-1"
SLOWER_THAN_BASELINE = "slower-than-baseline"

FIGURE_COLUMNS = (
    "run_id", "preset", "url", "status", "started", "requests_ok", "requests_failed",
    "decode_tok_s_median", "decode_tok_s_ci95_low", "decode_tok_s_ci95_high", "decode_tok_s_p10",
    "decode_tok_s_p90", "accept_length", "accept_length_median", "accept_length_bound",
    "ttft_ms_median", "ttft_ms_p90", "itl_ms_median", "itl_ms_p90",
    "speedup", "speedup_ci95_low", "speedup_ci95_high", "speedup_baseline_run_id", "flags",
)  # fmt: skip


def finished_accept_length(result: BenchResult) -> float | None:
    """A run's token-weighted acceptance length, only once it finished: never from a run still going (its store
    file read back mid-run), cancelled, failed or cut short."""
    if result.status != "finished":
        return None
    accept = result.summary.accept_length.token_weighted
    return float(accept) if accept is not None and accept > 0 else None


def last_finished_accept(runs: Iterable[BenchResult], preset: str | None) -> float | None:
    """The acceptance length of `preset`'s last finished run among `runs` (oldest first), else None."""
    found = None
    for run in runs:
        if preset and run.preset == preset:
            found = finished_accept_length(run) or found
    return found


def accept_bound(result: BenchResult) -> int | None:
    """The most tokens one verify step can emit: num_steps + 1 (None without speculation)."""
    spec = result.server.speculative
    return spec.num_steps + 1 if spec.algorithm and spec.num_steps is not None else None


def symptoms(result: BenchResult, comparison: Comparison | None = None) -> dict[str, str]:
    """The symptoms specmon exists for, flag → what it means: a speculative server accepting about one token
    per step (the draft does nothing: the wrong draft, or its weights did not load), speculation slower
    than its baseline run (beyond the speedup's CI; a baseline of the same server and settings), and outputs
    that diverge from the baseline's in a way that points at a broken draft (`Comparison.alarm`)."""
    out: dict[str, str] = {}
    if comparison is not None and comparison.alarm:
        out["diverged"] = comparison.alarm
    if not is_speculative(result):
        return out
    algorithm = result.server.speculative.algorithm
    accept = result.summary.accept_length.token_weighted
    if accept is not None and accept < MIN_USEFUL_ACCEPT_LENGTH:
        out[ACCEPT_NEAR_ONE] = (f"acceptance {accept:.2f} with {algorithm} on: about one token per verify step, "
                                "the draft is doing nothing (the wrong draft, or its weights did not load)")
    if comparison is not None and comparison.run_id != comparison.baseline_run_id:
        speedup = comparison.speedup or {}
        geomean, ci = speedup.get("geomean"), speedup.get("ci95")
        if (isinstance(geomean, int | float) and geomean < 1 and (not ci or ci[1] < 1) and not comparison.unlike
                and comparison.same_server):
            out[SLOWER_THAN_BASELINE] = (f"{geomean:.2f}× the baseline run {comparison.baseline_run_id}: "
                                         "speculation costs more than it gains here")
    return out


def run_flags(result: BenchResult, comparison: Comparison | None = None) -> list[str]:
    flags = list(result.summary.flags)
    flags += [f for f in symptoms(result, comparison) if f not in flags]
    if comparison is not None:
        flags += [f for f in comparison.flags if f not in flags]
    if result.status != "finished" and result.status not in flags:
        flags.insert(0, result.status)
    return flags


def run_figures(result: BenchResult, comparison: Comparison | None = None) -> dict[str, Any]:
    """The flat figures of one run (None where not measured), in FIGURE_COLUMNS order."""
    summary = result.summary
    decode, accept, ttft, itl = summary.decode_tok_s, summary.accept_length, summary.ttft_s, summary.itl_ms
    ci = (decode.ci95 if decode is not None else None) or [None, None]
    speedup: dict[str, Any] = {}
    if comparison is not None and comparison.speedup and comparison.run_id != comparison.baseline_run_id:
        speedup = comparison.speedup

    def ms(value: float | None) -> float | None:
        return None if value is None else value * 1000.0

    return {
        "run_id": result.run_id,
        "preset": result.preset,
        "url": result.url,
        "status": result.status,
        "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(result.started_at)),
        "requests_ok": summary.requests_ok,
        "requests_failed": summary.requests_failed,
        "decode_tok_s_median": decode.median if decode is not None else None,
        "decode_tok_s_ci95_low": ci[0],
        "decode_tok_s_ci95_high": ci[1],
        "decode_tok_s_p10": decode.p10 if decode is not None else None,
        "decode_tok_s_p90": decode.p90 if decode is not None else None,
        "accept_length": accept.token_weighted,
        "accept_length_median": accept.median,
        "accept_length_bound": accept_bound(result),
        "ttft_ms_median": ms(ttft.median) if ttft is not None else None,
        "ttft_ms_p90": ms(ttft.p90) if ttft is not None else None,
        "itl_ms_median": itl.median if itl is not None else None,
        "itl_ms_p90": itl.p90 if itl is not None else None,
        "speedup": speedup.get("geomean"),
        "speedup_ci95_low": (speedup.get("ci95") or [None])[0],
        "speedup_ci95_high": (speedup.get("ci95") or [None, None])[1],
        "speedup_baseline_run_id": comparison.baseline_run_id if speedup and comparison is not None else None,
        "flags": run_flags(result, comparison),
    }


def describe_progress(progress: BenchProgress) -> str:
    """One progress line: ``eagle3: measuring 12/40 · 1 failed · median 142.3 tok/s · τ 3.12``."""
    if progress.phase == "warmup":
        step = f"warmup {progress.warmup_done}/{progress.warmup_total}"
    else:
        step = f"{progress.phase} {progress.done}/{progress.total}"
    parts = [f"{progress.preset}: {step}"]
    if progress.failed:
        parts.append(f"{progress.failed} failed")
    if progress.median_tok_s is not None:
        parts.append(f"median {progress.median_tok_s:.1f} tok/s")
    if progress.accept_length is not None:
        parts.append(f"τ {progress.accept_length:.2f}")
    if progress.message:
        parts.append(progress.message)
    return " · ".join(parts)


def category_lines(summary: Summary) -> list[str]:
    """τ per prompt category, one line each (none without speculation, or with one category only)."""
    rows = [c for c in summary.by_category or () if c.token_weighted is not None]
    if len(rows) < 2:
        return []
    lines = ["τ by prompt category (95% CI):"]
    for row in rows:
        ci = f"[{row.ci95[0]:.2f}, {row.ci95[1]:.2f}]" if row.ci95 and None not in row.ci95 else "(n<5: no CI)"
        lines.append(f"  {printable(row.category)[:24]:<24} {row.requests:>5} req  τ {row.token_weighted:.2f} {ci}")
    return lines


def detail_lines(result: BenchResult) -> list[str]:
    """What `results` says of a run below the table: its τ per category and its check against production."""
    lines = category_lines(result.summary)
    if result.summary.production:
        lines.append(result.summary.production.text)
    return [f"run {result.run_id}: {lines[0]}", *lines[1:]] if lines else []


UNREPRESENTATIVE = "unrepresentative"
"""The flag of a run whose τ is beyond the CIs of production's (specmon.traffic.production)."""


def production_gap(result: BenchResult) -> str | None:
    """The run's verdict against production when its τ is beyond the CIs of production's (flagged
    "unrepresentative"), else None: what a recommendation built on this run must say."""
    check = result.summary.production
    return check.text if check and check.beyond_ci else None
