"""SGLang 0.5.16's Prometheus metrics (`--enable-metrics`): one series per scheduler rank, as SGLang reports them.

Names, types, help texts and buckets come from SGLang 0.5.16's metric table (specmon/sglang/data, read from
its source). Labels follow SGLang: scheduler metrics carry `model_name`, `engine_type`, `tp_rank`, `pp_rank`,
`moe_ep_rank` (+ `priority`, `dp_rank`) and `--extra-metric-labels`; tokenizer metrics `model_name` and
`engine_type` (+ the same extras); the HTTP middleware's and the CPU monitor's only their own. Which ranks report
what is `ranks.rank_layout`. Like SGLang's multiprocess collector, a family with no sample yet is left out and
label names are sorted.

The scheduler side is kept per DP group (`GroupState`), and rendered at scrape time once per rank of the group;
a node of rank >= 1 renders its own ranks from the groups that node 0 publishes (`group_snapshot`).
"""

from __future__ import annotations

import bisect
import math
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Sample

from specmon.emulator.ranks import RankLayout, engine_type
from specmon.sglang.metrics import MetricTable, load_shipped_metrics

prometheus_client.disable_created_metrics()  # SGLang's multiprocess collector exposes no *_created samples

EMULATED_VERSION = "0.5.16"

# What `SchedulerMetricsCollector.emit_constants` sets once, on every rank (metrics_collector.py:1401).
CONSTANT_GAUGES = (
    "sglang:max_total_num_tokens", "sglang:engine_startup_time", "sglang:engine_load_weights_time",
    "sglang:page_size", "sglang:num_pages", "sglang:context_len", "sglang:startup_available_gpu_memory_gb",
)
# What `log_stats` sets at every stats report (metrics_collector.py:1274), with `SchedulerStats`' defaults.
STATS_GAUGES: dict[str, float] = {
    "sglang:num_running_reqs": 0.0, "sglang:num_queue_reqs": 0.0, "sglang:num_grammar_queue_reqs": 0.0,
    "sglang:gen_throughput": 0.0, "sglang:cache_hit_rate": 0.0, "sglang:decode_sum_seq_lens": 0.0,
    "sglang:token_usage": 0.0, "sglang:full_token_usage": 0.0, "sglang:swa_token_usage": 0.0,
    "sglang:mamba_usage": 0.0, "sglang:num_used_tokens": 0.0, "sglang:kv_available_tokens": 0.0,
    "sglang:kv_evictable_tokens": 0.0, "sglang:kv_used_tokens": 0.0, "sglang:swa_available_tokens": 0.0,
    "sglang:swa_evictable_tokens": 0.0, "sglang:swa_used_tokens": 0.0, "sglang:mamba_available_tokens": 0.0,
    "sglang:mamba_evictable_tokens": 0.0, "sglang:mamba_used_tokens": 0.0, "sglang:spec_accept_length": 0.0,
    "sglang:spec_accept_rate": 0.0, "sglang:spec_cap_length": 0.0, "sglang:spec_block_accept_length": 0.0,
    "sglang:spec_num_steps": 0.0, "sglang:spec_num_draft_tokens": 0.0, "sglang:num_retracted_reqs": 0.0,
    "sglang:num_paused_reqs": 0.0, "sglang:num_prefill_bootstrap_queue_reqs": 0.0,
    "sglang:num_prefill_inflight_queue_reqs": 0.0, "sglang:num_decode_prealloc_queue_reqs": 0.0,
    "sglang:num_decode_transfer_queue_reqs": 0.0, "sglang:pending_prealloc_token_usage": 0.0,
    "sglang:utilization": 0.0, "sglang:fwd_occupancy": math.nan, "sglang:new_token_ratio": 0.0,
    "sglang:is_cuda_graph": 0.0, "sglang:num_unique_running_routing_keys": 0.0,
}
ROUTING_KEY_GAUGES = ("sglang:routing_key_running_req_count", "sglang:routing_key_all_req_count")
SCHEDULER_COUNTERS = ("sglang:realtime_tokens_total", "sglang:cuda_graph_passes_total")  # by `mode`
QUEUE_TIME = "sglang:queue_time_seconds"
STAGE_LATENCY = "sglang:per_stage_req_latency_seconds"  # by `stage`
_PID_MODES = (None, "all", "liveall")  # gauges the multiprocess collector labels with the writing pid


