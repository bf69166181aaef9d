"""One /metrics reading with its ranks merged right: replicas (TP/PP/EP ranks) counted once, data-parallel
ranks (and other label sets) added up, histograms merged bucket by bucket. Parsed with prometheus_client."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from prometheus_client.parser import text_string_to_metric_families

from specmon.sglang.metric_names import (
    CACHE_HIT_RATE,
    CACHED_TOKENS_TOTAL,
    CUDA_GRAPH_PASSES_TOTAL,
    E2E_REQUEST_LATENCY_SECONDS,
    GEN_THROUGHPUT,
    GENERATION_TOKENS_TOTAL,
    INTER_TOKEN_LATENCY_SECONDS,
    MAX_TOTAL_NUM_TOKENS,
    NUM_QUEUE_REQS,
    NUM_REQUESTS_TOTAL,
    NUM_RUNNING_REQS,
    NUM_USED_TOKENS,
    PROMPT_TOKENS_TOTAL,
    REALTIME_TOKENS_TOTAL,
    SPEC_ACCEPT_LENGTH,
    SPEC_ACCEPT_RATE,
    SPEC_NUM_DRAFT_TOKENS,
    SPEC_NUM_STEPS,
    SPEC_VERIFY_CALLS_TOTAL,
    STARTUP_CUDA_GRAPH_TIME_SECONDS,
    STARTUP_TIME_SECONDS,
    TIME_TO_FIRST_TOKEN_SECONDS,
    TOKEN_USAGE,
)

MAX_TEXT_CHARS = 8 * 1024 * 1024
"""A /metrics answer longer than this is cut (never parsed whole): bounded memory whatever the server sends."""
MAX_SERIES = 20_000
"""Lines of the families specmon reads in one /metrics (a real 0.5.16 server: 132 per scheduler; 64 ranks:
~8,500). More is refused unparsed: parsing 200,000 takes seconds, every scrape."""
MAX_BUCKETS = 256
"""Bucket bounds of one histogram (SGLang's: 20-40). More is refused: every scrape keeps its buckets."""
MAX_DP_RANKS = 256

REPLICA_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank", "attn_cp_rank"})
"""Ranks of one scheduler that report the same numbers: counted once (the largest value is kept)."""
DP_LABEL = "dp_rank"

COUNTERS = (
    GENERATION_TOKENS_TOTAL,
    PROMPT_TOKENS_TOTAL,
    CACHED_TOKENS_TOTAL,
    NUM_REQUESTS_TOTAL,
    SPEC_VERIFY_CALLS_TOTAL,
    REALTIME_TOKENS_TOTAL,
    CUDA_GRAPH_PASSES_TOTAL,
)
COUNTERS_BY_MODE = frozenset({REALTIME_TOKENS_TOTAL})
"""Counters kept per `mode` label as well (``name{mode=decode}``), for SGLang's own modes only."""
MODES = frozenset({"decode", "prefill_compute", "prefill_cache"})
SUMMED_GAUGES = frozenset({
    NUM_RUNNING_REQS, NUM_QUEUE_REQS, NUM_USED_TOKENS, MAX_TOTAL_NUM_TOKENS,
    GEN_THROUGHPUT,
})
AVERAGED_GAUGES = frozenset({
    TOKEN_USAGE, CACHE_HIT_RATE, SPEC_ACCEPT_LENGTH, SPEC_ACCEPT_RATE,
    SPEC_NUM_STEPS, SPEC_NUM_DRAFT_TOKENS,
})
HISTOGRAMS = (
    TIME_TO_FIRST_TOKEN_SECONDS,
    INTER_TOKEN_LATENCY_SECONDS,
    E2E_REQUEST_LATENCY_SECONDS,
)
PER_DP_GAUGES = frozenset({NUM_RUNNING_REQS, NUM_QUEUE_REQS})
STARTUP_GAUGES = {STARTUP_TIME_SECONDS: "", STARTUP_CUDA_GRAPH_TIME_SECONDS: "cuda_graph."}
"""SGLang's own startup durations (0.5.17+), one per `phase` label: kept as ``startup.PREFIX+PHASE``."""
MAX_STARTUP_PHASES = 32

Buckets = tuple[tuple[float, float], ...]
"""A histogram's cumulative buckets: ((upper bound, count), ...) sorted by bound, +Inf last."""


@dataclass(frozen=True)
class Scrape:
    """One /metrics reading, merged over ranks. Values absent from the text are absent from the dicts.

    `per_dp` holds, for running and queued requests, one value per data-parallel rank (only with `dp_rank`
    labels). `error` says why the text could not be read (then everything else is empty).
    """

    taken_at: float
    counters: dict[str, float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    histograms: dict[str, Buckets] = field(default_factory=dict)
    per_dp: dict[str, dict[str, float]] = field(default_factory=dict)
    error: str | None = None

    @property
    def empty(self) -> bool:
        """No series specmon reads (an empty answer, or another program's /metrics)."""
        return not (self.counters or self.gauges or self.histograms)

    def counter(self, name: str) -> float | None:
        return self.counters.get(name)

    def gauge(self, name: str) -> float | None:
        return self.gauges.get(name)


def _group(labels: dict[str, str], drop: frozenset[str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in drop))


def _merge_replicas(target: dict, key: tuple, value: float) -> None:
    previous = target.get(key)
    target[key] = value if previous is None else max(previous, value)


_WANTED = frozenset(COUNTERS) | SUMMED_GAUGES | AVERAGED_GAUGES | frozenset(HISTOGRAMS) | frozenset(STARTUP_GAUGES)
_WANTED_FAMILIES = frozenset(name.removesuffix("_total") for name in _WANTED) | _WANTED
_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


def _base_name(name: str) -> str:
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def wanted_lines(text: str) -> str:
    """Only the lines of the families specmon reads (a real /metrics has ~60 families and ~700 samples):
    parsing those alone costs a tenth of parsing all. Raises ValueError at a line that is no Prometheus sample
    (an HTML page is not an empty /metrics)."""
    keep = []
    for number, line in enumerate(text.split("\n"), 1):
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("TYPE", "HELP") and parts[2] in _WANTED_FAMILIES:
                keep.append(line)
            continue
        end = line.find("{")
        if end < 0:
            end = line.find(" ")
        name = line[:end] if end > 0 else line
        if name in _WANTED or _base_name(name) in _WANTED_FAMILIES:
            keep.append(line)
            if len(keep) > MAX_SERIES:  # refused by parse_scrape: no need to read on
                break
        elif _METRIC_NAME.fullmatch(name) is None and name.strip():
            raise ValueError(f"line {number} is no Prometheus sample: {line[:60]!r}")
    keep.append("")
    return "\n".join(keep)


def parse_scrape(text: str, taken_at: float) -> Scrape:
    """Parse Prometheus exposition text; never raises (a broken text gives a Scrape with `error` set)."""
    return ScrapeParser().parse(text, taken_at)


class ScrapeParser:
    """`parse_scrape` for a poller: the lines of the families specmon reads are not parsed again when they are the
    ones parsed last. An idle server's /metrics changes (its HTTP counters count the polls themselves), but not
    in those families, and parsing them is most of what a scrape costs (~4 ms of 58 KB; filtering ~0.6 ms)."""

    def __init__(self) -> None:
        self._wanted: str | None = None
        self._scrape: Scrape | None = None

    def parse(self, text: str, taken_at: float) -> Scrape:
        if len(text) > MAX_TEXT_CHARS:
            text = text[: text.rfind("\n", 0, MAX_TEXT_CHARS) + 1]
        try:
            wanted = wanted_lines(text)
        except ValueError as exc:
            return Scrape(taken_at, error=f"unreadable /metrics: {exc}"[:200])
        if wanted == self._wanted and self._scrape is not None:
            return replace(self._scrape, taken_at=taken_at)
        scrape = _parse_wanted(wanted, taken_at)
        self._wanted, self._scrape = wanted, scrape
        return scrape


def _parse_wanted(text: str, taken_at: float) -> Scrape:
    lines = text.count("\n")
    if lines > MAX_SERIES:
        return Scrape(taken_at, error=f"unreadable /metrics: {lines:,} lines of the families specmon reads, "
                                      f"more than {MAX_SERIES:,} (not parsed)")
    counter_groups: dict[str, dict[tuple, float]] = {}
    gauge_groups: dict[str, dict[tuple, float]] = {}
    bucket_groups: dict[str, dict[tuple, float]] = {}
    startup: dict[str, float] = {}
    wanted_gauges = SUMMED_GAUGES | AVERAGED_GAUGES
    histogram_buckets = {name + "_bucket": name for name in HISTOGRAMS}
    replica_and_le = REPLICA_LABELS | {"le"}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name, value = sample.name, sample.value
                if not isinstance(value, float | int) or not math.isfinite(value):
                    continue
                if name in COUNTERS:
                    groups = counter_groups.setdefault(name, {})
                    _merge_replicas(groups, _group(sample.labels, REPLICA_LABELS), float(value))
                elif name in wanted_gauges:
                    groups = gauge_groups.setdefault(name, {})
                    _merge_replicas(groups, _group(sample.labels, REPLICA_LABELS), float(value))
                elif name in STARTUP_GAUGES:
                    phase = sample.labels.get("phase")
                    phase_key = f"startup.{STARTUP_GAUGES[name]}{phase}"
                    if isinstance(phase, str) and (phase_key in startup or len(startup) < MAX_STARTUP_PHASES):
                        startup[phase_key] = max(startup.get(phase_key, 0.0), float(value))  # the slowest rank's
                elif name in histogram_buckets:
                    le = _bound(sample.labels.get("le"))
                    if le is None:
                        continue
                    groups = bucket_groups.setdefault(histogram_buckets[name], {})
                    bucket = (le, _group(sample.labels, replica_and_le))
                    _merge_replicas(groups, bucket, float(value))
    except Exception as exc:  # the parser raises ValueError and others on malformed text
        return Scrape(taken_at, error=f"unreadable /metrics: {exc}"[:200])

    counters: dict[str, float] = {}
    for name, groups in counter_groups.items():
        counters[name] = sum(groups.values())
        if name in COUNTERS_BY_MODE:
            for key, value in groups.items():
                mode = dict(key).get("mode")
                if mode in MODES:
                    counters[f"{name}{{mode={mode}}}"] = counters.get(f"{name}{{mode={mode}}}", 0.0) + value
    gauges: dict[str, float] = dict(startup)
    per_dp: dict[str, dict[str, float]] = {}
    for name, groups in gauge_groups.items():
        values = list(groups.values())
        gauges[name] = sum(values) if name in SUMMED_GAUGES else sum(values) / len(values)
        if name in PER_DP_GAUGES:
            by_dp: dict[str, float] = {}
            for key, value in groups.items():
                dp = dict(key).get(DP_LABEL)
                if dp is not None:
                    by_dp[dp] = by_dp.get(dp, 0.0) + value
            if len(by_dp) > 1:
                per_dp[name] = by_dp
    histograms: dict[str, Buckets] = {}
    for name, groups in bucket_groups.items():
        merged: dict[float, float] = {}
        for (le, _), value in groups.items():
            merged[le] = merged.get(le, 0.0) + value
        if len(merged) > MAX_BUCKETS:
            return Scrape(taken_at, error=f"unreadable /metrics: {name} has {len(merged):,} bucket bounds, "
                                          f"more than {MAX_BUCKETS}")
        histograms[name] = tuple(sorted(merged.items()))
    for name, by_dp in per_dp.items():
        if len(by_dp) > MAX_DP_RANKS:
            return Scrape(taken_at, error=f"unreadable /metrics: {name} has {len(by_dp):,} dp_rank values, "
                                          f"more than {MAX_DP_RANKS}")
    return Scrape(taken_at, counters, gauges, histograms, per_dp)


def _bound(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return None if math.isnan(value) else value
