"""StartupTracker line by line: prefix forms, progress frames, traps, errors and their hints, events."""

from __future__ import annotations

from datetime import datetime

import pytest

from specmon.logs.errors import classify_exception, hint_for
from specmon.logs.model import ERROR_KINDS, CaptureProgressed, PhaseChanged, ServerStopped, StartupFailed
from specmon.logs.patterns import parse_prefix, suggest_flag
from specmon.logs.tracker import StartupTracker
from specmon.sglang.flags import load_shipped

TS = "[2025-10-01 12:00:00]"


def feed(*lines: str) -> StartupTracker:
    tracker = StartupTracker()
    for line in lines:
        tracker.feed_line(line)
    return tracker


@pytest.mark.parametrize(
    ("line", "ts"),
    [
        ("[2025-10-01 12:00:05] Load weight begin. avail mem=10.00 GB", "2025-10-01 12:00:05"),
        ("[2025-10-01 12:00:05.250] Load weight begin. avail mem=10.00 GB", "2025-10-01 12:00:05.250"),
        ("[2025-10-01 12:00:05 TP0] Load weight begin. avail mem=10.00 GB", "2025-10-01 12:00:05"),
        ("[2025-10-01 12:00:05 DP0 TP0 EP0] Load weight begin. avail mem=10.00 GB", "2025-10-01 12:00:05"),
        ("[gpu_id=0] Load weight begin. avail mem=10.00 GB", None),
        ("llm0-1  | [2025-10-01 12:00:05] Load weight begin. avail mem=10.00 GB", "2025-10-01 12:00:05"),
        ("sglang-1   | Load weight begin. avail mem=10.00 GB", None),
        ("2025-11-05T01:56:54.281615Z  INFO sglang::runner: Load weight begin. avail mem=10.00 GB", "2025-11-05 01:56:54.281615"),
        ("Load weight begin. avail mem=10.00 GB", None),
    ],
)
def test_every_prefix_form_reaches_the_message(line: str, ts: str | None) -> None:
    tracker = StartupTracker()
    assert tracker.feed_line(line) == "phase"
    state = tracker.state
    assert [w.avail_gb for w in state.weights] == [10.0]
    assert state.phases[0].name == "load_weights"
    assert state.first_ts == (datetime.fromisoformat(ts) if ts else None)


def test_other_formats_are_recognised_but_their_clocks_are_not_trusted() -> None:
    assert parse_prefix("INFO 03-07 12:29:02 __init__.py:190] Automatically detected platform cuda.") == (
        None, "", "INFO", "Automatically detected platform cuda.",
    )  # fmt: skip
    assert parse_prefix("2026-04-14 16:08:51,862 - CUTE_DSL - WARNING - [x] - walk failed")[2:] == (
        "WARNING", "[x] - walk failed",
    )  # fmt: skip
    assert parse_prefix("[2026-03-27 09:31:16] WARNING model_config.py:1178: Casting")[2:] == ("WARNING", "Casting")
    assert parse_prefix("WARNING:sglang.srt.server_args:Overlap scheduler is disabled")[2:] == (
        "WARNING", "Overlap scheduler is disabled",
    )  # fmt: skip
    tracker = feed("INFO 03-07 12:29:02 __init__.py:190] Automatically detected platform cuda.")
    assert tracker.state.first_ts is None


def test_line_kinds_for_highlighting() -> None:
    tracker = StartupTracker()
    assert tracker.feed_line(f"{TS} server_args=ServerArgs(model_path='m')") == "phase"
    assert tracker.feed_line(f"{TS} WARNING model_config.py:1: Casting torch.bfloat16 to torch.float16.") == "warning"
    assert tracker.feed_line("/x/launch_server.py:56: UserWarning: 'python -m sglang.launch_server' is ...") == "warning"
    assert tracker.feed_line(f"{TS} sglang is using nccl==2.21.5") is None
    assert tracker.feed_line(f"{TS} Decode batch, #running-req: 1, #token: 41, cuda graph: True") is None
    assert tracker.feed_line(f"{TS} INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)") == "phase"
    assert tracker.feed_line(f"{TS} ERROR:    Exception in ASGI application") == "error"