class _Buckets:
    """One histogram's counts, cumulative at render time."""

    def __init__(self, bounds: Iterable[float]) -> None:
        self.bounds = sorted(float(b) for b in bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, float]]:
        total, out = 0, []
        for bound, count in zip([*self.bounds, math.inf], self.counts, strict=True):
            total += count
            out.append(("+Inf" if bound == math.inf else prometheus_client.utils.floatToGoString(bound), total))
        return out

    def to_json(self) -> dict[str, Any]:
        return {"counts": list(self.counts), "sum": self.sum}

    def load(self, data: dict[str, Any]) -> None:
        counts = data.get("counts")
        if isinstance(counts, list) and len(counts) == len(self.counts):
            self.counts = [int(c) for c in counts]
            self.sum = float(data.get("sum") or 0.0)


class GroupState:
    """One DP group's scheduler figures: what each of its reporting ranks last set, and its counters."""

    def __init__(self, table: MetricTable) -> None:
        self.stats: dict[str, float] | None = None  # None until the first stats report
        self.counters: dict[str, dict[str, float]] = {name: {} for name in SCHEDULER_COUNTERS}
        self.queue_time = _Buckets(table.get(QUEUE_TIME).buckets or ())
        self.stage_bounds = table.get(STAGE_LATENCY).buckets or ()
        self.stages: dict[str, _Buckets] = {}

    def to_json(self) -> dict[str, Any]:
        return {
            "stats": self.stats,
            "counters": self.counters,
            "queue_time": self.queue_time.to_json(),
            "stages": {stage: b.to_json() for stage, b in self.stages.items()},
        }

    def load(self, data: dict[str, Any]) -> None:
        stats = data.get("stats")
        self.stats = {k: float(v) for k, v in stats.items() if k in STATS_GAUGES} if isinstance(stats, dict) else None
        counters = data.get("counters") or {}
        for name in SCHEDULER_COUNTERS:
            by_mode = counters.get(name) if isinstance(counters, dict) else None
            self.counters[name] = {str(m): float(v) for m, v in (by_mode or {}).items()}
        self.queue_time.load(data.get("queue_time") or {})
        for stage, buckets in (data.get("stages") or {}).items():
            self.stages.setdefault(str(stage), _Buckets(self.stage_bounds)).load(buckets or {})


