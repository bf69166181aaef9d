"""Benchmark statistics: percentiles, bootstrap CIs, relative MAD, paired speedup, run summaries."""

from __future__ import annotations

import random
import statistics
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from specmon.tui.bench.model import RequestResult

UNSTABLE_REL_MAD = 0.10
CROSS_CHECK_TOLERANCE = 0.05
BOOTSTRAP_RESAMPLES = 2000
REPETITION_MIN_CHARS = 200
REPETITION_MAX_COMPRESSION = 0.2
MIN_CI_SAMPLES = 5
"""Fewer samples than this get no confidence interval: a bootstrap of 2–4 values only looks precise."""


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if len(values) == 1:
        return float(values[0])
    if q <= 0:
        return float(min(values))
    if q >= 100:
        return float(max(values))
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    whole = int(q)
    if whole == q:
        return cuts[whole - 1]
    lo = cuts[whole - 1] if whole > 0 else float(min(values))
    hi = cuts[whole] if whole < 99 else float(max(values))
    return lo + (hi - lo) * (q - whole)


def relative_mad(values: Sequence[float]) -> float:
    """Median absolute deviation divided by the median (0 for fewer than two values)."""
    if len(values) < 2:
        return 0.0
    med = statistics.median(values)
    if med == 0:
        return 0.0
    return statistics.median(abs(v - med) for v in values) / abs(med)


