"""The columns computed from a refresh's parts (`FleetQueries.parts`), exactly as their PromQL expressions
(`FleetQueries.columns`, the recording rules) would compute them, including PromQL's rules for NaN and for
series that are missing: `a / (b > 0)` has no value where `b` is missing or not above 0, `a or b` takes `b`
only where `a` has no value, `max` keeps a number over a NaN. Pure: samples in, samples out.

The agreement with Prometheus evaluating the expressions themselves is tested against a real Prometheus with
the recording rules loaded (tests/fleet/test_fleet_agreement.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from specmon.fleet.promapi import Sample
from specmon.fleet.promql import GAUGES_PART, LAUNCH_PART, TTFT_BOUNDS, FleetQueries
from specmon.live.quantiles import Quantile
from specmon.sglang.metric_names import (
    MAX_TOTAL_NUM_TOKENS,
    NUM_QUEUE_REQS,
    NUM_RUNNING_REQS,
    NUM_USED_TOKENS,
    SPEC_ACCEPT_LENGTH,
    SPEC_NUM_DRAFT_TOKENS,
    SPEC_NUM_STEPS,
    TOKEN_USAGE,
)

Values = dict[str, float]


def figures(queries: FleetQueries, parts: Mapping[str, Sequence[Sample]]) -> dict[str, list[Sample]]:
    """Each column's samples: read as they are (a recorded column, or a column that is its own part), or
    computed from the parts it reads."""
    s = queries.server_label
    gauges = _by_metric([*parts.get(GAUGES_PART, ()), *parts.get(LAUNCH_PART, ())])
    ttft = _ttft_p99(parts, s)
    out: dict[str, list[Sample]] = {}
    for column in queries.columns():
        if column.inline_only:
            continue
        if column.key in queries.recorded or not column.reads:
            out[column.key] = _unnamed(parts.get(column.key, ()))
            continue
        if column.key == "running_per_dp":
            out[column.key] = _unnamed(gauges.get(NUM_RUNNING_REQS, []))
            continue
        if column.key == "gpu_memory_used_ratio":
            out[column.key] = _framebuffer_ratio(parts.get("dcgm_framebuffer", ()))
            continue
        values = ttft[column.key] if column.key in ttft else _server_figure(column.key, s, parts, gauges)
        out[column.key] = [Sample({s: name}, value) for name, value in values.items()]
    return out


def _server_figure(key: str, s: str, parts: Mapping[str, Sequence[Sample]],
                   gauges: dict[str, list[Sample]]) -> Values:
    if key == "decode_tok_s":  # realtime or generation
        return _or(_per_server(parts.get("realtime_tok_s", ()), s), _per_server(parts.get("generation_tok_s", ()), s))
    if key == "generation_tok_s":
        return _per_server(parts.get("generation_tok_s", ()), s)
    if key == "accept_length":  # generation / (verify > 0)
        return _ratio(_per_server(parts.get("generation_tok_s", ()), s), _per_server(parts.get("verify_per_s", ()), s))
    if key == "queued":
        return _dedup(gauges.get(NUM_QUEUE_REQS, ()), s, _sum)
    if key == "accept_gauge":  # ... > 0: a server that does not speculate reports 0
        return _above_0(_dedup(gauges.get(SPEC_ACCEPT_LENGTH, ()), s, _avg))
    if key == "kv_used_ratio":  # (used / (total > 0)) or avg(token_usage)
        used = _dedup(gauges.get(NUM_USED_TOKENS, ()), s, _sum)
        total = _dedup(gauges.get(MAX_TOTAL_NUM_TOKENS, ()), s, _sum)
        return _or(_ratio(used, total), _dedup(gauges.get(TOKEN_USAGE, ()), s, _avg))
    if key in ("draft_tokens", "num_steps"):  # max by (server) > 0
        return _above_0(_dedup(gauges.get(SPEC_NUM_DRAFT_TOKENS if key == "draft_tokens" else SPEC_NUM_STEPS, ()), s, _max))
    raise KeyError(f"no inline computation for the column {key!r}")


def _ttft_p99(parts: Mapping[str, Sequence[Sample]], s: str) -> dict[str, Values]:
    """The TTFT p99 columns (`FleetQueries.ttft_p99`) from histogram_quantile's p99 and each server's first and
    highest finite bucket bound (TTFT_BOUNDS, from the reader), by the Live view's rule
    (`Quantile.of_interpolated`): a value between the two, else only the bound. NaN where histogram_quantile is
    NaN (no observation)."""
    quantile = _per_server(parts.get("ttft_quantile", ()), s)
    first, last = (_per_server(parts.get(key, ()), s) for key in TTFT_BOUNDS)
    out: dict[str, Values] = {"ttft_p99_s": {}, "ttft_p99_below_s": {}, "ttft_p99_above_s": {}}
    for name, value in quantile.items():
        q = Quantile.of_interpolated(value, first.get(name), last.get(name))
        if q.below is not None:
            out["ttft_p99_below_s"][name] = q.below
        elif q.above is not None:
            out["ttft_p99_above_s"][name] = q.above
        else:
            out["ttft_p99_s"][name] = value
    return out


def _unnamed(samples: Iterable[Sample]) -> list[Sample]:
    """A column's samples without a metric name (a recording rule's answer is named after the rule)."""
    for sample in samples:
        sample.labels.pop("__name__", None)
    return list(samples)


def _by_metric(samples: Iterable[Sample]) -> dict[str, list[Sample]]:
    """The gauges parts' series by metric name (their labels left as they are: the launch's are kept between
    refreshes)."""
    out: dict[str, list[Sample]] = {}
    for sample in samples:
        out.setdefault(sample.labels.get("__name__", ""), []).append(sample)
    return out


def _per_server(samples: Iterable[Sample], s: str) -> Values:
    out: Values = {}
    for sample in samples:
        name = sample.labels.get(s)
        if name is not None and name not in out:
            out[name] = sample.value
    return out


def _dedup(samples: Iterable[Sample], s: str, combine) -> Values:
    """`combine by (server) (max by (server, dp_rank) (x))` from x's `max by (server, dp_rank, engine_type)`."""
    per_dp: dict[tuple[str, str], float] = {}
    for labels, value in samples:
        name = labels.get(s)
        if name is not None:
            key = (name, labels.get("dp_rank", ""))
            per_dp[key] = _max2(per_dp[key], value) if key in per_dp else value
    per_server: dict[str, list[float]] = {}
    for (name, _), value in per_dp.items():
        per_server.setdefault(name, []).append(value)
    return {name: combine(values) for name, values in per_server.items()}


