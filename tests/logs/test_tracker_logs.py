"""StartupTracker on whole logs: every real log of the corpus against its hand-read INDEX.md expectations,
and synthetic logs built from the exact strings of docs/sglang-facts.md for what the corpus lacks.

Logs are read the way the app reads them: bytes through the follower's splitter into lines and frames.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from specmon.logs.follower import read_items
from specmon.logs.model import (
    CaptureProgressed,
    PhaseChanged,
    ServerBecameReady,
    ServerStopped,
    StartupFailed,
    StartupState,
)
from specmon.logs.tracker import StartupTracker

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
SYNTHETIC = LOGS / "synthetic"


def track(path: Path, chunk_bytes: int = 65536) -> tuple[StartupState, list]:
    tracker = StartupTracker()
    events: list = []
    with path.open("rb") as stream:
        for items in read_items(stream, chunk_bytes=chunk_bytes):
            tracker.feed_items(items)
            events.extend(tracker.drain_events())
    return tracker.state, events


def corpus(prefix: str) -> Path:
    (path,) = LOGS.glob(prefix + "*.log")
    return path


def names(state: StartupState) -> list[str]:
    return [phase.name for phase in state.phases]


def graphs(state: StartupState) -> dict[tuple[str, str], object]:
    return {(c.graph, c.role): c for c in state.captures}


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text)


def memory(state: StartupState) -> dict[str, float]:
    return {m.step: m.avail_gb for m in state.memory}


# --- the real corpus --------------------------------------------------------------------------------------


def test_01_qwq32b_tp4_legacy_ready() -> None:
    state, events = track(corpus("01-"))
    assert state.state == "ready"
    assert names(state) == [
        "server_args", "init_distributed", "load_weights", "kv_cache", "capture", "http_server", "warmup", "ready",
    ]  # fmt: skip
    assert all(p.status == "done" for p in state.phases)
    # the vLLM-style `INFO 03-07 ...` lines carry a different date and are not used for timing
    assert state.first_ts == ts("2025-03-08 12:29:04")
    assert state.ready_at == ts("2025-03-08 12:29:33")
    assert state.ready_after_s == 29.0
    (weights,) = state.weights
    assert (weights.model, weights.type, weights.dtype) == ("target", "Qwen2ForCausalLM", "torch.bfloat16")
    assert (weights.avail_gb, weights.mem_usage_gb) == (6.09, 15.54)
    assert weights.elapsed_s == 8.0  # no elapsed field in 0.4.3: from the begin/end timestamps
    assert (weights.shards_done, weights.shards_total) == (14, 14)
    assert state.kv_pools[0].tokens == 46611 and state.kv_pools[0].k_size_gb == 1.42
    assert len(state.kv_pools) == 1  # four ranks print it; one pool is kept
    assert memory(state)["kv_cache"] == 2.09
    (capture,) = state.captures
    assert (capture.graph, capture.status, capture.done, capture.total) == ("target", "done", 13, 13)
    assert capture.elapsed_s == 7.23  # TP0's end line
    assert (capture.avail_gb, capture.mem_usage_gb) == (0.53, 0.93)  # the old field order
    assert state.max_total_num_tokens == 46611
    assert state.error is None
    assert [e for e in events if isinstance(e, ServerBecameReady)] == [
        ServerBecameReady(at=ts("2025-03-08 12:29:33"), after_s=29.0)
    ]


def test_02_qwen3_tp2_cut_off_while_capturing() -> None:
    state, _ = track(corpus("02-"))
    assert state.state == "starting"
    assert names(state) == ["server_args", "init_distributed", "load_weights", "kv_cache", "capture"]
    assert state.phases[-1].status == "running"
    (weights,) = state.weights
    assert (weights.type, weights.dtype) == ("Qwen3ForCausalLM", "torch.float16")
    assert (weights.elapsed_s, weights.avail_gb, weights.mem_usage_gb) == (24.17, 17.22, 1.5)  # TP0's
    assert (weights.shards_done, weights.shards_total) == (8, 8)
    assert [(k.tokens, k.k_size_gb, k.v_size_gb) for k in state.kv_pools] == [(139814, 5.33, 5.33)]
    assert memory(state)["kv_cache"] == 6.44
    (capture,) = state.captures
    assert capture.batch_sizes == [1]  # max_running_requests=1 capped it
    assert (capture.status, capture.done, capture.total) == ("running", 0, 1)
    assert (capture.current_bs, capture.avail_gb) == (1, 5.89)  # from the last frame (no trailing newline)
    assert state.max_total_num_tokens is None and state.ready_at is None and state.error is None


def test_03_laguna_dflash_0516_ready_then_sigterm_is_stopped_not_failed() -> None:
    state, events = track(corpus("03-"))
    assert state.state == "stopped" and state.error is None
    assert state.speculative_algorithm == "DFLASH"
    assert state.log_family == "new"
    assert names(state) == [
        "server_args", "init_distributed", "load_weights", "load_draft_weights", "kv_cache", "capture_prefill",
        "capture", "capture_draft", "http_server", "warmup", "ready", "shutdown",
    ]  # fmt: skip
    assert state.ready_at == ts("2026-08-01 23:43:47")
    assert state.ready_after_s == 369.0  # from the first timestamp (23:37:38, a pre-launch warning)
    assert state.ready_after_server_args_s == 367.0  # INDEX.md's figure: from the server_args line (23:37:40)
    assert state.stopped_at == ts("2026-08-02 00:17:43")
    target, draft = state.weights
    assert (target.model, target.type, target.elapsed_s) == ("target", "LagunaForCausalLM", 109.33)
    assert (target.avail_gb, target.mem_usage_gb) == (47.8, 67.56)
    assert (target.shards_done, target.shards_total) == (15, 15)  # "Multi-thread loading shards" frames
    assert (draft.model, draft.type, draft.elapsed_s) == ("draft", "DFlashLagunaForCausalLM", 12.25)
    assert (draft.avail_gb, draft.mem_usage_gb) == (46.25, 1.58)
    assert [(k.model, k.tokens, k.k_size_gb) for k in state.kv_pools] == [
        ("target", 148717, 10.21), ("target", 185897, 4.25), ("draft", 185897, 2.13),
    ]  # fmt: skip
    assert memory(state)["kv_cache"] == 17.73 and memory(state)["kv_cache_draft"] == 13.35
    captures = graphs(state)
    prefill = captures[("prefill", "target")]
    assert (prefill.total, prefill.done, prefill.status) == (58, 58, "done")
    assert (prefill.elapsed_s, prefill.mem_usage_gb, prefill.avail_gb) == (216.19, 5.24, 7.27)
    verify = captures[("target", "target")]
    assert verify.label == "target verify" and verify.batch_sizes == [1, 2, 3, 4, 5, 6, 7, 8]
    assert (verify.elapsed_s, verify.mem_usage_gb) == (3.0, 0.6)
    draft_verify = captures[("draft", "draft")]
    assert draft_verify.label == "draft verify" and draft_verify.total == 8
    assert (draft_verify.elapsed_s, draft_verify.mem_usage_gb, draft_verify.avail_gb) == (0.77, 0.45, 6.22)
    assert state.max_total_num_tokens == 185897
    assert not any(isinstance(e, StartupFailed) for e in events)
    assert [type(e) for e in events if isinstance(e, (ServerBecameReady, ServerStopped))] == [
        ServerBecameReady, ServerStopped,
    ]  # fmt: skip


def test_04_laguna_nvfp4_dies_in_prefill_capture_with_only_the_resource_tracker_warning() -> None:
    state, _ = track(corpus("04-"))
    # a SIGKILLed 0.5.16 server leaves one trace: the resource_tracker's leaked-semaphore warning
    assert state.state == "failed"
    assert (state.error.kind, state.error.phase) == ("killed", "capture_prefill")
    assert "leaked semaphore" in state.error.message and "without a word" in state.error.hint
    assert names(state)[-1] == "capture_prefill" and state.phases[-1].status == "failed"
    target, draft = state.weights
    assert (target.elapsed_s, target.avail_gb, target.mem_usage_gb) == (618.01, 22.1, 93.16)
    assert (draft.elapsed_s, draft.avail_gb, draft.mem_usage_gb) == (12.68, 18.98, 2.71)
    assert [k.tokens for k in state.kv_pools] == [26397, 32997, 32997]
    assert memory(state)["kv_cache"] == 13.28 and memory(state)["kv_cache_draft"] == 12.49
    (capture,) = state.captures
    assert (capture.graph, capture.total, capture.done, capture.status) == ("prefill", 58, 0, "failed")
    assert capture.avail_gb == 11.78  # the frame glued to the resource_tracker warning
    assert state.max_total_num_tokens is None


def test_05_laguna_killed_while_loading_weights_at_47_of_49_after_9m32s_of_frames() -> None:
    state, _ = track(corpus("05-"))
    assert state.state == "failed"
    assert (state.error.kind, state.error.phase) == ("killed", "load_weights")
    assert names(state)[-1] == "load_weights"
    (weights,) = state.weights
    assert (weights.status, weights.shards_done, weights.shards_total) == ("failed", 47, 49)
    assert weights.avail_gb == 97.74
    # begin 22:25:31, last timestamp 22:25:35, then only frames up to `47/49 [09:32<00:14]`: 4 s + 572 s
    load = state.phase("load_weights")
    assert load.elapsed_s == 576.0 and load.ended == ts("2026-08-01 22:35:07")
    assert weights.elapsed_s == 576.0


def test_06_eagle_draft_weight_keyerror() -> None:
    state, events = track(corpus("06-"))
    assert state.state == "failed"
    error = state.error
    assert error.kind == "weight_load"
    assert error.message == "KeyError: 'layers.0.self_attn.qkv_proj.weight'"
    assert error.phase == "load_draft_weights"
    assert "--speculative-draft-model-path" in error.hint
    assert state.captures == [] and state.max_total_num_tokens is None and state.ready_at is None
    failures = [e.error.kind for e in events if isinstance(e, StartupFailed)]
    assert failures[-1] == "weight_load"


def test_07_mistral_warmup_502_then_killed() -> None:
    state, _ = track(corpus("07-"))
    assert state.state == "failed" and state.ready_at is None
    assert state.error.kind == "warmup_failed"  # the later `Killed` is less specific
    assert state.error.message == "AssertionError: res=<Response [502]>, res.text=''"
    assert state.error.phase == "warmup"
    assert "proxy" in state.error.hint.lower()
    assert "http_server" in names(state)
    (weights,) = state.weights
    assert (weights.type, weights.avail_gb, weights.mem_usage_gb) == ("MistralForCausalLM", 9.69, None)
    assert memory(state)["kv_cache"] == 2.44
    (capture,) = state.captures
    assert (capture.status, capture.elapsed_s, capture.total) == ("done", 2.19, None)
    assert state.max_total_num_tokens == 56524


def test_09_phi35_traceback_during_capture() -> None:
    state, _ = track(corpus("09-"))
    assert state.state == "failed"
    assert state.error.phase == "capture"
    assert state.error.kind == "capture_failed"  # its frames are cuda_graph_runner.capture; no exception line
    assert memory(state)["kv_cache"] == 8.38
    assert state.captures[0].status == "failed"


def test_10_qwen3_fp8_scheduler_exception_during_capture() -> None:
    state, _ = track(corpus("10-"))
    assert state.state == "failed"
    assert state.error.phase == "capture"
    (weights,) = state.weights
    assert (weights.avail_gb, weights.mem_usage_gb, weights.elapsed_s) == (26.58, 4.19, 49.0)
    assert (weights.shards_done, weights.shards_total) == (2, 2)
    assert [(k.tokens, k.k_size_gb) for k in state.kv_pools] == [(173064, 11.88)]
    assert memory(state)["kv_cache"] == 2.14
    (capture,) = state.captures
    assert capture.batch_sizes == [1, 2, 4, 8] and capture.total == 4
    assert (capture.done, capture.avail_gb, capture.status) == (0, 1.51, "failed")  # 0.4.6-style bar: no bs


def test_13_eagle_draft_capture_failed_shape_mismatch_is_not_oom() -> None:
    state, _ = track(corpus("13-"))
    assert state.state == "failed"
    assert state.error.kind == "capture_failed"
    assert state.error.phase == "capture_draft"
    assert state.error.message.startswith("Exception: Capture cuda graph failed: mat1 and mat2 shapes")
    assert "draft" in state.error.hint


def test_15_dp_attention_prefix_and_complete_capture_progress() -> None:
    state, events = track(corpus("15-"))
    assert state.state == "starting"
    (capture,) = state.captures
    assert (capture.done, capture.total, capture.status) == (6, 6, "done")
    assert capture.batch_sizes == [1, 2, 4, 8, 12, 16]  # from the frames (no bs line in the fragment)
    assert capture.elapsed_s == 59.0  # tqdm's elapsed: there is no end line
    assert capture.avail_gb == 10.17
    progress = [e.capture.done for e in events if isinstance(e, CaptureProgressed)]
    assert progress[-1] == 6 and progress == sorted(progress)


def test_18_capture_seen_from_its_bar_then_uvicorn() -> None:
    state, _ = track(corpus("18-"))
    assert state.state == "starting"
    (capture,) = state.captures
    assert (capture.graph, capture.done, capture.total, capture.status) == ("target", 36, 36, "done")
    assert (capture.elapsed_s, capture.mem_usage_gb, capture.avail_gb) == (34.24, 2.11, 3.11)
    assert state.max_total_num_tokens == 121240
    assert names(state)[-1] == "http_server"


def test_19_docker_compose_prefix_is_stripped() -> None:
    state, _ = track(corpus("19-"))
    assert state.state == "starting"
    (weights,) = state.weights
    assert (weights.type, weights.avail_gb, weights.mem_usage_gb) == ("Gemma3ForConditionalGeneration", 21.49, 17.51)
    assert [(k.tokens, k.k_size_gb) for k in state.kv_pools] == [(22095, 5.23)]
    assert memory(state)["kv_cache"] == 10.63
    (capture,) = state.captures
    assert (capture.status, capture.avail_gb) == ("running", 10.11)
    assert state.first_ts == ts("2025-07-19 23:29:33")


def test_22_tp2_per_bs_progress_with_foreign_lines_between_frames() -> None:
    state, _ = track(corpus("22-"))
    assert state.state == "starting" and state.error is None
    (weights,) = state.weights
    assert (weights.type, weights.elapsed_s) == ("Qwen3_5ForConditionalGeneration", 5.54)  # TP0's, printed last
    assert (weights.avail_gb, weights.mem_usage_gb) == (14.08, 8.85)
    assert [(k.tokens, k.k_size_gb) for k in state.kv_pools] == [(327310, 2.5)]
    assert memory(state)["kv_cache"] == 4.49
    (capture,) = state.captures
    assert capture.batch_sizes == [1, 2, 4, 8, 12, 16, 24]
    assert (capture.done, capture.total, capture.status) == (7, 7, "done")
    assert (capture.elapsed_s, capture.mem_usage_gb, capture.avail_gb) == (4.86, 0.26, 3.79)  # TP0's
    assert state.max_total_num_tokens == 327310
    assert state.ready_at is None


def test_24_unrecognized_underscore_flag() -> None:
    state, _ = track(corpus("24-"))
    assert state.state == "failed"
    assert state.error.kind == "unrecognized_arguments"
    assert state.error.message == "launch_server.py: error: unrecognized arguments: --reasoning_parser kimi_k2"
    assert state.error.phase == "server_args"
    assert state.error.hint == "Not an SGLang flag: use --reasoning-parser instead of --reasoning_parser."


def test_26_warning_level_three_capture_bars_are_target_draft_draft_extend() -> None:
    state, _ = track(corpus("26-"))
    assert state.state == "starting"
    assert [(c.graph, c.role, c.done, c.total, c.status) for c in state.captures] == [
        ("target", "target", 4, 4, "done"),
        ("draft", "draft", 4, 4, "done"),
        ("draft_extend", "draft", 4, 4, "done"),
    ]
    assert all(c.batch_sizes == [1, 2, 3, 4] for c in state.captures)
    assert [(w.model, w.shards_done, w.shards_total) for w in state.weights] == [("target", 2, 2), ("draft", 1, 1)]
    assert names(state) == ["load_weights", "capture", "load_draft_weights", "capture_draft", "capture_draft_extend"]
    assert state.max_total_num_tokens is None and state.ready_at is None


def test_h200_plain_ready_decode_capture_then_sigterm() -> None:
    state, _ = track(corpus("h200-0.5.16-plain"))
    assert state.state == "stopped" and state.error is None
    assert state.ready_at == ts("2026-11-29 10:42:42")
    target = graphs(state)[("target", "target")]
    assert (target.label, target.batch_sizes, target.elapsed_s) == ("target decode", [1, 2, 4, 8], 1.22)
    assert graphs(state)[("prefill", "target")].total == 58
    assert state.max_total_num_tokens == 3626606


def test_h200_unrecognized_flag_after_a_usage_dump() -> None:
    state, _ = track(corpus("h200-0.5.16-unrecognized"))
    assert state.state == "failed"
    assert state.error.kind == "unrecognized_arguments"
    assert state.error.message == "sglang serve: error: unrecognized arguments: --num-speculative-tokens 16"
    assert state.error.hint == "Not an SGLang flag: use --speculative-num-draft-tokens instead of --num-speculative-tokens."
    assert names(state) == ["server_args"]  # the 400 lines of flag names are not phases


def test_h200_speculative_assertion() -> None:
    state, _ = track(corpus("h200-0.5.16-spec-args"))
    assert state.state == "failed"
    assert (state.error.kind, state.error.message, state.error.phase) == (
        "invalid_server_args", "AssertionError", "server_args",
    )  # fmt: skip
    for flag in ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"):
        assert flag in state.error.hint


def test_h200_standalone_all_five_graphs() -> None:
    state, _ = track(corpus("h200-0.5.16-standalone"))
    assert state.state == "stopped" and state.error is None
    assert state.speculative_algorithm == "STANDALONE"
    assert [(c.graph, c.role, c.label, c.total) for c in state.captures] == [
        ("prefill", "target", "target prefill", 58),
        ("target", "target", "target verify", 8),
        ("prefill", "draft", "draft prefill", 58),
        ("draft", "draft", "draft decode", 8),
        ("draft_extend", "draft", "draft extend", 8),
    ]
    assert all(c.status == "done" and c.done == c.total for c in state.captures)
    # the draft is the target's own class here: it is told apart by being the second load
    assert [(w.model, w.type) for w in state.weights] == [("target", "LlamaForCausalLM"), ("draft", "LlamaForCausalLM")]
    assert state.ready_at is not None and state.max_total_num_tokens == 151561


@pytest.mark.parametrize("path", sorted(LOGS.glob("*.log")) + sorted(SYNTHETIC.glob("*.log")), ids=lambda p: p.name)
def test_every_log_gives_the_json_shape_and_chunking_does_not_matter(path: Path) -> None:
    whole, _ = track(path)
    chunked, _ = track(path, chunk_bytes=7)
    data = whole.to_json()
    assert json.loads(json.dumps(data)) == data
    assert chunked.to_json() == data
    assert data["state"] in ("starting", "ready", "failed", "stopped")
    for phase in data["phases"]:
        assert set(phase) == {"name", "status", "started", "ended", "elapsed_s"}
        assert phase["status"] in ("running", "done", "failed")
    for capture in data["captures"]:
        assert {"graph", "status", "done", "total", "batch_sizes", "elapsed_s"} <= set(capture)
        assert capture["graph"] in ("target", "draft", "draft_extend", "prefill")
    for weights in data["weights"]:
        assert {"model", "type", "mem_usage_gb", "avail_gb", "elapsed_s"} <= set(weights)
    assert (data["error"] is None) == (data["state"] != "failed")
    if data["error"] is not None:
        assert set(data["error"]) == {"kind", "message", "phase", "hint"} and data["error"]["hint"]
        assert not data["error"]["message"].startswith("Traceback") or path.name.startswith(("09-", "10-"))


# --- synthetic logs (exact strings from docs/sglang-facts.md) ----------------------------------------------


def test_synthetic_legacy_eagle3_to_ready() -> None:
    state, events = track(SYNTHETIC / "legacy-0.5.3-eagle3-ready.log")
    assert state.state == "ready" and state.log_family == "legacy"
    assert state.speculative_algorithm == "EAGLE3"
    assert names(state) == [
        "server_args", "init_distributed", "load_weights", "kv_cache", "capture", "load_draft_weights",
        "capture_draft", "capture_draft_extend", "http_server", "warmup", "ready",
    ]  # fmt: skip
    assert [(w.model, w.type, w.mem_usage_gb) for w in state.weights] == [
        ("target", "LlamaForCausalLM", 15.12), ("draft", "LlamaForCausalLMEagle3", 0.95),
    ]  # fmt: skip
    bs = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48]
    assert [(c.graph, c.batch_sizes, c.done, c.elapsed_s) for c in state.captures] == [
        ("target", bs, 10, 3.9), ("draft", bs, 10, 8.1), ("draft_extend", bs, 10, 2.8),
    ]  # fmt: skip
    assert [(k.model, k.k_size_gb) for k in state.kv_pools] == [("target", 51.88), ("draft", 1.62)]
    assert memory(state) == {
        "load_weights": 123.91, "kv_cache": 19.6, "capture": 18.85, "load_draft_weights": 17.9,
        "kv_cache_draft": 14.6, "capture_draft": 14.2, "capture_draft_extend": 14.0, "max_total_num_tokens": 14.0,
    }  # fmt: skip
    assert state.ready_after_s == 31.0 and state.max_total_num_tokens == 850000
    starts = [e.phase.name for e in events if isinstance(e, PhaseChanged) and e.phase.status == "running"]
    assert starts == names(state)
    ends = [e.phase.name for e in events if isinstance(e, PhaseChanged) and e.phase.status == "done"]
    assert ends == names(state)


def test_synthetic_new_family_eagle3_tp2_to_ready_then_sigterm() -> None:
    state, _ = track(SYNTHETIC / "new-0.5.16-eagle3-tp2-ready-then-sigterm.log")
    assert state.state == "stopped" and state.error is None and state.log_family == "new"
    assert state.ready_after_s == 32.0  # the pre-launch warning at 10:47:00 is the first timestamp
    assert state.ready_after_server_args_s == 31.0
    assert [(c.graph, c.role, c.label, c.total, c.elapsed_s) for c in state.captures] == [
        ("prefill", "target", "target prefill", 8, 5.01),
        ("target", "target", "target verify", 10, 3.07),
        ("draft", "draft", "draft decode", 10, 3.57),
        ("draft_extend", "draft", "draft extend", 10, 1.36),
    ]
    # two ranks print every line; rank 0's figures are kept even when TP1 prints first
    target, draft = state.weights
    assert (target.elapsed_s, target.mem_usage_gb, target.shards_done) == (5.52, 7.61, 4)
    assert (draft.type, draft.elapsed_s) == ("LlamaForCausalLMEagle3", 0.81)
    assert [k.model for k in state.kv_pools] == ["target", "draft"]


def test_synthetic_port_in_use_wins_over_a_later_ready_line() -> None:
    state, events = track(SYNTHETIC / "legacy-0.5.3-port-in-use-then-ready-line.log")
    assert state.state == "failed" and state.ready_at is None
    assert state.error.kind == "port_in_use" and state.error.phase == "http_server"
    assert "30000" in state.error.hint and "--port" in state.error.hint
    assert not any(isinstance(e, ServerBecameReady) for e in events)


def test_synthetic_legacy_speculative_assertion() -> None:
    state, _ = track(SYNTHETIC / "legacy-0.5.3-spec-args-assertion.log")
    assert (state.error.kind, state.error.message, state.error.phase) == (
        "invalid_server_args", "AssertionError", "server_args",
    )  # fmt: skip
    assert "--speculative-num-steps" in state.error.hint


def test_synthetic_cuda_oom_during_capture() -> None:
    state, events = track(SYNTHETIC / "legacy-0.5.9-capture-cuda-oom.log")
    assert state.state == "failed"
    error = state.error
    assert error.kind == "cuda_oom"  # not capture_failed, not killed: the most specific cause
    assert error.message.startswith("torch.OutOfMemoryError: CUDA out of memory.")
    assert error.phase == "capture"
    assert error.at == ts("2025-11-02 08:10:35")
    assert "lower --mem-fraction-static" in error.hint and "--cuda-graph-max-bs" in error.hint
    (capture,) = state.captures
    assert (capture.status, capture.done, capture.total, capture.current_bs) == ("failed", 1, 23, 152)
    assert capture.avail_gb == 0.02
    assert state.phase("capture").status == "failed"
    assert state.phase("capture").ended == ts("2025-11-02 08:10:35")
    assert [e.error.kind for e in events if isinstance(e, StartupFailed)][-1] == "cuda_oom"


def test_synthetic_not_enough_memory_says_raise_the_fraction() -> None:
    state, _ = track(SYNTHETIC / "legacy-0.4.10-kv-not-enough-memory.log")
    assert state.error.kind == "not_enough_memory"
    assert state.error.phase == "kv_cache"
    assert "raise --mem-fraction-static" in state.error.hint
