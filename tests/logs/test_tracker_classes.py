"""StartupTracker on classes of logs the corpus shows once or not at all (issue 14): errors after startup,
signals, silent deaths, durations from progress frames, C++ CUDA errors, line wrappers, capture totals.

Excerpts are built from SGLang's real line formats (docs/sglang-facts.md) and fed as bytes through the
follower's splitter, as the app reads them.
"""

from __future__ import annotations

import io
from datetime import datetime
from pathlib import Path

import pytest

from specmon.logs.follower import LogFollower, read_items
from specmon.logs.model import StartupState
from specmon.logs.summary import format_summary
from specmon.logs.tracker import StartupTracker
from specmon.view.log_feed import LogFeed

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"


def track_text(text: str) -> StartupState:
    tracker = StartupTracker()
    for items in read_items(io.BytesIO(text.encode()), chunk_bytes=113):
        tracker.feed_items(items)
    return tracker.state


def names(state: StartupState) -> list[str]:
    return [p.name for p in state.phases]


# --- 1. an error after startup is blamed on serving, not on the last capture --------------------------------

WORKER_CAPTURES = (
    "[2026-11-30 08:00:00 TP8] Load weight begin. avail mem=78.00 GB\n"
    "[2026-11-30 08:00:40 TP8] Load weight end. elapsed=40.00 s, type=Qwen3ForCausalLM, avail mem=40.00 GB, mem usage=38.00 GB.\n"
    "[2026-11-30 08:00:41 TP8] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 400000, K size: 12.00 GB, V size: 12.00 GB\n"
    "[2026-11-30 08:00:41 TP8] Memory pool end. avail mem=15.00 GB\n"
    "[2026-11-30 08:00:42 TP8] Capture target decode CUDA graph begin. backend=full, bs=[1, 2, 4, 8], avail mem=15.00 GB\n"
    "\rCapturing batches (bs=8 avail_mem=14.90 GB):   0%|          | 0/4 [00:00<?, ?it/s]"
    "\rCapturing batches (bs=1 avail_mem=14.80 GB): 100%|██████████| 4/4 [00:02<00:00,  1.90it/s]\n"
    "[2026-11-30 08:00:44 TP8] Capture target decode CUDA graph end. elapsed=2.10 s, mem usage=0.20 GB, avail mem=14.80 GB.\n"
    "[2026-11-30 08:00:45 TP8] Capture target prefill CUDA graph begin. backend=breakable, num_tokens=[512, 1024], avail mem=14.80 GB\n"
    "\rCapturing num tokens (num_tokens=1024 avail_mem=14.70 GB): 100%|██████████| 2/2 [00:05<00:00,  0.40it/s]\n"
    "[2026-11-30 08:00:50 TP8] Capture target prefill CUDA graph end. elapsed=5.02 s, mem usage=0.30 GB, avail mem=14.50 GB.\n"
)
MAX_TOTAL = (
    "[2026-11-30 08:00:51 TP8] max_total_num_tokens=400000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=48, context_len=40960, available_gpu_mem=14.50 GB\n"
)
HEALTH = "[2026-11-30 08:00:52] Dummy health check server started in background thread at 0.0.0.0:30000\n"
GLOO_TRACEBACK = (
    "[2026-11-30 08:01:28 TP8] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 3280, in run_scheduler_process\n'
    "    scheduler.run_event_loop()\n"
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 1105, in run_event_loop\n'
    "    self.event_loop_overlap()\n"
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 1140, in event_loop_overlap\n'
    "    recv_reqs = self.recv_requests()\n"
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 1290, in recv_requests\n'
    "    recv_reqs = broadcast_pyobj(\n"
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/utils/common.py", line 1187, in broadcast_pyobj\n'
    "    dist.broadcast(tensor_size, src=src, group=dist_group)\n"
    '  File "/usr/local/lib/python3.12/dist-packages/torch/distributed/distributed_c10d.py", line 2824, in broadcast\n'
    "    work.wait()\n"
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.1]:24591\n"
)
SIGQUIT = "[2026-11-30 08:01:28] Received sigquit from a child process. It usually means the child failed.\n"


