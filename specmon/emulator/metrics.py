"""SGLang's Prometheus metrics (`--enable-metrics`), with SGLang 0.5.16's names and labels."""

from __future__ import annotations

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

prometheus_client.disable_created_metrics()  # SGLang's multiprocess collector exposes no *_created samples

_SCHEDULER_LABELS = ("engine_type", "model_name", "moe_ep_rank", "pp_rank", "tp_rank")
_TOKENIZER_LABELS = ("engine_type", "model_name")
_LATENCY_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0)
_TOKEN_LATENCY_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060,
                          0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0)


class _ModeCounter:
    """A scheduler counter with a `mode` label (SGLang 0.5.16's realtime_tokens_total)."""

    def __init__(self, counter: Counter, labels: dict[str, str]) -> None:
        self._counter, self._labels = counter, labels

    def labels(self, mode: str):
        return self._counter.labels(**self._labels, mode=mode)


class EmulatorMetrics:
    """The emulator's metric registry; `render()` gives the Prometheus text of `GET /metrics`."""

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        sched = {"engine_type": "unified", "model_name": model_name, "moe_ep_rank": "0", "pp_rank": "0",
                 "tp_rank": "0"}
        tok = {"engine_type": "unified", "model_name": model_name}
        r = self.registry

        def gauge(name: str, doc: str):
            return Gauge(name, doc, _SCHEDULER_LABELS, registry=r, multiprocess_mode="mostrecent").labels(**sched)

        def counter(name: str, doc: str):
            return Counter(name, doc, _TOKENIZER_LABELS, registry=r).labels(**tok)

        self.max_total_num_tokens = gauge("sglang:max_total_num_tokens",
                                          "Maximum total number of tokens in the KV cache pool.")
        self.num_running_reqs = gauge("sglang:num_running_reqs", "The number of running requests.")
        self.num_queue_reqs = gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.")
        self.num_used_tokens = gauge("sglang:num_used_tokens", "The number of used tokens.")
        self.token_usage = gauge("sglang:token_usage", "The token usage.")
        self.gen_throughput = gauge("sglang:gen_throughput", "The generation throughput (token/s).")
        self.cache_hit_rate = gauge("sglang:cache_hit_rate", "The prefix cache hit rate.")
        self.spec_accept_length = gauge(
            "sglang:spec_accept_length",
            "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
        )
        self.spec_accept_rate = gauge(
            "sglang:spec_accept_rate", "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch)."
        )
        self.is_cuda_graph = gauge("sglang:is_cuda_graph", "Whether the batch is using CUDA graph.")
        self.prompt_tokens_total = counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.")
        self.generation_tokens_total = counter(
            "sglang:generation_tokens_total", "Number of generation tokens processed."
        )
        self.cached_tokens_total = counter("sglang:cached_tokens_total", "Number of cached prompt tokens.")
        self.spec_verify_calls_total = counter(
            "sglang:spec_verify_calls_total", "Number of speculative decoding verification calls."
        )
        self.realtime_tokens = _ModeCounter(Counter(
            "sglang:realtime_tokens_total",
            "Total number of tokens processed (updated on each log interval). mode: prefill_compute, prefill_cache, "
            "decode.", (*_SCHEDULER_LABELS, "mode"), registry=r,
        ), sched)
        self.num_requests_total = counter("sglang:num_requests_total", "Number of requests processed.")
        self.time_to_first_token = Histogram(
            "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            _TOKENIZER_LABELS, registry=r, buckets=_LATENCY_BUCKETS,
        ).labels(**tok)
        self.e2e_request_latency = Histogram(
            "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
            _TOKENIZER_LABELS, registry=r, buckets=_LATENCY_BUCKETS,
        ).labels(**tok)
        self.inter_token_latency = Histogram(
            "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            _TOKENIZER_LABELS, registry=r, buckets=_TOKEN_LATENCY_BUCKETS,
        ).labels(**tok)

    def render(self) -> bytes:
        return generate_latest(self.registry)
