"""Line formats of SGLang server logs: prefixes, milestone and progress-bar patterns, known flags.

Pure functions and compiled patterns only; the tracker decides what the matches mean.
"""

from __future__ import annotations

import difflib
import re
from datetime import datetime

# --- Prefixes -------------------------------------------------------------------------------------------

# `[2025-03-08 12:29:04 TP0] msg`, `[... DP0 TP0 EP0]`, `[... gpu_id=0]`, optional milliseconds.
_SGLANG_PREFIX = re.compile(
    r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d{1,6})?)((?: (?:[A-Z][A-Z_]*\d+|gpu_id=\d+))*)\] ?"
)
# `[gpu_id=0] msg` or `[TP0] msg` (no timestamp)
_TAG_ONLY_PREFIX = re.compile(r"\[((?:gpu_id=\d+|[A-Z][A-Z_]*\d+)(?: (?:gpu_id=\d+|[A-Z][A-Z_]*\d+))*)\] ?")
# uvicorn `INFO:     msg` and the newer `LEVEL file.py:N: msg`, both after the `[ts] ` prefix
_LEVEL_AFTER_TS = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL|TRACE)(?::\s+| [\w./-]+\.py:\d+: )")
# Rust tracing: `2025-11-05T01:56:54.281615Z  INFO module.fn: msg`
_RUST_TRACING = re.compile(
    r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?)Z?\s+(TRACE|DEBUG|INFO|WARN|ERROR)\s+(?:[\w:.<>{}-]+: )?"
)
# Python logging default: `2026-04-14 16:08:51,862 - CUTE_DSL - WARNING - msg`
_PYLOG_DEFAULT = re.compile(
    r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3} - [^\n]*? - (DEBUG|INFO|WARNING|ERROR|CRITICAL) - "
)
# vLLM style `INFO 03-07 12:29:02 __init__.py:190] msg` (its date is not trusted) and `WARNING:logger:msg`
_VLLM_STYLE = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)? [\w./-]+:\d+\] ")
_BASIC_CONFIG = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:")
# docker-compose `llm0-1  | ` (also with an ANSI-free colourless name)
_COMPOSE = re.compile(r"[\w.-]{1,64}\s*\| ")

_LEVEL_HEADS = frozenset(("DEBU", "INFO", "WARN", "ERRO", "CRIT", "TRAC"))
_LEVEL_NAMES = {"WARN": "WARNING"}

Prefix = tuple[str | None, str, str | None, str]


def parse_prefix(line: str) -> Prefix:
    """Split a log line into (timestamp text or None, rank tags, level or None, message).

    The timestamp text is returned only for formats whose clock SGLang owns (`[ts]`, Rust tracing); rank tags
    are the bracket tags such as " TP0" or " DP0 TP0 EP0" ("" when absent).
    """
    head = line[:1]
    if head == "[":
        m = _SGLANG_PREFIX.match(line)
        if m is not None:
            msg = line[m.end() :]
            if msg[:4] in _LEVEL_HEADS:
                lm = _LEVEL_AFTER_TS.match(msg)
                if lm is not None:
                    return m.group(1), m.group(2), lm.group(1), msg[lm.end() :]
            return m.group(1), m.group(2), None, msg
        m = _TAG_ONLY_PREFIX.match(line)
        if m is not None:
            return None, " " + m.group(1), None, line[m.end() :]
        return None, "", None, line
    if head.isdigit():
        m = _RUST_TRACING.match(line)
        if m is not None:
            return m.group(1), "", _LEVEL_NAMES.get(m.group(2), m.group(2)), line[m.end() :]
        m = _PYLOG_DEFAULT.match(line)
        if m is not None:
            return None, "", m.group(1), line[m.end() :]
        return None, "", None, line
    if line[:4] in _LEVEL_HEADS:
        m = _VLLM_STYLE.match(line) or _BASIC_CONFIG.match(line)
        if m is not None:
            return None, "", m.group(1), line[m.end() :]
        return None, "", None, line
    if head and not head.isspace() and "| " in line[:80]:
        m = _COMPOSE.match(line)
        if m is not None:
            rest = line[m.end() :]
            if rest[:1] != "|":
                return parse_prefix(rest)
    return None, "", None, line