@pytest.mark.parametrize(
    "moved_on",
    [MAX_TOTAL + HEALTH, HEALTH, MAX_TOTAL],
    ids=["max_total-and-health-server", "health-server-only", "max_total-only"],
)
def test_an_error_in_the_serving_loop_of_a_worker_node_is_blamed_on_serving(moved_on: str) -> None:
    state = track_text(WORKER_CAPTURES + moved_on + GLOO_TRACEBACK + SIGQUIT)
    assert state.state == "failed"
    error = state.error
    assert (error.kind, error.phase) == ("exception", "serving")
    assert error.message.startswith("RuntimeError: [../third_party/gloo/")
    assert "cuda-graph-max-bs" not in error.hint and "another rank or node" in error.hint
    assert state.phase("capture_prefill").status == "done"  # what startup finished stays finished
    assert [c.status for c in state.captures] == ["done", "done"]
    assert names(state)[-1] == "serving" and state.phases[-1].status == "failed"


def test_the_serving_loop_above_a_graph_replay_is_still_serving_and_a_cut_traceback_too() -> None:
    replay = GLOO_TRACEBACK.replace(
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.1]:24591\n",
        '  File "/sglang/srt/model_executor/cuda_graph_runner.py", line 700, in replay\n'
        "    self.graphs[bs].replay()\n"
        "RuntimeError: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx`\n",
    )
    state = track_text(WORKER_CAPTURES + MAX_TOTAL + HEALTH + replay)
    assert (state.error.kind, state.error.phase) == ("cuda_error", "serving")
    cut = track_text(WORKER_CAPTURES + MAX_TOTAL + HEALTH + GLOO_TRACEBACK.split("\n", 1)[0] + "\n")
    assert (cut.error.kind, cut.error.phase) == ("exception", "serving")


def test_a_worker_node_that_started_is_serving_not_capturing() -> None:
    state = track_text(WORKER_CAPTURES + MAX_TOTAL + HEALTH)
    assert state.state == "starting" and state.error is None  # the ready line is the head node's
    assert names(state)[-2:] == ["capture_prefill", "serving"]
    assert state.phase("capture_prefill").status == "done" and state.phase("capture_prefill").elapsed_s == 6.0


def test_an_error_during_a_capture_is_still_a_capture_failure() -> None:
    state = track_text(
        WORKER_CAPTURES.split("[2026-11-30 08:00:50")[0]
        + "[2026-11-30 08:00:50 TP8] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sglang/srt/model_executor/runner/prefill_cuda_graph_runner.py", line 900, in capture\n'
        "    out = run_once()\n"
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x12288 and 8192x4096)\n"
    )
    assert (state.error.kind, state.error.phase) == ("capture_failed", "capture_prefill")


# --- 2. signals, both ways ----------------------------------------------------------------------------------

LOADING = (
    "[2025-01-20 19:10:00] server_args=ServerArgs(model_path='Qwen/Qwen2-7B-Instruct', tp_size=2)\n"
    "[2025-01-20 19:10:05 TP0] Load weight begin. avail mem=70.00 GB\n"
)
KEYERROR_TRACEBACK = (
    "[2025-01-20 19:10:07 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/sglang/srt/model_executor/model_runner.py", line 300, in load_model\n'
    "    self.model = get_model(\n"
    '  File "/sglang/srt/model_loader/loader.py", line 360, in load_model\n'
    "    model.load_weights(self._get_all_weights(model_config, model))\n"
    "KeyError: 'model.layers.0.mlp.gate_up_proj.weight'\n"
)


