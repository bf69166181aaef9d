"""SGLang's Prometheus /metrics: the counters and gauges specmon uses, and deltas between two readings."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from specmon.serving.prom import parse_scrape
from specmon.sglang.metric_names import (
    GEN_THROUGHPUT,
    GENERATION_TOKENS_TOTAL,
    NUM_QUEUE_REQS,
    NUM_REQUESTS_TOTAL,
    NUM_RUNNING_REQS,
    PROMPT_TOKENS_TOTAL,
    SPEC_ACCEPT_LENGTH,
    SPEC_VERIFY_CALLS_TOTAL,
    TOKEN_USAGE,
)

COUNTERS = {
    "generation_tokens": GENERATION_TOKENS_TOTAL,
    "spec_verify_calls": SPEC_VERIFY_CALLS_TOTAL,
    "num_requests": NUM_REQUESTS_TOTAL,
    "prompt_tokens": PROMPT_TOKENS_TOTAL,
}
# Gauges that add up across data-parallel ranks; the others are averaged (as `specmon.serving.prom` merges them).
SUMMED_GAUGES = {
    "gen_throughput": GEN_THROUGHPUT,
    "num_running_reqs": NUM_RUNNING_REQS,
    "num_queue_reqs": NUM_QUEUE_REQS,
}
AVERAGED_GAUGES = {
    "spec_accept_length": SPEC_ACCEPT_LENGTH,
    "token_usage": TOKEN_USAGE,
}


@dataclass(frozen=True)
class MetricsSnapshot:
    """One reading of /metrics: counters summed over labels (tp_rank, is_streaming, ...) and the main gauges.

    A value is None when the server does not export that metric (e.g. spec_verify_calls before 0.5.16).
    `totals` has every counter and gauge specmon reads, merged over ranks as the Live view merges them.
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
    """Parse Prometheus exposition text (SGLang's /metrics) into a MetricsSnapshot: the Live view's parser
    (`specmon.serving.prom.parse_scrape`: only the families specmon reads, ranks merged), so `check`, `bench` and
    the Live view read one /metrics alike. Raises ValueError on text that is not Prometheus exposition."""
    scrape = parse_scrape(text, time.time() if taken_at is None else taken_at)
    if scrape.error is not None:
        raise ValueError(scrape.error)
    values: dict[str, float | None] = {attr: scrape.counters.get(name) for attr, name in COUNTERS.items()}
    for attr, name in (SUMMED_GAUGES | AVERAGED_GAUGES).items():
        values[attr] = scrape.gauges.get(name)
    return MetricsSnapshot(**values, taken_at=scrape.taken_at, totals={**scrape.counters, **scrape.gauges})


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