class SchedulerMetrics:
    """The scheduler side of /metrics for the ranks of this node (a prometheus_client custom collector)."""

    def __init__(self, table: MetricTable, layout: RankLayout, base: dict[str, str], extra: dict[str, str]) -> None:
        self.table = table
        self.layout = layout
        self._lock = threading.Lock()
        self._groups = {group: GroupState(table) for group in range(layout.dp_groups)}
        self._constants: dict[str, float] | None = None
        self._pid = str(os.getpid())
        self._labels = []
        for rank in layout.ranks:
            labels = {**base, "tp_rank": str(rank.tp_rank), "pp_rank": str(rank.pp_rank),
                      "moe_ep_rank": str(rank.moe_ep_rank)}
            if rank.dp_rank is not None:
                labels["dp_rank"] = str(rank.dp_rank)
            labels.update(extra)  # SGLang: labels.update(extra_metric_labels), so an extra may replace a rank
            self._labels.append((rank, labels))

    # --- what the emulated scheduler reports --------------------------------------------------
    def emit_constants(self, values: dict[str, float]) -> None:
        with self._lock:
            self._constants = {name: float(values.get(name, 0.0)) for name in CONSTANT_GAUGES}

    def log_stats(self, group: int, values: dict[str, float]) -> None:
        with self._lock:
            state = self._groups[group]
            if state.stats is None:
                state.stats = dict(STATS_GAUGES)
            state.stats.update({k: float(v) for k, v in values.items() if k in STATS_GAUGES})

    def inc(self, name: str, group: int, mode: str, amount: float = 1.0) -> None:
        if amount <= 0:
            return
        with self._lock:
            by_mode = self._groups[group].counters[name]
            by_mode[mode] = by_mode.get(mode, 0.0) + amount

    def observe_queue_time(self, group: int, seconds: float) -> None:
        with self._lock:
            self._groups[group].queue_time.observe(seconds)

    def observe_stage(self, group: int, stage: str, seconds: float) -> None:
        with self._lock:
            state = self._groups[group]
            state.stages.setdefault(stage, _Buckets(state.stage_bounds)).observe(seconds)

    def group_snapshot(self) -> dict[str, Any]:
        """Every DP group's state as JSON (what node 0 publishes to the other nodes)."""
        with self._lock:
            return {str(group): state.to_json() for group, state in self._groups.items()}

    def load_groups(self, snapshot: dict[str, Any]) -> None:
        """Take the DP groups' state from node 0's snapshot (a node of rank >= 1)."""
        with self._lock:
            for key, data in snapshot.items():
                try:
                    group = int(key)
                except ValueError:
                    continue
                if group in self._groups and isinstance(data, dict):
                    self._groups[group].load(data)

    # --- the exposition -----------------------------------------------------------------------
    def _family(self, name: str) -> Metric:
        spec = self.table.get(name)
        kinds = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily, "histogram": HistogramMetricFamily}
        return kinds[spec.type](name, spec.help, labels=None)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            constants = dict(self._constants) if self._constants is not None else None
            groups = {g: _GroupView(s) for g, s in self._groups.items()}
        reporting = [(rank, labels) for rank, labels in self._labels if rank.reports_stats]
        families: list[Metric] = []
        for name in SCHEDULER_COUNTERS:
            family = self._family(name)
            for rank, labels in reporting:
                for mode, value in groups[rank.group].counters[name].items():
                    family.samples.append(_sample(name, labels, value, mode=mode))
            families.append(family)
        stages, queue = self._family(STAGE_LATENCY), self._family(QUEUE_TIME)
        for rank, labels in reporting:
            view = groups[rank.group]
            for stage, (buckets, total) in view.stages.items():
                _histogram_samples(stages, STAGE_LATENCY, {**labels, "stage": stage}, buckets, total)
            if view.queue_time[0][-1][1]:
                _histogram_samples(queue, QUEUE_TIME, labels, *view.queue_time)
        families += [stages, queue]
        for name in CONSTANT_GAUGES if constants is not None else ():
            family = self._family(name)
            family.samples += [_sample(name, labels, constants[name]) for _rank, labels in self._labels]
            families.append(family)
        for name in STATS_GAUGES:
            family = self._family(name)
            pid = {"pid": self._pid} if self.table.get(name).multiprocess_mode in _PID_MODES else {}
            for rank, labels in reporting:
                stats = groups[rank.group].stats
                if stats is not None:
                    family.samples.append(_sample(name, labels, stats[name], **pid))
            families.append(family)
        for name in ROUTING_KEY_GAUGES:
            family = self._family(name)
            bounds = [_bound_text(b) for b in self.table.get(name).buckets or ()]
            for rank, labels in reporting:
                if groups[rank.group].stats is not None:
                    for low, high in zip(["0", *bounds], [*bounds, "+Inf"], strict=True):
                        family.samples.append(_sample(name, labels, 0.0, gt=low, le=high))
            families.append(family)
        yield from families


class _GroupView:
    """A copy of one GroupState taken under the lock, for rendering outside it."""

    def __init__(self, state: GroupState) -> None:
        self.stats = dict(state.stats) if state.stats else None
        self.counters = {name: dict(by_mode) for name, by_mode in state.counters.items()}
        self.queue_time = (state.queue_time.cumulative(), state.queue_time.sum)
        self.stages = {stage: (b.cumulative(), b.sum) for stage, b in state.stages.items()}