@pytest.mark.parametrize(
    "sigquit",
    [
        "[2025-01-20 19:10:07] Received sigquit from a child process. It usually means the child failed.\n",
        "[2025-01-20 19:10:07] SIGQUIT received. signum=None, frame=None. It usually means one child failed.\n",
    ],
)
@pytest.mark.parametrize("order", ["sigquit-first", "traceback-first"])
def test_sigquit_means_a_child_raised_and_its_traceback_is_the_cause(sigquit: str, order: str) -> None:
    body = sigquit + KEYERROR_TRACEBACK if order == "sigquit-first" else KEYERROR_TRACEBACK + sigquit
    state = track_text(LOADING + body)
    assert (state.error.kind, state.error.phase) == ("weight_load", "load_weights")
    assert state.error.message == "KeyError: 'model.layers.0.mlp.gate_up_proj.weight'"
    assert "dmesg" not in state.error.hint


def test_sigquit_alone_is_a_failed_child_not_a_kill() -> None:
    state = track_text(LOADING + "[2025-01-20 19:10:07] Received sigquit from a child process. It usually means the child failed.\n")
    assert (state.error.kind, state.error.phase) == ("exception", "load_weights")
    assert "child" in state.error.hint and "traceback" in state.error.hint and "dmesg" not in state.error.hint


@pytest.mark.parametrize(
    "death",
    [
        "Killed",
        "已杀死",
        "[2025-01-20 19:10:40] Server process exited with code -9",
        "/bin/sh: line 1: 48213 Killed                  python3 -m sglang.launch_server --model-path Qwen/Qwen2-7B",
        "zsh: killed     python -m sglang.launch_server --model-path Qwen/Qwen2-7B",
        "[2025-01-20 19:10:40] Subprocess scheduler_0 (pid=4242) crashed with exit code -9. Triggering SIGQUIT for cleanup...",
        "sglang-1 exited with code 137",
    ],
)
def test_signal_nine_deaths_are_killed_with_the_oom_hint(death: str) -> None:
    state = track_text(LOADING + death + "\n")
    assert (state.state, state.error.kind, state.error.phase) == ("failed", "killed", "load_weights")
    assert "dmesg" in state.error.hint and "out-of-memory" in state.error.hint
    assert state.weights[0].status == "failed"


# --- 3. a server that died without a word --------------------------------------------------------------------

LEAKED = (
    "/usr/lib/python3.12/multiprocessing/resource_tracker.py:279: UserWarning: resource_tracker: There appear to "
    "be 1 leaked semaphore objects to clean up at shutdown\n"
    "  warnings.warn('resource_tracker: There appear to be %d '\n"
)


def _ready_part(name: str) -> str:
    text = (LOGS / name).read_text(encoding="utf-8")
    return text[: text.index("\n", text.index("ready to roll")) + 1]


def test_the_leaked_semaphore_warning_after_ready_is_a_stop_without_shutdown() -> None:
    state = track_text(_ready_part("h200-0.5.16-plain-ready.log") + LEAKED)
    assert (state.state, state.stop_cause, state.error) == ("stopped", "died", None)
    assert state.ready_at is not None
    headline = format_summary(state).splitlines()[0]
    assert "STOPPED" in headline and "without a shutdown" in headline
    clean = track_text((LOGS / "h200-0.5.16-plain-ready.log").read_text(encoding="utf-8"))
    assert (clean.state, clean.stop_cause) == ("stopped", "shutdown")
    assert "without a shutdown" not in format_summary(clean).splitlines()[0]


def test_the_leaked_semaphore_warning_during_startup_is_a_kill_of_the_running_phase() -> None:
    state = track_text(LOADING + LEAKED)
    assert (state.state, state.error.kind, state.error.phase) == ("failed", "killed", "load_weights")
    assert "without a word" in state.error.hint
    # a traceback printed before the warning stays the cause
    earlier = track_text(LOADING + KEYERROR_TRACEBACK + LEAKED)
    assert earlier.error.kind == "weight_load"


# --- 4. durations from progress frames ---------------------------------------------------------------------


