"""SGLang's Prometheus /metrics: the counters and gauges specmon uses, and deltas between two readings."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

COUNTERS = {
    "generation_tokens": "sglang:generation_tokens_total",
    "spec_verify_calls": "sglang:spec_verify_calls_total",
    "num_requests": "sglang:num_requests_total",
    "prompt_tokens": "sglang:prompt_tokens_total",
}
# Gauges that add up across data-parallel ranks; the others are averaged.
SUMMED_GAUGES = {
    "gen_throughput": "sglang:gen_throughput",
    "num_running_reqs": "sglang:num_running_reqs",
    "num_queue_reqs": "sglang:num_queue_reqs",
}
AVERAGED_GAUGES = {
    "spec_accept_length": "sglang:spec_accept_length",
    "token_usage": "sglang:token_usage",
}
# Tensor/pipeline/expert ranks of one scheduler report the same gauge values.
_REPLICA_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank"})
_HISTOGRAM_SUFFIXES = ("_bucket", "_created")


@dataclass(frozen=True)
class MetricsSnapshot:
    """One reading of /metrics: counters summed over labels (tp_rank, is_streaming, ...) and the main gauges.

    A value is None when the server does not export that metric (e.g. spec_verify_calls before 0.5.16).
    `totals` has every sample name summed over its labels (histogram buckets left out).
    """

    generation_tokens: float | None = None
    spec_verify_calls: float | None = None
    num_requests: float | None = None
    prompt_tokens: float | None = None
    spec_accept_length: float | None = None
    gen_throughput: float | None = None
    num_running_reqs: float | None = None
    num_queue_reqs: float | None = None
    token_usage: float | None = None
    taken_at: float = 0.0
    totals: dict[str, float] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class MetricsDelta:
    """What happened between two snapshots; `reset` is True when a counter went down (the server restarted),
    in which case the counts are those since the restart."""

    generation_tokens: float | None
    spec_verify_calls: float | None
    num_requests: float | None
    prompt_tokens: float | None
    elapsed_s: float
    reset: bool

    @property
    def accept_length(self) -> float | None:
        """Δgeneration_tokens / Δspec_verify_calls: the mean acceptance length over the interval."""
        if not self.spec_verify_calls or self.generation_tokens is None:
            return None
        return self.generation_tokens / self.spec_verify_calls

    @property
    def generation_tokens_per_s(self) -> float | None:
        if self.generation_tokens is None or self.elapsed_s <= 0:
            return None
        return self.generation_tokens / self.elapsed_s


def parse_metrics(text: str, taken_at: float | None = None) -> MetricsSnapshot:
    """Parse Prometheus exposition text (SGLang's /metrics) into a MetricsSnapshot."""
    totals: dict[str, float] = defaultdict(float)
    gauge_groups: dict[str, dict[tuple, float]] = defaultdict(dict)
    gauge_names = set(SUMMED_GAUGES.values()) | set(AVERAGED_GAUGES.values())
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith(_HISTOGRAM_SUFFIXES) or not math.isfinite(sample.value):
                continue  # a NaN or infinite sample says nothing (and would make every sum NaN)
            totals[sample.name] += sample.value
            if sample.name in gauge_names:
                group = tuple(sorted((k, v) for k, v in sample.labels.items() if k not in _REPLICA_LABELS))
                previous = gauge_groups[sample.name].get(group)
                gauge_groups[sample.name][group] = sample.value if previous is None else max(previous, sample.value)

    values: dict[str, float | None] = {attr: totals.get(name) for attr, name in COUNTERS.items()}
    for attr, name in SUMMED_GAUGES.items():
        values[attr] = sum(gauge_groups[name].values()) if gauge_groups.get(name) else None
    for attr, name in AVERAGED_GAUGES.items():
        group_values = list(gauge_groups.get(name, {}).values())
        values[attr] = sum(group_values) / len(group_values) if group_values else None
    return MetricsSnapshot(
        **values, taken_at=time.time() if taken_at is None else taken_at, totals=dict(totals)
    )


def _counter_delta(before: float | None, after: float | None) -> tuple[float | None, bool]:
    if after is None:
        return None, False
    if before is None:
        return after, False
    if after < before:
        return after, True
    return after - before, False


def delta(before: MetricsSnapshot, after: MetricsSnapshot) -> MetricsDelta:
    """The counters' increase from `before` to `after`, handling a counter reset (a restarted server).

    When any counter went down, every counter is taken as counted from zero since the restart.
    """
    pairs = {attr: (getattr(before, attr), getattr(after, attr)) for attr in COUNTERS}
    reset = any(_counter_delta(b, a)[1] for b, a in pairs.values())
    counts = {attr: (a if reset else _counter_delta(b, a)[0]) for attr, (b, a) in pairs.items()}
    return MetricsDelta(**counts, elapsed_s=after.taken_at - before.taken_at, reset=reset)