def bootstrap_ci(
    values: Sequence[float],
    statistic: Callable[[Sequence[float]], float] = statistics.median,
    confidence: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """A percentile bootstrap confidence interval of `statistic` (the median by default), seeded."""
    if not values:
        raise ValueError("bootstrap of no values")
    if len(values) == 1:
        only = float(statistic(values))
        return (only, only)
    rng = random.Random(seed)
    n = len(values)
    stats = sorted(statistic(rng.choices(values, k=n)) for _ in range(resamples))
    alpha = (1.0 - confidence) / 2.0
    return (percentile(stats, 100 * alpha), percentile(stats, 100 * (1 - alpha)))


def ci95(values: Sequence[Any], statistic: Callable[[Sequence[Any]], float] = statistics.median,
         seed: int = 0) -> list[float] | None:
    """The bootstrap 95% CI as ``[low, high]``, or None with fewer than ``MIN_CI_SAMPLES`` values."""
    if len(values) < MIN_CI_SAMPLES:
        return None
    return list(bootstrap_ci(values, statistic, seed=seed))


def paired_speedup(pairs: Sequence[tuple[float, float]], seed: int = 0) -> dict[str, Any] | None:
    """Speedup of a preset over the baseline from (preset, baseline) tok/s pairs of the same prompts.

    Reports the geometric mean of the per-prompt ratios with its bootstrap 95% CI, their median, and the
    ratio of the two medians.
    """
    good = [(a, b) for a, b in pairs if a and b and a > 0 and b > 0]
    if not good:
        return None
    ratios = [a / b for a, b in good]
    return {
        "geomean": statistics.geometric_mean(ratios),
        "median": statistics.median(ratios),
        "ci95": ci95(ratios, statistics.geometric_mean, seed=seed),
        "ratio_of_medians": statistics.median(a for a, _ in good) / statistics.median(b for _, b in good),
        "pairs": len(good),
    }


def is_degenerate(text: str) -> bool:
    """True when a long output is mostly repetition (it compresses to a small fraction of its size)."""
    data = text.encode("utf-8", "replace")
    if len(data) < REPETITION_MIN_CHARS:
        return False
    return len(zlib.compress(data, 6)) / len(data) < REPETITION_MAX_COMPRESSION


def _token_weighted(pairs: Sequence[tuple[int, int]]) -> float:
    steps = sum(s for _, s in pairs)
    return sum(t for t, _ in pairs) / steps if steps else 0.0


def _accept_profile(requests: Sequence[RequestResult]) -> list[float] | None:
    """The share of verify steps that accepted at least i drafts (i = 1, 2, ...), from the server's per-request
    histograms; None when the server gives none."""
    from specmon.tui.bench.predict import position_profile

    histograms = [r.accept_histogram for r in requests if r.accept_histogram]
    profile = position_profile(histograms)
    return [round(share, 4) for share in profile] if profile else None


def _spread(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"median": statistics.median(values), "p90": percentile(values, 90)}


def _error_key(error: str) -> str:
    return error.split(":", 1)[0] if len(error) > 80 else error


def summarize(
    requests: Sequence[RequestResult], max_new_tokens: int | None = None, ignore_eos: bool = True
) -> dict[str, Any]:
    """The run summary of the measured (non-warmup) requests, in the `specmon bench --json` shape."""
    measured = [r for r in requests if not r.warmup]
    ok = [r for r in measured if r.ok]
    failed = [r for r in measured if not r.ok]
    tps = [r.decode_tok_s for r in ok if r.decode_tok_s]
    flags: list[str] = []
    details: dict[str, str] = {}

    decode: dict[str, Any] | None = None
    if tps:
        rel_mad = relative_mad(tps)
        decode = {
            "median": statistics.median(tps),
            "p10": percentile(tps, 10),
            "p90": percentile(tps, 90),
            "mean": statistics.fmean(tps),
            "ci95": ci95(tps),
            "rel_mad": rel_mad,
            "n": len(tps),
        }
        if rel_mad > UNSTABLE_REL_MAD:
            flags.append("unstable")
            details["unstable"] = f"relative MAD of decode tok/s is {rel_mad:.0%} (> {UNSTABLE_REL_MAD:.0%})"

    with_spec = [r for r in ok if r.spec_verify_ct]
    accept: dict[str, Any] = {"token_weighted": None, "median": None}
    if with_spec:
        tokens = sum(r.completion_tokens for r in with_spec)
        steps = sum(r.spec_verify_ct or 0 for r in with_spec)
        pairs = [(r.completion_tokens, r.spec_verify_ct or 0) for r in with_spec]
        accept = {
            "token_weighted": tokens / steps,
            "ci95": ci95(pairs, _token_weighted),
            "median": statistics.median(r.completion_tokens / (r.spec_verify_ct or 1) for r in with_spec),
            "completion_tokens": tokens,
            "spec_verify_ct": steps,
            "profile": _accept_profile(with_spec),
        }

    itl = [x for r in ok for x in r.itl_ms()]
    gaps = [g for r in ok for g in r.chunk_gaps_ms]
    chunk_tokens = [n for r in ok for n in r.chunk_tokens]

    degenerate = [r.index for r in ok if "repetition" in r.flags]
    if degenerate:
        flags.append("repetition")
        details["repetition"] = f"degenerate repetition in {len(degenerate)} output(s): requests {degenerate[:8]}"
    if ignore_eos and max_new_tokens:
        short = [r.index for r in ok if r.completion_tokens != max_new_tokens]
        if short:
            flags.append("length")
            details["length"] = (
                f"{len(short)} output(s) are not {max_new_tokens} tokens although ignore_eos is set"
            )
    if failed:
        flags.append("failed")
        details["failed"] = f"{len(failed)} of {len(measured)} measured requests failed"

    return {
        "decode_tok_s": decode,
        "accept_length": accept,
        "ttft_s": _spread([r.ttft_s for r in ok if r.ttft_s is not None]),
        "itl_ms": _spread(itl),
        "chunk_gap_ms": _spread(gaps),
        "tokens_per_chunk": statistics.fmean(chunk_tokens) if chunk_tokens else None,
        "e2e_s": _spread([r.e2e_s for r in ok if r.e2e_s is not None]),
        "requests_ok": len(ok),
        "requests_failed": len(failed),
        "errors": dict(Counter(_error_key(r.error or "error") for r in failed)),
        "flags": flags,
        "flag_details": details,
    }


def relative_difference(a: float, b: float) -> float:
    """|a - b| relative to b."""
    return abs(a - b) / abs(b) if b else float("inf")