def test_a_weight_load_that_printed_only_frames_lasts_as_long_as_they_say() -> None:
    frames = "".join(
        f"\rLoading safetensors checkpoint shards:  {n * 10}% Completed | {n}/10 [{n:02d}:00<{10 - n:02d}:00, 60.00s/it]"
        for n in range(0, 8)
    )
    state = track_text(LOADING + frames)
    load = state.phase("load_weights")
    assert load.status == "running" and load.elapsed_s == 7 * 60.0  # not 0 s: the last timestamp is old
    assert state.weights[0].elapsed_s == 7 * 60.0


def test_the_app_timeline_and_log_summary_agree_on_the_silent_weight_load() -> None:
    """The app's timeline shows Phase.elapsed_s plus the time the log's clock stood still while the server
    lived; a log read at once adds nothing, so it shows the summary's number."""
    feed = LogFeed()
    with (LOGS / "05-laguna-nvfp4-dflash-v0.5.16-killed-during-weight-load.log").open("rb") as stream:
        for items in read_items(stream, chunk_bytes=4096):
            feed.feed(items)
    with feed.lock:
        load = feed.state.phase("load_weights")
        shown = load.elapsed_s + int(feed.unstamped_s())
    summary = track_text((LOGS / "05-laguna-nvfp4-dflash-v0.5.16-killed-during-weight-load.log").read_text())
    assert shown == summary.phase("load_weights").elapsed_s == 576.0
    assert "9m36s" in format_summary(summary)


def test_the_bars_clock_is_the_same_read_live_in_cut_frames_as_read_at_once(tmp_path: Path) -> None:
    """Live, a bar's frame may arrive cut before its `[elapsed]`; two bars may interleave. Neither moves the
    clock further than the whole file does."""
    data = (LOGS / "05-laguna-nvfp4-dflash-v0.5.16-killed-during-weight-load.log").read_bytes()
    path = tmp_path / "server.log"
    tracker = StartupTracker()
    with path.open("ab", buffering=0) as out, LogFollower(path) as follower:
        for i in range(0, len(data), 37):
            out.write(data[i : i + 37])
            tracker.feed_items(follower.poll())
        tracker.feed_items(follower.poll())
    assert tracker.state.phase("load_weights").elapsed_s == 576.0
    interleaved = StartupTracker()
    interleaved.feed_line("[2026-01-01 10:00:00] Load weight begin. avail mem=10.00 GB")
    for step in range(1, 6):
        for n in (step, step + 2):  # two ranks' bars of the same length, one ahead of the other
            interleaved.feed_frame(f"Loading safetensors checkpoint shards: {n}0% Completed | {n}/10 [00:{n:02d}<00:10, 1.0s/it]")
    assert interleaved.state.phase("load_weights").elapsed_s == 7.0


def test_frames_move_the_apps_clock_so_live_time_is_not_counted_twice() -> None:
    feed = LogFeed()
    feed.feed([("line", LOADING.splitlines()[1])])
    first = feed.stamped_at
    feed.feed([("frame", "Loading safetensors checkpoint shards:  10% Completed | 1/10 [01:00<09:00, 60.00s/it]")])
    assert feed.stamped_at is not None and feed.stamped_at > first  # the bar's 01:00 is log time
    feed.feed([("frame", "Loading safetensors checkpoint shards:  10% Completed | 1/10 [01:00<09:00, 60.00s/it]")])
    assert feed.unstamped_s() >= 0.0


# --- 5. a CUDA error printed by C++ code -------------------------------------------------------------------

CAPTURING = (
    "[2026-02-01 10:00:00] Capture cuda graph begin. This can take up to several minutes. avail mem=20.00 GB\n"
    "[2026-02-01 10:00:00] Capture cuda graph bs [1, 2, 4, 8]\n"
)


