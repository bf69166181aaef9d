"""The names of SGLang's Prometheus metrics that specmon reads or emulates, each written once here.

Each constant is the exposition name (counters end in `_total`) with the SGLang versions specmon expects it
in (`EXPECTED_IN`): from `since` (the oldest shipped table that has it, or the release specmon knows added it) up to
`gone_in` (the first version without it). tests/preflight/test_metric_names.py checks every name against the shipped
tables (`specmon/sglang/data/metrics-VERSION.json`), and that no other module writes an `sglang:` name.
A histogram's series add `_bucket`, `_sum` and `_count` to its name. specmon's own exported names
(`specmon_*`) are not SGLang's: they are `specmon.textfile`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "sglang:"
"""What every SGLang metric name starts with (`{__name__=~"sglang:.+"}` selects them all)."""


@dataclass(frozen=True)
class Versions:
    """The SGLang versions that export a metric: `since` and later, up to (not including) `gone_in`."""

    since: str
    gone_in: str | None = None


EXPECTED_IN: dict[str, Versions] = {}
"""Every name below, with the versions specmon expects it in."""


def _name(name: str, since: str, gone_in: str | None = None) -> str:
    EXPECTED_IN[name] = Versions(since, gone_in)
    return name


# The tokenizer's counters and histograms (node 0 only, summed over `is_streaming` and the like).
PROMPT_TOKENS_TOTAL = _name("sglang:prompt_tokens_total", "0.4.6.post5")
GENERATION_TOKENS_TOTAL = _name("sglang:generation_tokens_total", "0.4.6.post5")
CACHED_TOKENS_TOTAL = _name("sglang:cached_tokens_total", "0.4.6.post5")
NUM_REQUESTS_TOTAL = _name("sglang:num_requests_total", "0.4.6.post5")
SPEC_VERIFY_CALLS_TOTAL = _name("sglang:spec_verify_calls_total", "0.5.16")
TIME_TO_FIRST_TOKEN_SECONDS = _name("sglang:time_to_first_token_seconds", "0.4.6.post5")
INTER_TOKEN_LATENCY_SECONDS = _name("sglang:inter_token_latency_seconds", "0.4.6.post5")
E2E_REQUEST_LATENCY_SECONDS = _name("sglang:e2e_request_latency_seconds", "0.4.6.post5")
PROMPT_TOKENS_HISTOGRAM = _name("sglang:prompt_tokens_histogram", "0.4.6.post5")
UNCACHED_PROMPT_TOKENS_HISTOGRAM = _name("sglang:uncached_prompt_tokens_histogram", "0.5.16")
GENERATION_TOKENS_HISTOGRAM = _name("sglang:generation_tokens_histogram", "0.4.6.post5")

# The tokenizer's startup durations, one per `phase` label.
STARTUP_TIME_SECONDS = _name("sglang:startup_time_seconds", "0.5.17")
STARTUP_CUDA_GRAPH_TIME_SECONDS = _name("sglang:startup_cuda_graph_time_seconds", "0.5.17")

# The scheduler's counters (by `mode`) and histograms, repeated by every TP/PP/EP rank.
REALTIME_TOKENS_TOTAL = _name("sglang:realtime_tokens_total", "0.5.9")
CUDA_GRAPH_PASSES_TOTAL = _name("sglang:cuda_graph_passes_total", "0.5.9")
QUEUE_TIME_SECONDS = _name("sglang:queue_time_seconds", "0.5.9")
PER_STAGE_REQ_LATENCY_SECONDS = _name("sglang:per_stage_req_latency_seconds", "0.5.9")

# The scheduler's constants (set once at startup, on every rank).
MAX_TOTAL_NUM_TOKENS = _name("sglang:max_total_num_tokens", "0.5.9")
ENGINE_STARTUP_TIME = _name("sglang:engine_startup_time", "0.5.9", gone_in="0.5.23")
ENGINE_LOAD_WEIGHTS_TIME = _name("sglang:engine_load_weights_time", "0.5.9", gone_in="0.5.23")
PAGE_SIZE = _name("sglang:page_size", "0.5.16")
NUM_PAGES = _name("sglang:num_pages", "0.5.16")
CONTEXT_LEN = _name("sglang:context_len", "0.5.16")
STARTUP_AVAILABLE_GPU_MEMORY_GB = _name("sglang:startup_available_gpu_memory_gb", "0.5.16")

# The scheduler's gauges, set at every stats report.
NUM_RUNNING_REQS = _name("sglang:num_running_reqs", "0.4.6.post5")
NUM_QUEUE_REQS = _name("sglang:num_queue_reqs", "0.4.6.post5")
NUM_GRAMMAR_QUEUE_REQS = _name("sglang:num_grammar_queue_reqs", "0.4.6.post5")
GEN_THROUGHPUT = _name("sglang:gen_throughput", "0.4.6.post5")
CACHE_HIT_RATE = _name("sglang:cache_hit_rate", "0.4.6.post5")
DECODE_SUM_SEQ_LENS = _name("sglang:decode_sum_seq_lens", "0.5.9")
TOKEN_USAGE = _name("sglang:token_usage", "0.4.6.post5")
FULL_TOKEN_USAGE = _name("sglang:full_token_usage", "0.5.16")
SWA_TOKEN_USAGE = _name("sglang:swa_token_usage", "0.5.9")
MAMBA_USAGE = _name("sglang:mamba_usage", "0.5.9")
NUM_USED_TOKENS = _name("sglang:num_used_tokens", "0.4.6.post5")
KV_AVAILABLE_TOKENS = _name("sglang:kv_available_tokens", "0.5.16")
KV_EVICTABLE_TOKENS = _name("sglang:kv_evictable_tokens", "0.5.16")
KV_USED_TOKENS = _name("sglang:kv_used_tokens", "0.5.16")
SWA_AVAILABLE_TOKENS = _name("sglang:swa_available_tokens", "0.5.16")
SWA_EVICTABLE_TOKENS = _name("sglang:swa_evictable_tokens", "0.5.16")
SWA_USED_TOKENS = _name("sglang:swa_used_tokens", "0.5.16")
MAMBA_AVAILABLE_TOKENS = _name("sglang:mamba_available_tokens", "0.5.16")
MAMBA_EVICTABLE_TOKENS = _name("sglang:mamba_evictable_tokens", "0.5.16")
MAMBA_USED_TOKENS = _name("sglang:mamba_used_tokens", "0.5.16")
SPEC_ACCEPT_LENGTH = _name("sglang:spec_accept_length", "0.4.6.post5")
SPEC_ACCEPT_RATE = _name("sglang:spec_accept_rate", "0.5.9")
SPEC_CAP_LENGTH = _name("sglang:spec_cap_length", "0.5.16")
SPEC_BLOCK_ACCEPT_LENGTH = _name("sglang:spec_block_accept_length", "0.5.16")
SPEC_NUM_STEPS = _name("sglang:spec_num_steps", "0.5.16")
SPEC_NUM_DRAFT_TOKENS = _name("sglang:spec_num_draft_tokens", "0.5.16")
NUM_RETRACTED_REQS = _name("sglang:num_retracted_reqs", "0.5.9")
NUM_PAUSED_REQS = _name("sglang:num_paused_reqs", "0.5.9")
NUM_PREFILL_BOOTSTRAP_QUEUE_REQS = _name("sglang:num_prefill_bootstrap_queue_reqs", "0.5.16")
NUM_PREFILL_INFLIGHT_QUEUE_REQS = _name("sglang:num_prefill_inflight_queue_reqs", "0.5.9")
NUM_DECODE_PREALLOC_QUEUE_REQS = _name("sglang:num_decode_prealloc_queue_reqs", "0.4.6.post5")
NUM_DECODE_TRANSFER_QUEUE_REQS = _name("sglang:num_decode_transfer_queue_reqs", "0.4.6.post5")
PENDING_PREALLOC_TOKEN_USAGE = _name("sglang:pending_prealloc_token_usage", "0.5.9")
UTILIZATION = _name("sglang:utilization", "0.5.9")
FWD_OCCUPANCY = _name("sglang:fwd_occupancy", "0.5.16")
NEW_TOKEN_RATIO = _name("sglang:new_token_ratio", "0.5.9")
IS_CUDA_GRAPH = _name("sglang:is_cuda_graph", "0.5.9")
NUM_UNIQUE_RUNNING_ROUTING_KEYS = _name("sglang:num_unique_running_routing_keys", "0.5.9")
ROUTING_KEY_RUNNING_REQ_COUNT = _name("sglang:routing_key_running_req_count", "0.5.9")  # (gt, le] buckets
ROUTING_KEY_ALL_REQ_COUNT = _name("sglang:routing_key_all_req_count", "0.5.9")

# The HTTP middleware's and the CPU monitor's (node 0).
HTTP_REQUESTS_TOTAL = _name("sglang:http_requests_total", "0.5.9")
HTTP_RESPONSES_TOTAL = _name("sglang:http_responses_total", "0.5.9")
HTTP_REQUESTS_ACTIVE = _name("sglang:http_requests_active", "0.5.9")
ROUTING_KEYS_ACTIVE = _name("sglang:routing_keys_active", "0.5.9")
PROCESS_CPU_SECONDS_TOTAL = _name("sglang:process_cpu_seconds_total", "0.5.9")