def _bound_text(bound: float) -> str:
    """A bucket bound as SGLang's GaugeHistogram writes it (`str()` of the int or float it was given)."""
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _sample(name: str, labels: dict[str, str], value: float, **more: str) -> Sample:
    return Sample(name, dict(sorted({**labels, **more}.items())), value, None, None)


def _histogram_samples(family: Metric, name: str, labels: dict[str, str], buckets: list[tuple[str, float]],
                       total: float) -> None:
    for bound, count in buckets:
        family.samples.append(_sample(name + "_bucket", labels, count, le=bound))
    family.samples.append(_sample(name + "_sum", labels, total))
    family.samples.append(_sample(name + "_count", labels, buckets[-1][1]))


class _ProcessCpu:
    """`sglang:process_cpu_seconds_total{component}`: the emulator's own CPU time as the tokenizer's."""

    def __init__(self, help_text: str) -> None:
        self._help = help_text
        self._started = time.process_time()

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("sglang:process_cpu_seconds_total", self._help, labels=["component"])
        family.add_metric(["detokenizer"], 0.0)
        family.add_metric(["tokenizer"], max(0.0, time.process_time() - self._started))
        yield family


class _NonEmpty:
    """A registry view that leaves out families without samples, as SGLang's multiprocess collector does."""

    def __init__(self, *sources) -> None:
        self._sources = sources

    def collect(self) -> Iterator[Metric]:
        for source in self._sources:
            for family in source.collect():
                if family.samples:
                    family.samples = [s._replace(labels=dict(sorted(s.labels.items()))) for s in family.samples]
                    yield family


_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*\Z")
BANNER = b"# specmon SGLang 0.5.16 emulator: emulated metrics, not a real SGLang server\n"


def extra_labels_problem(value: Any) -> str | None:
    """Why `--extra-metric-labels` cannot label metrics (SGLang's scheduler would die creating them), or None."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"--extra-metric-labels must be a JSON object of label names to values, not {type(value).__name__}"
    for name, label_value in value.items():
        if not _LABEL_NAME.match(str(name)) or str(name).startswith("__"):
            return f"--extra-metric-labels: {name!r} is not a Prometheus label name"
        if isinstance(label_value, dict | list):
            return f"--extra-metric-labels: the value of {name!r} is not a string"
    return None


def _labels_of(args: dict[str, Any]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """(scheduler base labels, tokenizer labels, extra labels) for SGLang's server args."""
    base = {"model_name": str(args.get("served_model_name") or args.get("model_path")),
            "engine_type": engine_type(args.get("disaggregation_mode"))}
    extra = {str(k): str(v) for k, v in (args.get("extra_metric_labels") or {}).items()}
    scheduler = dict(base)
    tokenizer = dict(base)
    if args.get("enable_priority_scheduling"):
        scheduler["priority"] = tokenizer["priority"] = ""
    for label in args.get("tokenizer_metrics_allowed_custom_labels") or []:
        tokenizer[str(label)] = ""
    tokenizer.update(extra)
    return scheduler, tokenizer, extra