@pytest.mark.parametrize(
    "line",
    [
        "CUDA error (/workspace/flash-attention/hopper/flash_fwd_launch_template.h:166): no kernel image is available for execution on the device",
        "terminate called after throwing an instance of 'c10::Error'\n  what():  CUDA error: an illegal memory access was encountered",
        "[2026-02-01 10:00:03 TP0] CUDA error at /sgl-kernel/csrc/allreduce/custom_all_reduce.cuh:368 'invalid argument'",
    ],
)
def test_a_cuda_error_from_a_kernel_fails_the_running_phase(line: str) -> None:
    state = track_text(CAPTURING + line + "\n")
    assert (state.state, state.error.kind, state.error.phase) == ("failed", "cuda_error", "capture")
    assert state.captures[0].status == "failed"


def test_no_kernel_image_says_the_build_does_not_fit_the_gpu() -> None:
    state = track_text(
        CAPTURING + "CUDA error (/x/flash_fwd_launch_template.h:166): no kernel image is available for execution on the device\n"
    )
    assert "architecture" in state.error.hint


def test_a_warning_that_mentions_a_cuda_error_is_not_one() -> None:
    state = track_text(CAPTURING + "[2026-02-01 10:00:01] WARNING utils.py:1: CUDA error: retrying the NCCL probe\n")
    assert state.state == "starting" and state.error is None


# --- 6. line prefixes ----------------------------------------------------------------------------------------

CAPTURE_BEGIN = "Capture cuda graph begin. This can take up to several minutes. avail mem=20.00 GB"


@pytest.mark.parametrize(
    ("line", "ts"),
    [
        (f"[12:00:05] {CAPTURE_BEGIN}", "1900-01-01 12:00:05"),
        (f"[12:00:05.250 TP1] {CAPTURE_BEGIN}", "1900-01-01 12:00:05.250"),
        (f"[2025-10-01 12:00:05 TP3] {CAPTURE_BEGIN}", "2025-10-01 12:00:05"),
        (f"[2025-10-01 12:00:05 DP1 PP1] {CAPTURE_BEGIN}", "2025-10-01 12:00:05"),
        (f"[2025-10-01 12:00:05 DP2 TP2 EP2] {CAPTURE_BEGIN}", "2025-10-01 12:00:05"),
        (f"(SGLangEngine pid=1234) [2025-10-01 12:00:05 TP0] {CAPTURE_BEGIN}", "2025-10-01 12:00:05"),
        (f"(SGLangEngine pid=1234, ip=10.0.0.2) [2025-10-01 12:00:05] {CAPTURE_BEGIN}", "2025-10-01 12:00:05"),
        (f"(pid=77) {CAPTURE_BEGIN}", None),
        (f"sglang-head-7d9f8-0 >> [2025-10-01 12:00:05 TP0] {CAPTURE_BEGIN}", "2025-10-01 12:00:05"),
        (f"[pod/sglang-0/sglang] [2025-10-01 12:00:05] {CAPTURE_BEGIN}", "2025-10-01 12:00:05"),
        (f"sglang-server-1  | [2025-10-01 12:00:05 TP0] {CAPTURE_BEGIN}", "2025-10-01 12:00:05"),
        (f"2025-10-01T12:00:05.123456789Z stderr F [2025-10-01 12:00:05] {CAPTURE_BEGIN}", "2025-10-01 12:00:05"),
    ],
)
def test_startup_lines_are_read_whatever_wraps_them(line: str, ts: str | None) -> None:
    tracker = StartupTracker()
    assert tracker.feed_line(line) == "phase"
    state = tracker.state
    assert [(c.graph, c.avail_gb) for c in state.captures] == [("target", 20.0)]
    assert names(state) == ["capture"]
    assert state.first_ts == (datetime.fromisoformat(ts) if ts else None)
    assert state.lines_recognized == 1


def test_short_timestamps_take_the_date_seen_and_pass_midnight() -> None:
    state = track_text(
        "[2025-10-01 23:59:50] server_args=ServerArgs(model_path='m')\n"
        "[23:59:58] Load weight begin. avail mem=20.00 GB\n"
        "[00:00:07] Load weight end. type=M, dtype=torch.bfloat16, avail mem=10.00 GB, mem usage=10.00 GB.\n"
    )
    assert state.weights[0].elapsed_s == 9.0
    assert state.last_ts == datetime(2025, 10, 2, 0, 0, 7)