def parse_timestamp(text: str) -> datetime | None:
    """Parse a prefix timestamp (`2025-03-08 12:29:04`, with optional fraction, or ISO `T` form)."""
    try:
        return datetime.fromisoformat(text.replace(",", "."))
    except ValueError:
        return None


def is_rank_zero(tags: str) -> bool:
    """True when every rank number in the tags is 0 (or there are no tags: a single-GPU server)."""
    return all(ch == "0" for ch in tags if ch.isdigit())


# --- Milestones (applied to the message after the prefix) ------------------------------------------------

FLOAT = r"(-?\d+(?:\.\d+)?)"
AVAIL_MEM = re.compile(r"avail(?:able)?[ _](?:gpu_)?mem(?:ory)?[=:] ?" + FLOAT + r" ?GB")
MEM_USAGE = re.compile(r"mem usage[=:] ?" + FLOAT + r" ?GB")
ELAPSED = re.compile(r"(?:Time elapsed: |elapsed=)" + FLOAT + r" ?s")
WEIGHT_TYPE = re.compile(r"type=([\w.]+)")
WEIGHT_DTYPE = re.compile(r"dtype=([\w.]+)")
KV_ALLOC = re.compile(
    r"KV Cache is allocated\.(?: dtype: ([\w.]+),)? #tokens: (\d+), "
    r"(?:K size: " + FLOAT + r" GB, V size: " + FLOAT + r" GB|KV size: " + FLOAT + r" GB)"
)
MAX_TOTAL = re.compile(r"max_total_num_tokens=(\d+)")
# Any capture line: `Capture cuda graph begin.`, `Capture target verify CUDA graph end.`, `Capture draft extend
# cuda graph begin.`, `Capture piecewise CUDA graph begin.`, `Capture Frozen-KV MTP draft cuda graph begin.`
CAPTURE_LINE = re.compile(
    r"Capture (?P<what>[\w -]*?)(?:cuda|CUDA|cpu|CPU|npu|NPU) graph(?: \(step \d+\))? (?P<edge>begin|end)\b"
)
# `Capture cuda graph bs [1, 2, 4]` (decode batch sizes) vs `Capture cuda graph num tokens [...]` (prefill)
CAPTURE_LIST = re.compile(r"Capture (?:cuda|CUDA|cpu|CPU|npu|NPU) graph (bs|num tokens) \[([\d, ]*)\]")
BS_IN_LINE = re.compile(r"\b(bs|num_tokens)=\[([\d, ]*)\]")
DRAFT_MODEL_TYPE = re.compile(r"Eagle|NextN|MTP|DFlash|Draft|Medusa|Dspark", re.IGNORECASE)
SPEC_ALGORITHM = re.compile(r"speculative_algorithm['\"]?[=:] ?['\"]([\w-]+)['\"]")

# --- Progress bars --------------------------------------------------------------------------------------

# The counter and the `[elapsed<remaining, rate]` block of any tqdm bar.
TQDM_COUNTER = re.compile(
    r"(\d+)%\|[^|]*\| *(\d+)/(\d+)(?: \[([\d:]+)(?:<([\d:?]+))?(?:, *[^\]]*)?\])?"
    r"|(\d+)% Completed \| (\d+)/(\d+)(?: \[([\d:]+)(?:<([\d:?]+))?(?:, *[^\]]*)?\])?"
)
CAPTURE_DESC = re.compile(
    r"Capturing (?:batches \((?:bs=(\d+) )?|(num tokens|prefill shape) \(num_tokens=(\d+) )avail_mem=" + FLOAT
)
WEIGHT_DESC = re.compile(r"(?:checkpoint shards|loading shards)\s*:")