class EmulatorMetrics:
    """The emulator's /metrics: scheduler ranks (`scheduler`), and on node 0 the tokenizer, HTTP and CPU ones.

    The tokenizer side counts finished requests (`finished`); the HTTP side each request (`http_request`).
    `render()` gives the Prometheus text of `GET /metrics`, after a comment line saying it is emulated.
    """

    def __init__(self, args: dict[str, Any], layout: RankLayout) -> None:
        self.table = load_shipped_metrics(EMULATED_VERSION)
        scheduler_labels, tokenizer_labels, extra = _labels_of(args)
        self.scheduler = SchedulerMetrics(self.table, layout, scheduler_labels, extra)
        self.serves_tokenizer = layout.node_rank == 0
        self.registry = CollectorRegistry(auto_describe=False)
        self._tok = tokenizer_labels
        names = list(self._tok)
        r = self.registry

        def counter(name: str, *more: str) -> Counter:
            return Counter(name, self.table.get(name).help, [*names, *more], registry=r)

        def histogram(name: str) -> Histogram:
            spec = self.table.get(name)
            return Histogram(name, spec.help, names, registry=r, buckets=spec.buckets or Histogram.DEFAULT_BUCKETS)

        self.prompt_tokens_total = counter("sglang:prompt_tokens_total")
        self.generation_tokens_total = counter("sglang:generation_tokens_total")
        self.spec_verify_calls_total = counter("sglang:spec_verify_calls_total")
        self.cached_tokens_total = counter("sglang:cached_tokens_total", "cache_source")
        self.num_requests_total = counter("sglang:num_requests_total")
        self.time_to_first_token = histogram("sglang:time_to_first_token_seconds")
        self.e2e_request_latency = histogram("sglang:e2e_request_latency_seconds")
        self.inter_token_latency = histogram("sglang:inter_token_latency_seconds")
        self.prompt_tokens_histogram = histogram("sglang:prompt_tokens_histogram")
        self.uncached_prompt_tokens_histogram = histogram("sglang:uncached_prompt_tokens_histogram")
        self.generation_tokens_histogram = histogram("sglang:generation_tokens_histogram")
        http = CollectorRegistry(auto_describe=False)
        self._http = http
        self.http_requests_total = Counter(
            "sglang:http_requests_total", self.table.get("sglang:http_requests_total").help,
            ["endpoint", "method"], registry=http)
        self.http_responses_total = Counter(
            "sglang:http_responses_total", self.table.get("sglang:http_responses_total").help,
            ["endpoint", "status_code", "method"], registry=http)
        self.http_requests_active = prometheus_client.Gauge(
            "sglang:http_requests_active", self.table.get("sglang:http_requests_active").help,
            ["endpoint", "method"], registry=http)
        self.routing_keys_active = prometheus_client.Gauge(
            "sglang:routing_keys_active", self.table.get("sglang:routing_keys_active").help, registry=http)
        self._cpu = _ProcessCpu(self.table.get("sglang:process_cpu_seconds_total").help)

    # --- the tokenizer side -------------------------------------------------------------------
    def finished(self, *, prompt_tokens: int, cached_tokens: int, completion_tokens: int, verify_ct: int,
                 e2e_s: float, ttft_s: float | None) -> None:
        """One finished request, as `TokenizerMetricsCollector.observe_one_finished_request` counts it."""
        tok = self._tok
        self.prompt_tokens_total.labels(**tok).inc(prompt_tokens)
        self.generation_tokens_total.labels(**tok).inc(completion_tokens)
        if verify_ct > 0:
            self.spec_verify_calls_total.labels(**tok).inc(verify_ct)
        if cached_tokens > 0:
            self.cached_tokens_total.labels(**tok, cache_source="device").inc(cached_tokens)
        self.num_requests_total.labels(**tok).inc()
        self.e2e_request_latency.labels(**tok).observe(e2e_s)
        self.prompt_tokens_histogram.labels(**tok).observe(prompt_tokens)
        self.uncached_prompt_tokens_histogram.labels(**tok).observe(prompt_tokens - cached_tokens)
        self.generation_tokens_histogram.labels(**tok).observe(completion_tokens)
        if ttft_s is not None:
            self.time_to_first_token.labels(**tok).observe(ttft_s)
            if completion_tokens > 1:
                self.inter_token_latency.labels(**tok).observe((e2e_s - ttft_s) / (completion_tokens - 1))

    # --- the HTTP middleware ------------------------------------------------------------------
    def http_started(self, endpoint: str, method: str) -> None:
        self.http_requests_total.labels(endpoint=endpoint, method=method).inc()
        self.http_requests_active.labels(endpoint=endpoint, method=method).inc()

    def http_finished(self, endpoint: str, method: str, status: int | None) -> None:
        if status is not None:
            self.http_responses_total.labels(endpoint=endpoint, status_code=str(status), method=method).inc()
        self.http_requests_active.labels(endpoint=endpoint, method=method).dec()

    def render(self) -> bytes:
        if not self.serves_tokenizer:
            return BANNER + generate_latest(_NonEmpty(self.scheduler))
        return BANNER + generate_latest(_NonEmpty(self._http, self._cpu, self.scheduler, self.registry))