def test_an_exception_message_with_a_bracketed_time_is_not_a_wrapper() -> None:
    tracker = StartupTracker()
    tracker.feed_line("[2025-10-01 12:00:00] Load weight begin. avail mem=1.00 GB")
    tracker.feed_line("Traceback (most recent call last):")
    tracker.feed_line('  File "/sglang/srt/model_loader/loader.py", line 1, in load_model')
    tracker.feed_line("ValueError: checkpoint saved at [2025-09-30 10:00:00] is incomplete")
    assert tracker.state.error.message == "ValueError: checkpoint saved at [2025-09-30 10:00:00] is incomplete"


def test_a_milestone_seen_only_on_a_non_zero_rank_still_counts() -> None:
    state = track_text(
        "[2026-05-07 05:50:00 DP0 TP0 EP0] Load weight begin. avail mem=70.00 GB\n"
        "[2026-05-07 05:55:00 DP0 TP0 EP0] Load weight end. type=M, avail mem=30.00 GB, mem usage=40.00 GB.\n"
        "[2026-05-07 05:55:01 DP0 TP0 EP0] KV Cache is allocated. #tokens: 1000, K size: 1.00 GB, V size: 1.00 GB\n"
        "[2026-05-07 05:55:01 DP0 TP0 EP0] Memory pool end. avail mem=14.00 GB\n"
        "[2026-05-07 05:56:32 DP1 TP1 EP1] Capture cuda graph begin. This can take up to several minutes. avail mem=13.56 GB\n"
        "[2026-05-07 05:56:33 DP1 TP1 EP1] Capture cuda graph bs [1, 2, 4]\n"
    )
    assert names(state)[-1] == "capture" and state.phases[-1].status == "running"
    (capture,) = state.captures
    assert (capture.status, capture.avail_gb, capture.started) == ("running", 13.56, datetime(2026, 5, 7, 5, 56, 32))
    assert state.phase("kv_cache").status == "done"


def test_a_non_zero_rank_does_not_override_rank_zeros_figures() -> None:
    state = track_text(
        "[2026-05-07 05:56:32 DP0 TP0 EP0] Capture cuda graph begin. avail mem=10.00 GB\n"
        "[2026-05-07 05:56:32 DP1 TP1 EP1] Capture cuda graph begin. avail mem=99.00 GB\n"
        "[2026-05-07 05:56:33 DP1 TP1 EP1] KV Cache is allocated. #tokens: 9, K size: 9.00 GB, V size: 9.00 GB\n"
    )
    assert state.captures[0].avail_gb == 10.0
    assert state.kv_pools == [] and "kv_cache" in names(state)


# --- 9. capture progress never exceeds its total -------------------------------------------------------------


def test_a_later_batch_size_list_never_leaves_done_above_total() -> None:
    tracker = StartupTracker()
    tracker.feed_line("[2025-10-01 12:00:00] Capture cuda graph begin. avail mem=1.00 GB")
    tracker.feed_frame("Capturing batches (bs=8 avail_mem=1.00 GB): 100%|##| 4/4 [00:01<00:00, 1.0it/s]")
    tracker.feed_line("[2025-10-01 12:00:01] Capture cuda graph bs [1]")
    (capture,) = tracker.state.captures
    assert (capture.done, capture.total) == (1, 1)
    begin = StartupTracker()
    begin.feed_line("[2025-10-01 12:00:00] Capture draft cuda graph end. elapsed=1 s")
    begin.feed_frame("Capturing batches (bs=8 avail_mem=1.00 GB): 100%|##| 4/4 [00:01<00:00, 1.0it/s]")
    begin.feed_line("[2025-10-01 12:00:02] Capture target verify CUDA graph begin. backend=full, bs=[1], avail mem=1.00 GB")
    assert all(c.total is None or c.done <= c.total for c in begin.state.captures)
