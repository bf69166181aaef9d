"""Benchmark statistics on plain numbers: percentiles, bootstrap CIs, relative MAD, paired speedup, repetition."""

from __future__ import annotations

import functools
import math
import random
import statistics
import zlib
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

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
    n, mid = len(values), len(values) // 2
    pickers = _resample_pickers(seed, n, resamples)
    if statistic is statistics.median:  # statistics.median's own arithmetic, without its call on each sample
        stats = sorted(sorted(pick(values))[mid] for pick in pickers) if n % 2 else sorted(
            (ordered[mid - 1] + ordered[mid]) / 2 for ordered in (sorted(pick(values)) for pick in pickers))
    elif statistic is statistics.geometric_mean and all(v > 0 for v in values):
        logs = [math.log(v) for v in values]  # each sample's geometric mean from its logs, taken once
        stats = sorted(math.exp(math.fsum(pick(logs)) / n) for pick in pickers)
    else:
        stats = sorted(statistic(pick(values)) for pick in pickers)
    alpha = (1.0 - confidence) / 2.0
    return (percentile(stats, 100 * alpha), percentile(stats, 100 * (1 - alpha)))


MAX_KEPT_RESAMPLE_SIZE = 256
"""Resamples of up to this many values are kept for the next bootstrap of the same size and seed (a cell's
figures bootstrap several figures over the same requests); larger ones are drawn each time."""


def _resample_pickers(seed: int, n: int, resamples: int) -> Sequence[Callable[[Sequence[Any]], Sequence[Any]]]:
    """Each bootstrap resample of `n` values as an `itemgetter` of its indexes: the indexes
    `random.Random(seed).choices(values, k=n)` picks, resample after resample (so a CI is the same as drawn with
    `choices`), drawn once per size and seed."""
    if n > MAX_KEPT_RESAMPLE_SIZE:
        return _draw_pickers(seed, n, resamples)
    return _kept_pickers(seed, n, resamples)


def _draw_pickers(seed: int, n: int, resamples: int) -> tuple[Callable[[Sequence[Any]], Any], ...]:
    rand, floor, size = random.Random(seed).random, math.floor, n + 0.0  # `choices`' own arithmetic
    return tuple(itemgetter(*[floor(rand() * size) for _ in range(n)]) for _ in range(resamples))


_kept_pickers = functools.lru_cache(maxsize=4)(_draw_pickers)


def ci95(values: Sequence[Any], statistic: Callable[[Sequence[Any]], float] = statistics.median,
         seed: int = 0) -> list[float | None] | None:
    """The bootstrap 95% CI as ``[low, high]``, or None with fewer than ``MIN_CI_SAMPLES`` values (typed as a
    stored record's CI, whose bounds may be missing)."""
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


def relative_difference(a: float, b: float) -> float:
    """|a - b| relative to b."""
    return abs(a - b) / abs(b) if b else float("inf")