def test_timestamps_come_from_the_log_and_untimed_lines_inherit_them() -> None:
    tracker = feed(
        "[2025-10-01 12:00:00] server_args=ServerArgs(model_path='m')",
        "[2025-10-01 12:00:06] Load weight begin. avail mem=10.00 GB",
        "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.00it/s]",
    )
    state = tracker.state
    assert state.phase("server_args").elapsed_s == 6.0
    # running: measured in log time, never by the wall clock: the last timestamp, moved on by the bar's own 00:01
    assert state.phase("load_weights").elapsed_s == 1.0
    assert state.weights[0].started == datetime(2025, 10, 1, 12, 0, 6)
    tracker.feed_line("[2025-10-01 12:00:30] Using model weights format ['*.safetensors']")
    assert tracker.state.phase("load_weights").elapsed_s == 24.0


def test_a_frame_glued_to_a_log_line_feeds_both() -> None:
    tracker = feed(
        "[2025-03-08 12:29:21 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=1.45 GB",
        "  0%|          | 0/13 [00:00<?, ?it/s][2025-03-08 12:29:21 TP1] Capture cuda graph begin. avail mem=1.45 GB",
        "Capturing batches (bs=4 avail_mem=4.00 GB):   0%|          | 0/13 [00:00<?, ?it/s]2026-04-14 16:08:51,862"
        " - CUTE_DSL - WARNING - walk failed",
    )
    (capture,) = tracker.state.captures
    assert (capture.total, capture.done, capture.current_bs, capture.avail_gb) == (13, 0, 4, 4.0)
    assert tracker.state.lines_seen == 3


def test_carriage_returns_inside_a_fed_line_are_frames() -> None:
    tracker = feed(
        f"{TS} Capture cuda graph begin. This can take up to several minutes. avail mem=20.12 GB",
        "\r  0%|          | 0/4 [00:00<?, ?it/s]\rCapturing batches (bs=8 avail_mem=20.12 GB):  25%|██▌       | 1/4"
        " [00:02<00:06,  0.50it/s]\rCapturing batches (bs=4 avail_mem=20.10 GB):  25%|██▌       | 1/4 [00:02<00:06,"
        "  0.50it/s]",
    )
    (capture,) = tracker.state.captures
    assert (capture.done, capture.total, capture.current_bs, capture.avail_gb) == (1, 4, 4, 20.1)
    assert capture.batch_sizes == [4, 8]


def test_capture_eta_from_the_rate_so_far() -> None:
    tracker = feed(f"{TS} Capture cuda graph begin. This can take up to several minutes. avail mem=20.00 GB")
    tracker.feed_frame("Capturing batches (bs=8 avail_mem=20.12 GB):  25%|██▌       | 1/4 [00:02<00:06,  0.50it/s]")
    capture = tracker.state.captures[0]
    assert (capture.elapsed_s, capture.eta_s) == (2.0, 6.0)
    tracker.feed_frame("Capturing batches (bs=2 avail_mem=20.12 GB):  75%|███████▌  | 3/4 [00:03<00:01,  1.00it/s]")
    assert (capture.elapsed_s, capture.eta_s) == (3.0, 1.0)
    tracker.feed_frame("Capturing batches (bs=1 avail_mem=20.12 GB): 100%|██████████| 4/4 [00:04<00:00,  1.00it/s]")
    assert (capture.status, capture.eta_s) == ("done", 0.0)  # old versions print no end line
    assert capture.fraction == 1.0


def test_no_eta_before_tqdm_has_counted_a_second() -> None:
    tracker = feed(f"{TS} Capture cuda graph begin. This can take up to several minutes. avail mem=20.00 GB")
    tracker.feed_frame("Capturing batches (bs=8 avail_mem=20.12 GB):  17%|█▋        | 10/58 [00:00<?, ?it/s]")
    assert tracker.state.captures[0].eta_s is None  # 0 s elapsed gives no rate, not an ETA of 0 s


def test_num_tokens_list_belongs_to_the_prefill_capture_not_the_decode_batch_sizes() -> None:
    tracker = feed(
        f"{TS} Capture cuda graph begin. This can take up to several minutes. avail mem=20.00 GB",
        f"{TS} Capture cuda graph bs [1, 2, 4, 8]",
        f"{TS} Capture cuda graph end. Time elapsed: 1.00 s. mem usage=0.10 GB. avail mem=19.90 GB.",
        f"{TS} Capture piecewise CUDA graph begin. avail mem=19.90 GB",
        f"{TS} Capture cuda graph num tokens [4, 8, 16, 32, 64]",
    )
    target, prefill = tracker.state.captures
    assert (target.graph, target.batch_sizes) == ("target", [1, 2, 4, 8])
    assert (prefill.graph, prefill.batch_sizes, prefill.total) == ("prefill", [4, 8, 16, 32, 64], 5)
    assert tracker.state.current_phase.name == "capture_prefill"


