"""Percentiles from Prometheus histogram bucket counts, as PromQL's histogram_quantile computes them, with one
rule for what a histogram cannot say (the Live view, `monitor --once` and the fleet all read quantiles here).

A quantile that falls in the first bucket is only known to be below that bucket's bound, and one that falls in
the +Inf bucket only to be above the highest finite bound: interpolating there makes up a figure that looks
measured (SGLang's first TTFT bucket is 0–100 ms, so every fast server's p99 would read 99 ms)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specmon.serving.prom import Buckets

QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


@dataclass(frozen=True)
class Quantile:
    """One quantile as far as the buckets say: `value`, interpolated inside a bucket with two finite bounds, or
    only a bound: `below` (it fell in the first bucket: at most that bucket's bound) or `above` (it fell in the
    +Inf bucket: over the highest finite bound). All None: no observation."""

    value: float | None = None
    below: float | None = None
    above: float | None = None

    @classmethod
    def of_interpolated(cls, value: float, first_bound: float | None, last_bound: float | None) -> Quantile:
        """The same rule for a quantile PromQL's histogram_quantile already interpolated, given the histogram's
        first and highest finite bounds: at most the first bound, it fell in the first bucket (only below that
        bound); the highest bound itself is histogram_quantile's answer for the +Inf bucket (only above it).
        NaN (no observation) is unknown. (A quantile exactly at the highest bound reads as above it: PromQL gives
        the same answer for both.)"""
        if math.isnan(value):
            return cls()
        if first_bound is not None and value <= first_bound:
            return cls(below=first_bound)
        if last_bound is not None and value >= last_bound:
            return cls(above=last_bound)
        return cls(value=value)

    @property
    def known(self) -> bool:
        return self.value is not None or self.below is not None or self.above is not None

    def scaled(self, factor: float) -> Quantile:
        return Quantile(*(None if v is None else v * factor for v in (self.value, self.below, self.above)))

    def text(self, unit: str, spec: str = ",.0f", missing: str = "—") -> str:
        """"123 ms", "< 100 ms", "> 400 s" (`missing` when unknown)."""
        if self.below is not None:
            return f"< {format(self.below, spec)} {unit}"
        if self.above is not None:
            return f"> {format(self.above, spec)} {unit}"
        return missing if self.value is None else f"{format(self.value, spec)} {unit}"

    def to_json(self, name: str, digits: int = 2) -> dict[str, float | None]:
        """`{name: value}`, plus `{name}_below` or `{name}_above` when only a bound is known (value null)."""
        out: dict[str, float | None] = {name: _round(self.value, digits)}
        if self.below is not None:
            out[f"{name}_below"] = _round(self.below, digits)
        if self.above is not None:
            out[f"{name}_above"] = _round(self.above, digits)
        return out


@dataclass(frozen=True)
class Percentiles:
    """p50/p90/p99 in milliseconds over a window (each a Quantile: a value or a bound); `count` observations.

    `within_ms` is the one bucket (lower, upper bound) every observation fell in: a histogram then says only
    that, and no quantile has a value (interpolating inside one bucket makes up figures that look measured).
    """

    p50: Quantile = Quantile()
    p90: Quantile = Quantile()
    p99: Quantile = Quantile()
    count: int = 0
    within_ms: tuple[float, float] | None = None

    @property
    def quantiles(self) -> tuple[tuple[str, Quantile], ...]:
        return (("p50", self.p50), ("p90", self.p90), ("p99", self.p99))

    def to_json(self) -> dict[str, float | list[float] | None]:
        out: dict[str, float | list[float] | None] = {}
        for name, q in self.quantiles:
            out.update(q.to_json(name) if self.within_ms is None else {name: None})
        if self.within_ms is not None:
            out["within_ms"] = [round(self.within_ms[0], 2), round(self.within_ms[1], 2)]
        return out


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


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


def estimate(q: float, buckets: Buckets) -> Quantile:
    """The q-quantile of cumulative buckets (sorted by bound, the last +Inf): PromQL's histogram_quantile inside
    a bucket with two finite bounds, only the bound in the first bucket or the +Inf one."""
    if not buckets or not buckets[-1][1] > 0 or not math.isinf(buckets[-1][0]):
        return Quantile()
    total = buckets[-1][1]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for i, (bound, count) in enumerate(buckets):
        if count >= rank:
            if math.isinf(bound):
                return Quantile(above=lower_bound) if i else Quantile()
            if i == 0:
                return Quantile(below=bound)
            span = count - lower_count
            if span <= 0:
                return Quantile(value=bound)
            return Quantile(value=lower_bound + (bound - lower_bound) * (rank - lower_count) / span)
        lower_bound, lower_count = bound, count
    return Quantile(above=lower_bound)


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
    p50, p90, p99 = (estimate(q, buckets).scaled(1000.0) for _, q in QUANTILES)
    return Percentiles(p50, p90, p99, count=int(buckets[-1][1]))