def clock_seconds(text: str | None) -> float | None:
    """tqdm's `MM:SS` / `H:MM:SS` as seconds."""
    if not text or "?" in text:
        return None
    total = 0
    for part in text.split(":"):
        if not part.isdigit():
            return None
        total = total * 60 + int(part)
    return float(total)


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.replace(" ", "").split(",") if x.isdigit()][:4096]


# --- Errors ---------------------------------------------------------------------------------------------

# The line that ends a traceback: `KeyError: 'x'`, `torch.OutOfMemoryError: CUDA out of memory...`,
# `AssertionError`, `Exception: Capture cuda graph failed: ...`.
EXCEPTION_LINE = re.compile(r"((?:[A-Za-z_]\w*\.)*\w*(?:Error|Exception|Interrupt|Exit))(?:: ?(.*))?$")
ARGPARSE_ERROR = re.compile(r"(?:usage: )?[\w.\- ]{1,60}: error: (.*)$")
BIND_PORT = re.compile(r"address \('?([^',]*)'?, (\d+)\)")
# `mem_fraction_static=0.85` (ServerArgs repr, error text) or `'mem_fraction_static': 0.85` (0.5.23's dict)
MEM_FRACTION = re.compile(r"mem_fraction_static'?[=:] ?([\d.]+)")
KILL_EVIDENCE = re.compile(r"^Killed\s*$|SIGKILL|signal 9\b|exit code:? -9\b|Received sigquit", re.IGNORECASE)

# --- Flags ----------------------------------------------------------------------------------------------

# Flags that people guess (other servers' names) mapped to SGLang's.
FLAG_ALIASES: dict[str, str] = {
    "--num-speculative-tokens": "--speculative-num-draft-tokens",
    "--speculative-model": "--speculative-draft-model-path",
    "--draft-model": "--speculative-draft-model-path",
    "--speculative-draft-model": "--speculative-draft-model-path",
    "--num-draft-tokens": "--speculative-num-draft-tokens",
    "--speculative-num-tokens": "--speculative-num-draft-tokens",
    "--num-speculative-steps": "--speculative-num-steps",
    "--speculative-topk": "--speculative-eagle-topk",
    "--gpu-memory-utilization": "--mem-fraction-static",
    "--max-model-len": "--context-length",
    "--max-num-seqs": "--max-running-requests",
    "--served-model": "--served-model-name",
    "--model": "--model-path",
}