def _max2(best: float, value: float) -> float:
    """PromQL's `max` of two in turn: a NaN is replaced by the later value, and never replaces a number."""
    return value if best < value or math.isnan(best) else best


def _max(values: Sequence[float]) -> float:
    best = values[0]
    for value in values[1:]:
        best = _max2(best, value)
    return best


def _sum(values: Sequence[float]) -> float:
    return sum(values)


def _avg(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _above_0(values: Values) -> Values:
    """`x > 0`: only the values above 0 (NaN is not)."""
    return {name: value for name, value in values.items() if value > 0}


def _or(first: Values, second: Values) -> Values:
    return {**second, **first}


def _ratio(numerator: Values, denominator: Values) -> Values:
    """`numerator / (denominator > 0)`: only where both have a value and the denominator is above 0."""
    return {name: value / denominator[name] for name, value in numerator.items()
            if name in denominator and denominator[name] > 0}


def _framebuffer_ratio(samples: Iterable[Sample]) -> list[Sample]:
    """`used / (used + free > 0)` per host group, from FB_USED and FB_FREE summed per host group."""
    groups: dict[tuple[tuple[str, str], ...], dict[str, float]] = {}
    for sample in samples:
        labels = dict(sample.labels)
        name = labels.pop("__name__", "")
        groups.setdefault(tuple(sorted(labels.items())), {})[name] = sample.value
    out = []
    for group, by_name in groups.items():
        used, free = by_name.get("DCGM_FI_DEV_FB_USED"), by_name.get("DCGM_FI_DEV_FB_FREE")
        if used is not None and free is not None and used + free > 0:
            out.append(Sample(dict(group), used / (used + free)))
    return out