def test_a_usage_dump_full_of_flag_names_is_not_phases() -> None:
    tracker = feed(
        "usage: launch_server.py [-h] --model-path MODEL_PATH [--load-format {auto,pt}]",
        "                        [--kv-cache-dtype {auto,fp8_e5m2}] [--cuda-graph-max-bs CUDA_GRAPH_MAX_BS]",
        "                        [--skip-server-warmup] [--warmups WARMUPS] [--enable-metrics]",
        "launch_server.py: error: argument --speculative-algorithm: invalid choice: 'EAGLE2' (choose from 'EAGLE', 'EAGLE3', 'NEXTN')",
    )
    state = tracker.state
    assert [p.name for p in state.phases] == ["server_args"]
    assert state.error.kind == "invalid_server_args"
    assert "invalid choice: 'EAGLE2'" in state.error.hint


def test_sigterm_after_ready_is_stopped_and_later_tracebacks_are_not_failures() -> None:
    tracker = feed(f"{TS} The server is fired up and ready to roll!")
    assert tracker.state.state == "ready"
    assert tracker.feed_line(f"{TS} ERROR:    Exception in ASGI application") == "error"
    assert tracker.feed_line("Traceback (most recent call last):") == "error"
    assert tracker.feed_line("ValueError: bad request") == "error"
    assert tracker.state.state == "ready" and tracker.state.error is None
    tracker.feed_line("[2025-10-01 12:05:00] SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
    tracker.feed_line("[2025-10-01 12:05:00] SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
    tracker.feed_line("Killed")
    state = tracker.state
    assert (state.state, state.error) == ("stopped", None)
    assert state.stopped_at == datetime(2025, 10, 1, 12, 5)
    assert state.current_phase.name == "shutdown"
    assert any(isinstance(e, ServerStopped) for e in tracker.drain_events())


@pytest.mark.parametrize(
    "evidence",
    [
        "Killed",
        "[2025-10-01 12:00:40] Rank 0 scheduler is dead. Please check if there are relevant logs. Exit code: -9",
        "[2025-10-01 12:00:40] RuntimeError: Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), a common cause is the OS OOM killer.",
    ],
)
def test_killed_only_with_evidence(evidence: str) -> None:
    start = [f"{TS} Load weight begin. avail mem=70.00 GB", "Loading safetensors checkpoint shards:  50% Completed | 1/2"]
    cut_off = feed(*start, "/usr/lib/python3.12/multiprocessing/multiprocessing/util.py:300: UserWarning: semaphore leaked?")
    assert (cut_off.state.state, cut_off.state.error) == ("starting", None)
    killed = feed(*start, evidence)
    assert killed.state.state == "failed"
    assert (killed.state.error.kind, killed.state.error.phase) == ("killed", "load_weights")
    assert "dmesg" in killed.state.error.hint
    assert killed.state.weights[0].status == "failed"


def test_a_more_specific_cause_replaces_a_less_specific_one_never_the_reverse() -> None:
    tracker = feed(
        f"{TS} Capture cuda graph begin. This can take up to several minutes. avail mem=1.00 GB",
        "[2025-10-01 12:00:01] Received sigquit from a child process. It usually means the child failed.",
    )
    assert tracker.state.error.kind == "exception"  # a child failed: not a kill
    assert "child" in tracker.state.error.hint
    tracker.feed_line("[2025-10-01 12:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):")
    tracker.feed_line('  File "/sglang/srt/model_executor/cuda_graph_runner.py", line 1, in capture')
    assert tracker.state.error.kind == "capture_failed"  # the frames already say where
    tracker.feed_line("RuntimeError: CUDA error: an illegal memory access was encountered")
    assert (tracker.state.error.kind, tracker.state.error.phase) == ("cuda_error", "capture")
    tracker.feed_line("Killed")
    assert tracker.state.error.kind == "cuda_error"
    kinds = [e.error.kind for e in tracker.drain_events() if isinstance(e, StartupFailed)]
    assert kinds == ["exception", "exception", "capture_failed", "cuda_error"]


def test_the_exception_line_not_the_traceback_line_is_the_message() -> None:
    tracker = feed(
        "[2025-10-01 12:00:00] server_args=ServerArgs(model_path='m')",
        "Traceback (most recent call last):",
        '  File "/sglang/srt/server_args.py", line 400, in __post_init__',
        "    raise ValueError(",
        "ValueError: trtllm_mha backend only supports topk = 1 for speculative decoding.",
    )
    error = tracker.state.error
    assert error.message == "ValueError: trtllm_mha backend only supports topk = 1 for speculative decoding."
    assert (error.kind, error.phase) == ("invalid_server_args", "server_args")
    assert "topk = 1" in error.hint


def test_interleaved_ranks_keep_rank_zeros_figures() -> None:
    tracker = feed(
        "[2025-10-01 12:00:00 TP1] Load weight begin. avail mem=20.00 GB",
        "[2025-10-01 12:00:00 TP0] Load weight begin. avail mem=21.00 GB",
        "[2025-10-01 12:00:09 TP1] Load weight end. elapsed=9.00 s, type=M, avail mem=10.00 GB, mem usage=10.00 GB.",
        "[2025-10-01 12:00:10 TP0] Load weight end. elapsed=10.00 s, type=M, avail mem=11.00 GB, mem usage=10.00 GB.",
        "[2025-10-01 12:00:11 TP1] Load weight end. elapsed=99.00 s, type=M, avail mem=99.00 GB, mem usage=99.00 GB.",
        "[2025-10-01 12:00:12 TP1] KV Cache is allocated. #tokens: 1000, K size: 1.00 GB, V size: 1.00 GB",
        "[2025-10-01 12:00:12 TP0] KV Cache is allocated. #tokens: 1000, K size: 1.00 GB, V size: 1.00 GB",
    )
    state = tracker.state
    (weights,) = state.weights
    assert (weights.model, weights.elapsed_s, weights.avail_gb) == ("target", 10.0, 11.0)
    assert len(state.kv_pools) == 1
    assert state.memory[0].avail_gb == 11.0


def test_the_draft_is_told_apart_by_its_class_or_by_being_the_second_load() -> None:
    by_class = feed(f"{TS} Load weight end. type=LlamaForCausalLMEagle3, dtype=torch.bfloat16, avail mem=17.90 GB, mem usage=0.95 GB.")
    assert [w.model for w in by_class.state.weights] == ["draft"]
    by_order = feed(
        f"{TS} Load weight begin. avail mem=20.00 GB",
        f"{TS} Load weight end. elapsed=1.00 s, type=LlamaForCausalLM, avail mem=19.00 GB, mem usage=1.00 GB.",
        f"{TS} Load weight begin. avail mem=19.00 GB",
        f"{TS} Load weight end. elapsed=1.00 s, type=LlamaForCausalLM, avail mem=18.00 GB, mem usage=1.00 GB.",
    )
    assert [(w.model, w.avail_gb) for w in by_order.state.weights] == [("target", 19.0), ("draft", 18.0)]
    assert [p.name for p in by_order.state.phases] == ["load_weights", "load_draft_weights"]


def test_progress_events_are_coalesced_and_bounded() -> None:
    tracker = feed(f"{TS} Capture cuda graph begin. This can take up to several minutes. avail mem=20.00 GB")
    tracker.drain_events()
    for n in range(1, 50):
        tracker.feed_frame(f"Capturing batches (bs={n} avail_mem=20.00 GB):  50%|█████     | {n}/100 [00:01<00:01,  1.00it/s]")
    events = tracker.drain_events()
    assert len(events) == 1 and isinstance(events[0], CaptureProgressed)
    assert events[0].capture.done == 49
    assert tracker.drain_events() == []
    undrained = StartupTracker()
    for i in range(5000):
        undrained.feed_line(f"{TS} Capture cuda graph begin. avail mem=1.00 GB")
        undrained.feed_line(f"{TS} Load weight begin. avail mem=1.00 GB")
        undrained.feed_line(f"[2025-10-01 12:00:00 TP{i % 3}] Init torch distributed begin.")
    assert len(undrained.drain_events()) <= 2000


def test_events_carry_copies() -> None:
    tracker = feed(f"{TS} server_args=ServerArgs(model_path='m')")
    (event,) = tracker.drain_events()
    assert isinstance(event, PhaseChanged) and event.phase.status == "running"
    tracker.feed_line(f"{TS} Load weight begin. avail mem=1.00 GB")
    assert event.phase.status == "running"  # the event did not change with the state
    assert tracker.state.phase("server_args").status == "done"


@pytest.mark.parametrize(
    ("flag", "right"),
    [
        ("--num-speculative-tokens", "--speculative-num-draft-tokens"),
        ("--reasoning_parser", "--reasoning-parser"),
        ("--speculative-draft-model", "--speculative-draft-model-path"),
        ("--gpu-memory-utilization", "--mem-fraction-static"),
        ("--mem-fraction", "--mem-fraction-static"),
        ("--speculative-num-step", "--speculative-num-steps"),
        ("--context-lenght", "--context-length"),
        ("--speculative-eagle-topk", None),
        ("--completely-unknown-thing", None),
    ],
)
def test_misspelt_flags_get_the_right_name(flag: str, right: str | None) -> None:
    assert suggest_flag(flag) == right
    assert right is None or right in load_shipped()


def test_hints_differ_for_the_two_memory_errors() -> None:
    oom = hint_for("cuda_oom", "torch.OutOfMemoryError: CUDA out of memory.", "capture_draft")
    assert "lower --mem-fraction-static" in oom and "--cuda-graph-max-bs" in oom
    nem = hint_for("not_enough_memory", "RuntimeError: Not enough memory. Current value: mem_fraction_static=0.6", "kv_cache")
    assert "raise --mem-fraction-static (now 0.6)" in nem
    # SGLang <= 0.4.10 prints no current value: the server_args line (either form) supplies it.
    old = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    assert "(now 0.7)" in hint_for("not_enough_memory", old, "kv_cache", mem_fraction=0.7)
    assert "(now" not in hint_for("not_enough_memory", old, "kv_cache")
    tracker = feed(f"{TS} server_args={{'model_path': 'm', 'mem_fraction_static': 0.88}}")
    assert tracker.state.mem_fraction_static == 0.88
    assert classify_exception("Exception: Capture cuda graph failed: CUDA out of memory.", "capture", None) == "cuda_oom"
    assert classify_exception("Exception: Capture cuda graph failed: mat1 and mat2", "capture", None) == "capture_failed"
    assert classify_exception("KeyError: 'x'", "load_draft_weights", None) == "weight_load"
    assert classify_exception("ValueError: x", None, None) == "exception"
    assert set(ERROR_KINDS) == {
        "unrecognized_arguments", "invalid_server_args", "cuda_oom", "not_enough_memory", "port_in_use",
        "weight_load", "capture_failed", "cuda_error", "warmup_failed", "killed", "exception",
    }  # fmt: skip


def test_failure_lines_without_a_traceback() -> None:
    capture = feed(
        f"{TS} Capture draft cuda graph begin. This can take up to several minutes. avail mem=1.00 GB",
        "Exception: Capture cuda graph failed: CUDA error: an illegal memory access was encountered",
    )
    assert (capture.state.error.kind, capture.state.error.phase) == ("cuda_error", "capture_draft")
    main = feed(
        f"{TS} Memory pool end. avail mem=2.00 GB",
        f"{TS} Initialization failed. Please see the error messages above.",
    )
    assert (main.state.state, main.state.error.kind, main.state.error.phase) == ("failed", "exception", "kv_cache")


def test_sigterm_before_ready_is_stopped_not_failed() -> None:
    tracker = feed(
        f"{TS} Load weight begin. avail mem=70.00 GB",
        "[2025-10-01 12:00:09] SIGTERM received. signum=None frame=None. Draining requests and shutting down...",
    )
    assert (tracker.state.state, tracker.state.error) == ("stopped", None)
    assert [p.name for p in tracker.state.phases] == ["load_weights", "shutdown"]


def test_mla_pool_has_one_combined_size_not_k_and_v() -> None:
    tracker = StartupTracker()
    tracker.feed_line("[2026-01-01 00:00:00] KV Cache is allocated. #tokens: 843264, KV size: 52.64 GB")
    tracker.feed_line(
        "[2026-01-01 00:00:01] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1000, K size: 1.50 GB, V size: 1.25 GB"
    )
    mla, mha = tracker.state.kv_pools
    assert (mla.k_size_gb, mla.v_size_gb, mla.kv_size_gb, mla.total_gb) == (None, None, 52.64, 52.64)
    assert (mha.k_size_gb, mha.v_size_gb, mha.kv_size_gb, mha.total_gb) == (1.5, 1.25, None, 2.75)