# Every flag of `sglang serve` 0.5.16 (from its own usage text) plus older ones still met in the wild.
KNOWN_FLAGS: frozenset[str] = frozenset(
    (
        "--abort-on-priority-when-disabled", "--admin-api-key", "--allow-auto-truncate", "--api-key",
        "--asr-max-buffer-seconds", "--asr-max-concurrent-sessions", "--attention-backend", "--attn-cp-size",
        "--base-gpu-id", "--batch-notify-size", "--bf16-gemm-backend", "--bucket-e2e-request-latency",
        "--bucket-inter-token-latency", "--bucket-time-to-first-token", "--chat-template",
        "--checkpoint-engine-wait-weights-before-ready", "--chunked-prefill-size",
        "--collect-tokens-histogram", "--completion-template", "--config",
        "--constrained-json-disable-any-whitespace", "--constrained-json-whitespace-pattern",
        "--context-length", "--cp-strategy", "--cpu-offload-gb", "--crash-dump-folder",
        "--cuda-graph-backend-decode", "--cuda-graph-backend-prefill", "--cuda-graph-bs",
        "--cuda-graph-bs-decode", "--cuda-graph-bs-prefill", "--cuda-graph-config", "--cuda-graph-max-bs",
        "--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill", "--cuda-graph-tc-compiler",
        "--custom-weight-loader", "--dcp-size", "--debug-cuda-graph", "--debug-tensor-dump-input-file",
        "--debug-tensor-dump-layers", "--debug-tensor-dump-output-folder", "--decode-attention-backend",
        "--decode-log-interval", "--decoupled-spec-bind-endpoint", "--decoupled-spec-connect-endpoints",
        "--decoupled-spec-rank", "--decoupled-spec-role", "--decrypted-config-file",
        "--decrypted-draft-config-file", "--deepep-config", "--deepep-dispatcher-output-dtype",
        "--deepep-mode", "--default-chat-template-kwargs", "--default-priority-value",
        "--delete-ckpt-after-loading", "--detokenizer-worker-num", "--device", "--disable-attn-tp-gather",
        "--disable-chunked-prefix-cache", "--disable-cuda-graph", "--disable-cuda-graph-padding",
        "--disable-custom-all-reduce", "--disable-decode-cuda-graph", "--disable-fast-image-processor",
        "--disable-flashinfer-autotune", "--disable-flashinfer-cutlass-moe-fp4-allgather",
        "--disable-hybrid-swa-memory", "--disable-outlines-disk-cache", "--disable-overlap-schedule",
        "--disable-piecewise-cuda-graph", "--disable-prefill-cuda-graph", "--disable-priority-preemption",
        "--disable-radix-cache", "--disable-shared-experts-fusion", "--disable-tokenizer-batch-decode",
        "--disaggregation-bootstrap-port", "--disaggregation-decode-enable-offload-kvcache",
        "--disaggregation-decode-enable-radix-cache", "--disaggregation-decode-extra-slots",
        "--disaggregation-decode-polling-interval", "--disaggregation-ib-device", "--disaggregation-mode",
        "--disaggregation-transfer-backend", "--dist-init-addr", "--dist-timeout", "--dllm-algorithm",
        "--dllm-algorithm-config", "--dllm-fdfo", "--download-dir", "--dp", "--dp-size",
        "--dsa-decode-backend", "--dsa-paged-mqa-logits-backend", "--dsa-prefill-backend",
        "--dsa-prefill-cp-mode", "--dsa-topk-backend", "--dtype", "--dynamic-batch-tokenizer-batch-size",
        "--dynamic-batch-tokenizer-batch-timeout", "--elastic-ep-backend", "--elastic-ep-initial-size",
        "--elastic-ep-join-mode", "--elastic-ep-join-rank-offset", "--elastic-ep-rejoin",
        "--elastic-ep-scale-timeout", "--enable-adaptive-dispatch-to-encoder",
        "--enable-aiter-allreduce-fusion", "--enable-attn-tp-input-scattered",
        "--enable-breakable-cuda-graph", "--enable-broadcast-mm-inputs-process", "--enable-cache-report",
        "--enable-cudagraph-gc", "--enable-custom-logit-processor", "--enable-deepseek-v4-fp4-indexer",
        "--enable-deterministic-inference", "--enable-dp-attention",
        "--enable-dp-attention-local-control-broadcast", "--enable-dp-lm-head",
        "--enable-draft-weights-cpu-backup", "--enable-dsa-cache-layer-split",
        "--enable-dsa-prefill-context-parallel", "--enable-dynamic-batch-tokenizer",
        "--enable-dynamic-chunking", "--enable-elastic-expert-backup", "--enable-eplb",
        "--enable-expert-distribution-metrics", "--enable-flashinfer-allreduce-fusion", "--enable-flexkv",
        "--enable-forward-pass-metrics", "--enable-fp32-lm-head", "--enable-fused-moe-sum-all-reduce",
        "--enable-fused-qk-norm-rope", "--enable-gdn-replayssm-spec", "--enable-hierarchical-cache",
        "--enable-hisparse", "--enable-http2", "--enable-int8-mamba-checkpoint",
        "--enable-layerwise-nvtx-marker", "--enable-linear-replayssm", "--enable-lmcache", "--enable-lora",
        "--enable-lora-overlap-loading", "--enable-mamba-cache-stochastic-rounding", "--enable-memory-saver",
        "--enable-metrics", "--enable-metrics-for-all-schedulers", "--enable-mfu-metrics", "--enable-mis",
        "--enable-mixed-chunk", "--enable-mm-global-cache", "--enable-mscclpp", "--enable-multi-layer-eagle",
        "--enable-multimodal", "--enable-nccl-nvls", "--enable-nsa-prefill-context-parallel",
        "--enable-p2p-check", "--enable-page-major-kv-layout", "--enable-pdmux",
        "--enable-precise-embedding-interpolation", "--enable-prefill-context-parallel",
        "--enable-prefill-cp", "--enable-prefill-delayer", "--enable-prefix-mm-cache",
        "--enable-priority-scheduling", "--enable-profile-cuda-graph", "--enable-quant-communications",
        "--enable-request-time-stats-logging", "--enable-return-hidden-states",
        "--enable-return-indexer-topk", "--enable-return-routed-experts", "--enable-scattered-sconv",
        "--enable-session-radix-cache", "--enable-single-batch-overlap", "--enable-ssl-refresh",
        "--enable-streaming-session", "--enable-strict-thinking", "--enable-symm-mem", "--enable-tf32-matmul",
        "--enable-tokenizer-batch-encode", "--enable-torch-compile", "--enable-torch-compile-debug-mode",
        "--enable-torch-symm-mem", "--enable-trace", "--enable-two-batch-overlap", "--enable-unified-memory",
        "--enable-waterfill", "--enable-weights-cpu-backup", "--encoder-bootstrap-port", "--encoder-only",
        "--encoder-register-urls", "--encoder-transfer-backend", "--encoder-urls",
        "--enforce-disable-flashinfer-allreduce-fusion", "--enforce-piecewise-cuda-graph",
        "--enforce-shared-experts-fusion", "--engine-info-bootstrap-port", "--ep-dispatch-algorithm",
        "--ep-num-redundant-experts", "--ep-size", "--eplb-algorithm",
        "--eplb-min-rebalancing-utilization-threshold", "--eplb-rebalance-layers-per-chunk",
        "--eplb-rebalance-num-iterations", "--expert-distribution-recorder-buffer-size",
        "--expert-distribution-recorder-mode", "--experts-shared-outer-loras", "--export-metrics-to-file",
        "--export-metrics-to-file-dir", "--extra-metric-labels", "--fastapi-root-path", "--file-storage-path",
        "--flashinfer-allreduce-fusion-backend", "--flashinfer-mla-disable-ragged",
        "--flashinfer-mxfp4-moe-precision", "--flexkv-config-file", "--forward-hooks", "--fp4-gemm-backend",
        "--fp8-gemm-backend", "--fuseep-mode", "--gc-threshold", "--gc-warning-threshold-secs",
        "--generation-tokens-buckets", "--gpu-id-step", "--grammar-backend", "--grpc-mode", "--grpc-port",
        "--hf-chat-template-name", "--hicache-io-backend", "--hicache-mem-layout", "--hicache-ratio",
        "--hicache-size", "--hicache-storage-backend", "--hicache-storage-backend-extra-config",
        "--hicache-storage-prefetch-policy", "--hicache-write-policy", "--hisparse-config", "--host",
        "--incremental-streaming-output", "--init-expert-location", "--int8-mamba-ckpt-size",
        "--is-embedding", "--json-model-override-args", "--keep-mm-feature-on-device", "--kt-cpuinfer",
        "--kt-max-deferred-experts-per-token", "--kt-method", "--kt-num-gpu-experts", "--kt-threadpool-count",
        "--kt-weight-path", "--kv-cache-dtype", "--kv-canary", "--kv-canary-real-data",
        "--kv-canary-sweep-interval", "--kv-events-config", "--language-only", "--limit-mm-data-per-request",
        "--linear-attn-backend", "--linear-attn-decode-backend", "--linear-attn-prefill-backend",
        "--linear-replayssm-cache-len", "--lmcache-config-file", "--load-balance-method", "--load-format",
        "--load-snapshot-publish-interval", "--log-level", "--log-level-http", "--log-requests",
        "--log-requests-format", "--log-requests-level", "--log-requests-target", "--lora-backend",
        "--lora-drain-wait-threshold", "--lora-eviction-policy", "--lora-paths", "--lora-strict-loading",
        "--lora-target-modules", "--lora-use-virtual-experts", "--mamba-backend",
        "--mamba-cache-philox-rounds", "--mamba-full-memory-ratio", "--mamba-radix-cache-strategy",
        "--mamba-scheduler-strategy", "--mamba-ssm-dtype", "--mamba-track-interval", "--max-ep-size",
        "--max-loaded-loras", "--max-lora-chunk-size", "--max-lora-rank", "--max-loras-per-batch",
        "--max-mamba-cache-size", "--max-prefill-tokens", "--max-queued-requests", "--max-running-requests",
        "--max-total-tokens", "--mem-fraction-static", "--metrics-host", "--metrics-port",
        "--min-free-slots-delay", "--mm-attention-backend", "--mm-enable-dp-encoder",
        "--mm-feature-transport", "--mm-process-config", "--model-checksum", "--model-config-parser",
        "--model-impl", "--model-loader-extra-config", "--model-path", "--modelexpress-config",
        "--modelopt-checkpoint-restore-path", "--modelopt-checkpoint-save-path", "--modelopt-export-path",
        "--modelopt-quant", "--moe-a2a-backend", "--moe-dense-tp-size", "--moe-dp-size",
        "--moe-runner-backend", "--mooncake-ib-device", "--msprobe-dump-config", "--nccl-port", "--nnodes",
        "--no-dllm-fdfo", "--no-experts-shared-outer-loras", "--no-lora-strict-loading", "--node-rank",
        "--nsa-decode-backend", "--nsa-prefill-backend", "--nsa-prefill-cp-mode",
        "--num-continuous-decode-steps", "--num-reserved-decode-tokens", "--numa-node",
        "--offload-group-size", "--offload-mode", "--offload-num-in-group", "--offload-prefetch-step",
        "--optimistic-prefill-attempts", "--otlp-traces-endpoint", "--page-size", "--pdmux-config-path",
        "--piecewise-cuda-graph-compiler", "--piecewise-cuda-graph-max-tokens",
        "--piecewise-cuda-graph-tokens", "--port", "--pp-async-batch-depth", "--pp-max-micro-batch-size",
        "--pp-size", "--pre-warm-nccl", "--preferred-sampling-params", "--prefill-attention-backend",
        "--prefill-cp-mode", "--prefill-delayer-forward-passes-buckets", "--prefill-delayer-max-delay-ms",
        "--prefill-delayer-max-delay-passes", "--prefill-delayer-queue-min-ratio",
        "--prefill-delayer-token-usage-low-watermark", "--prefill-delayer-wait-seconds-buckets",
        "--prefill-max-requests", "--prefill-only-disable-kv-cache", "--prefill-round-robin-balance",
        "--priority-scheduling-preemption-threshold", "--prompt-tokens-buckets", "--quantization",
        "--quantization-param-path", "--quantize-and-serve", "--radix-cache-backend",
        "--radix-eviction-policy", "--random-seed", "--reasoning-parser",
        "--remote-instance-weight-loader-backend", "--remote-instance-weight-loader-seed-instance-ip",
        "--remote-instance-weight-loader-seed-instance-service-port",
        "--remote-instance-weight-loader-send-weights-group-ports",
        "--remote-instance-weight-loader-start-seed-via-transfer-engine", "--retraction-policy", "--revision",
        "--rl-on-policy-target", "--rl-quant-profile", "--sampling-backend", "--sampling-defaults",
        "--schedule-conservativeness", "--schedule-low-priority-values-first", "--schedule-policy",
        "--scheduler-recv-interval", "--served-model-name", "--servicer-impl", "--show-time-cost",
        "--sidecar", "--sidecar-args", "--skip-server-warmup", "--skip-tokenizer-init", "--sleep-on-idle",
        "--sm-group-num", "--smg-grpc-mode", "--smg-http-sidecar-port", "--soft-watchdog-timeout",
        "--spec-trace-dir", "--speculative-accept-threshold-acc", "--speculative-accept-threshold-single",
        "--speculative-adaptive", "--speculative-adaptive-config", "--speculative-algorithm",
        "--speculative-attention-mode", "--speculative-dflash-block-size",
        "--speculative-draft-attention-backend", "--speculative-draft-load-format",
        "--speculative-draft-model-path", "--speculative-draft-model-quantization",
        "--speculative-draft-model-revision", "--speculative-draft-window-size",
        "--speculative-dspark-align-verify-tokens-to-graph-tier", "--speculative-dspark-block-size",
        "--speculative-dspark-confidence-sts-path", "--speculative-dspark-sps-table-path",
        "--speculative-eagle-topk", "--speculative-moe-a2a-backend", "--speculative-moe-runner-backend",
        "--speculative-ngram-capacity", "--speculative-ngram-external-corpus-max-tokens",
        "--speculative-ngram-external-corpus-path", "--speculative-ngram-external-sam-budget",
        "--speculative-ngram-match-type", "--speculative-ngram-max-bfs-breadth",
        "--speculative-ngram-max-trie-depth", "--speculative-ngram-min-bfs-breadth",
        "--speculative-num-draft-tokens", "--speculative-num-steps", "--speculative-skip-dp-mlp-sync",
        "--speculative-token-map", "--speculative-use-rejection-sampling", "--ssl-ca-certs", "--ssl-certfile",
        "--ssl-keyfile", "--ssl-keyfile-password", "--stream-interval", "--stream-output",
        "--stream-response-default-include-usage", "--strip-thinking-cache", "--swa-full-tokens-ratio",
        "--tbo-token-distribution-threshold", "--tokenizer-backend",
        "--tokenizer-metrics-allowed-custom-labels", "--tokenizer-metrics-custom-labels-header",
        "--tokenizer-mode", "--tokenizer-path", "--tokenizer-worker-num", "--tool-call-parser",
        "--tool-server", "--torch-compile-max-bs", "--torchao-config", "--tp", "--tp-size", "--trace-modules",
        "--triton-attention-num-kv-splits", "--triton-attention-reduce-in-fp32",
        "--triton-attention-split-tile-size", "--trust-remote-code", "--use-ray",
        "--uvicorn-access-log-exclude-prefixes", "--warmups", "--watchdog-timeout",
        "--weight-loader-disable-mmap", "--weight-loader-drop-cache-after-load",
        "--weight-loader-prefetch-checkpoints", "--weight-loader-prefetch-num-threads", "--weight-version",
    )
)


def suggest_flag(flag: str) -> str | None:
    """The SGLang flag someone most likely meant by an unrecognised `flag`, or None."""
    if flag in KNOWN_FLAGS:
        return None
    if flag in FLAG_ALIASES:
        return FLAG_ALIASES[flag]
    hyphenated = "--" + flag.lstrip("-").replace("_", "-").lower()
    if hyphenated in KNOWN_FLAGS:
        return hyphenated
    if hyphenated in FLAG_ALIASES:
        return FLAG_ALIASES[hyphenated]
    close = difflib.get_close_matches(hyphenated, KNOWN_FLAGS, n=1, cutoff=0.75)
    return close[0] if close else None
