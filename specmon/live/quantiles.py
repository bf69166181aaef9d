"""Percentiles from Prometheus histogram bucket deltas, as PromQL's histogram_quantile computes them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specmon.serving.prom import Buckets

QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


@dataclass(frozen=True)
class Percentiles:
    """p50/p90/p99 in milliseconds over a window (None: no observation in it); `count` observations.

    `within_ms` is the one bucket (lower, upper bound) every observation fell in: a histogram then says only
    that, and the percentiles are None (interpolating inside one bucket makes up figures that look measured).
    """

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    count: int = 0
    within_ms: tuple[float, float] | None = None

    def to_json(self) -> dict[str, float | list[float] | None]:
        out: dict[str, float | list[float] | None] = {
            "p50": _round(self.p50), "p90": _round(self.p90), "p99": _round(self.p99)}
        if self.within_ms is not None:
            out["within_ms"] = [_round(self.within_ms[0]), _round(self.within_ms[1])]
        return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def bucket_delta(before: Buckets | None, after: Buckets) -> Buckets | None:
    """`after - before` bucket by bucket; None when the bounds differ or a count went down (a restart)."""
    if before is None:
        return after
    if len(before) != len(after):
        return None
    out = []
    for (le_b, count_b), (le_a, count_a) in zip(before, after, strict=True):
        if le_b != le_a or count_a < count_b:
            return None
        out.append((le_a, count_a - count_b))
    return tuple(out)


def quantile(q: float, buckets: Buckets) -> float | None:
    """The q-quantile of cumulative buckets (linear within a bucket; the highest finite bound for +Inf)."""
    if not buckets:
        return None
    total = buckets[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound
            span = count - lower_count
            if span <= 0:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / span
        lower_bound, lower_count = bound, count
    return lower_bound


def one_bucket(buckets: Buckets) -> tuple[float, float] | None:
    """The (lower, upper) bounds of the one finite bucket holding every observation, or None."""
    total = buckets[-1][1]
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count > below:
            if count < total or math.isinf(bound):
                return None
            return lower, bound
        lower, below = bound, count
    return None


def percentiles_ms(buckets: Buckets | None) -> Percentiles:
    """p50/p90/p99 of a histogram of seconds, in milliseconds (only the bucket, when all fell in one)."""
    if not buckets or buckets[-1][1] <= 0:
        return Percentiles()
    within = one_bucket(buckets)
    if within is not None:
        return Percentiles(count=int(buckets[-1][1]), within_ms=(within[0] * 1000.0, within[1] * 1000.0))
    values = {name: quantile(q, buckets) for name, q in QUANTILES}
    ms = {name: (None if v is None else v * 1000.0) for name, v in values.items()}
    return Percentiles(**ms, count=int(buckets[-1][1]))
