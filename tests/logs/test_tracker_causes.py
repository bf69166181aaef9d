"""The error of a failing server, read as a class (issue: 22 fresh held-out real logs, every timeline right, every
miss in the error): a line inside an exception is not an argparse error; the first death is the cause, not what
followed it; a scheduler's crash after ready fails the server; a multi-line exception's cause, not its head; a
kill after "sigquit" is a kill; hints that send the user the right way; a crash on the warmup request is a
startup failure.

Each log is built from SGLang's own line formats (0.5.16's startup, SGLang's engine, scheduler and DP controller
messages, uvicorn's lifespan, torch's and Triton's exception texts, NVSHMEM's and c10's aborts) and fed as bytes
through the follower's splitter, as the app reads them.
"""

from __future__ import annotations

import pytest

from specmon.logs.summary import format_summary
from tests.logs.test_tracker_classes import names, track_text

SITE = "/usr/local/lib/python3.12/dist-packages"
STARTUP = (
    "[2026-12-03 09:00:00] server_args=ServerArgs(model_path='/models/Qwen3-32B', tp_size=2, "
    "mem_fraction_static=0.85, speculative_algorithm='EAGLE3')\n"
    "[2026-12-03 09:00:05 TP0] Init torch distributed begin.\n"
    "[2026-12-03 09:00:05 TP1] Init torch distributed begin.\n"
    "[2026-12-03 09:00:07 TP0] Load weight begin. avail mem=78.50 GB\n"
    "[2026-12-03 09:00:40 TP0] Load weight end. elapsed=33.00 s, type=Qwen3ForCausalLM, dtype=torch.bfloat16, "
    "avail mem=47.00 GB, mem usage=31.50 GB.\n"
    "[2026-12-03 09:00:41 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 600000, K size: 14.00 GB, "
    "V size: 14.00 GB\n"
    "[2026-12-03 09:00:41 TP0] Memory pool end. avail mem=18.00 GB\n"
)
CAPTURING = STARTUP + (
    "[2026-12-03 09:00:42 TP0] Capture target decode CUDA graph begin. backend=full, bs=[1, 2, 4, 8], "
    "avail mem=17.90 GB\n"
    "[2026-12-03 09:00:42 TP1] Capture target decode CUDA graph begin. backend=full, bs=[1, 2, 4, 8], "
    "avail mem=17.90 GB\n"
)
MAX_TOTAL = (
    "[2026-12-03 09:00:50 TP0] max_total_num_tokens=600000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=48, context_len=40960, available_gpu_mem=17.00 GB\n"
)
CAPTURED = CAPTURING + (
    "[2026-12-03 09:00:45 TP0] Capture target decode CUDA graph end. elapsed=3.00 s, mem usage=0.40 GB, "
    "avail mem=17.50 GB.\n"
) + MAX_TOTAL
HTTP_UP = CAPTURED + (
    "[2026-12-03 09:00:51] INFO:     Started server process [4242]\n"
    "[2026-12-03 09:00:51] INFO:     Waiting for application startup.\n"
    "[2026-12-03 09:00:51] INFO:     Application startup complete.\n"
    "[2026-12-03 09:00:51] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)\n"
    "[2026-12-03 09:00:52] INFO:     127.0.0.1:40000 - \"GET /model_info HTTP/1.1\" 200 OK\n"
    "[2026-12-03 09:00:52 TP0] Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, "
    "#running-req: 0, #queue-req: 0\n"
)
READY = HTTP_UP + "[2026-12-03 09:00:53] The server is fired up and ready to roll!\n"
SIGQUIT = "[2026-12-03 09:01:00] Received sigquit from a child process. It usually means the child failed.\n"


def scheduler_traceback(ts: str, tags: str, frames: list[str], last: str) -> str:
    head = f"[{ts}{tags}] Scheduler hit an exception: Traceback (most recent call last):\n"
    run = f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 3280, in run_scheduler_process\n'
    return head + run + "".join(frames) + last + "\n"


SERVING_FRAMES = [
    "    scheduler.run_event_loop()\n",
    f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 1105, in run_event_loop\n',
    "    self.event_loop_overlap()\n",
    f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 1160, in event_loop_overlap\n',
    "    batch_result = self.run_batch(batch)\n",
    f'  File "{SITE}/sglang/srt/model_executor/model_runner.py", line 2100, in forward_decode\n',
    "    return self.model.forward(\n",
]
CAPTURE_FRAMES = [
    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)\n",
    f'  File "{SITE}/sglang/srt/model_executor/model_runner.py", line 410, in initialize\n',
    "    self.init_cuda_graphs()\n",
    f'  File "{SITE}/sglang/srt/model_executor/cuda_graph_runner.py", line 512, in capture\n',
    "    _capture_one_stream()\n",
]


# --- 1. a line inside a traceback is not an argparse error ------------------------------------------------

LINKER = "/usr/bin/ld: cannot find -lcuda: No such file or directory\ncollect2: error: ld returned 1 exit status\n"
TRITON_BUILD = [
    f'  File "{SITE}/triton/runtime/build.py", line 56, in _build\n',
    "    subprocess.check_call(cc_cmd, stdout=subprocess.DEVNULL)\n",
]
CALLED = ("subprocess.CalledProcessError: Command '['/usr/bin/gcc', '/tmp/tmpa1/main.c', '-O3', '-shared', '-fPIC', "
          "'-lcuda', '-o', '/tmp/tmpa1/cuda_utils.so']' returned non-zero exit status 1.")  # fmt: skip


@pytest.mark.parametrize(
    "log",
    [
        # the compiler's stderr printed while the traceback is being written
        CAPTURING + scheduler_traceback("2026-12-03 09:00:44", " TP0", CAPTURE_FRAMES + TRITON_BUILD, LINKER + CALLED),
        # ... before the scheduler's traceback
        CAPTURING + LINKER + scheduler_traceback("2026-12-03 09:00:44", " TP0", CAPTURE_FRAMES + TRITON_BUILD, CALLED),
        # ... inside a multi-line exception message (torch inductor's), after its exception line
        CAPTURING + scheduler_traceback(
            "2026-12-03 09:00:44", " TP0", CAPTURE_FRAMES,
            "torch._inductor.exc.CppCompileError: C++ compile error\n\nCommand:\ng++ /tmp/torchinductor/c2.cpp "
            "-shared -fPIC -lcuda -o /tmp/torchinductor/c2.so\n\nOutput:\n" + LINKER.rstrip("\n"),
        ),
    ],
    ids=["inside-the-traceback", "before-the-traceback", "inside-the-exception-message"],
)
def test_a_linker_error_inside_a_failed_capture_is_not_an_argparse_error(log: str) -> None:
    state = track_text(log + SIGQUIT)
    error = state.error
    assert (error.kind, error.phase) == ("capture_failed", "capture")
    assert "collect2" not in error.message and "server arguments" not in error.hint
    assert state.phase("capture").status == "failed" and state.captures[0].status == "failed"
    assert state.phase("server_args").status == "done"


def test_an_argparse_error_counts_before_any_sglang_line_or_right_after_a_usage_block() -> None:
    bare = track_text("launch_server.py: error: argument --tp-size: invalid int value: 'two'\n")
    assert (bare.error.kind, bare.error.phase) == ("invalid_server_args", "server_args")
    usage = (
        "[2026-12-03 08:59:59] WARNING: a launcher's own line before the launch\n"
        "usage: sglang serve [-h] --model-path MODEL_PATH\n"
        "                    [--tokenizer-path TOKENIZER_PATH]\n"
        "sglang serve: error: unrecognized arguments: --num-speculative-tokens 4\n"
    )
    after_usage = track_text(STARTUP + usage)  # a second launch in the same log, after a first one's lines
    assert after_usage.error.kind == "unrecognized_arguments"
    stray = track_text(STARTUP + "collect2: error: ld returned 1 exit status\n")
    assert stray.error is None and stray.state == "starting"


def test_an_error_blamed_on_an_earlier_phase_does_not_finish_the_phase_that_failed() -> None:
    """A traceback whose deepest frame is in server_args.py, raised during a capture of a log that does not
    begin with the server_args line (an excerpt): the capture stays failed."""
    frames = CAPTURE_FRAMES + [f'  File "{SITE}/sglang/srt/server_args.py", line 5000, in get_global_server_args\n',
                               "    raise ValueError(\"server args not set\")\n"]  # fmt: skip
    excerpt = CAPTURING.split("\n", 1)[1]
    state = track_text(excerpt + scheduler_traceback("2026-12-03 09:00:44", " TP0", frames,
                                                     "ValueError: server args not set"))  # fmt: skip
    assert state.state == "failed" and state.error.phase == "server_args"
    assert state.phase("capture").status == "failed" and state.captures[0].status == "failed"


# --- 2. the first death is the cause ---------------------------------------------------------------------

LIFESPAN_CRASH = (
    "[2026-12-03 09:00:46] ERROR:    Traceback (most recent call last):\n"
    f'  File "{SITE}/starlette/routing.py", line 694, in lifespan\n'
    "    async with self.lifespan_context(app) as maybe_state:\n"
    f'  File "{SITE}/sglang/srt/entrypoints/http_server.py", line 212, in lifespan\n'
    "    scheduler_init_result.wait_for_ready()\n"
    f'  File "{SITE}/sglang/srt/entrypoints/engine.py", line 1390, in _wait_for_scheduler_ready\n'
    "    raise _scheduler_died_error(i, scheduler_procs[i])\n"
    "RuntimeError: Rank 0 scheduler died during initialization (exit code: 255). If exit code is -9 (SIGKILL), a "
    "common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.\n"
    "\n"
    "[2026-12-03 09:00:46] ERROR:    Application startup failed. Exiting.\n"
)
NVSHMEM = (
    "/sgl-workspace/nvshmem/src/host/transport/transport.cpp:nvshmemi_transport_init:275: init failed for "
    "transport: IBGDA\n"
    "/sgl-workspace/nvshmem/src/host/init/init.cu:nvshmemi_check_state_and_init:1080: nvshmem initialization "
    "failed, exiting\n"
)
TERMINATED = "[2026-12-03 09:00:46] Scheduler or DataParallelController 4321 terminated with 255\n"


def test_a_communication_librarys_init_failure_is_the_cause_not_the_exit_or_the_lifespan_crash() -> None:
    state = track_text(STARTUP + NVSHMEM + TERMINATED + LIFESPAN_CRASH)
    error = state.error
    assert error.message.startswith("/sgl-workspace/nvshmem/src/host/transport/transport.cpp")
    assert error.phase == "kv_cache" and "terminated with 255" in error.hint and "NVSHMEM" in error.hint
    assert "traceback above" not in error.hint
    assert "RuntimeError" not in error.message and "lifespan" not in error.message


def test_with_nothing_before_it_the_exit_itself_is_the_error_and_says_where_to_look() -> None:
    state = track_text(STARTUP + TERMINATED + LIFESPAN_CRASH)
    assert state.error.kind == "exception"
    assert "255" in state.error.message and "Application startup failed" not in state.error.message
    assert "its own error" in state.error.hint and "dmesg" in state.error.hint


def test_a_scheduler_traceback_after_its_consequences_replaces_them() -> None:
    scheduler = scheduler_traceback("2026-12-03 09:00:47", " TP1", CAPTURE_FRAMES,
                                    "RuntimeError: CUDA error: an illegal memory access was encountered")  # fmt: skip
    state = track_text(CAPTURING + TERMINATED + LIFESPAN_CRASH + scheduler)
    assert (state.error.kind, state.error.phase) == ("cuda_error", "capture")
    assert "illegal memory access" in state.error.message


C10_ABORT = (
    "terminate called after throwing an instance of 'c10::OutOfMemoryError'\n"
    "  what():  CUDA out of memory. Tried to allocate 2.50 GiB. GPU {rank} has a total capacity of 79.19 GiB of "
    "which 1.02 GiB is free. Process 4242 has 78.16 GiB memory in use.\n"
    "Exception raised from malloc at /pytorch/c10/cuda/CUDACachingAllocator.cpp:1310 (most recent call first):\n"
    "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f0c4756c1b6 in "
    f"{SITE}/torch/lib/libc10.so)\n"
    "Fatal Python error: Aborted\n"
    "\n"
    "Thread 0x00007f3b2effd640 (most recent call first):\n"
    '  File "/usr/lib/python3.12/threading.py", line 355 in wait\n'
    "\n"
    "Current thread 0x00007f3d8c1f4740 (most recent call first):\n"
    f'  File "{SITE}/sglang/srt/model_executor/cuda_graph_runner.py", line 512 in capture\n'
    "\n"
    "Extension modules: numpy._core._multiarray_umath, torch._C, torch._C._fft (total: 80)\n"
)
CONTROLLER_EOF = (
    "[2026-12-03 09:00:48] DataParallelController hit an exception: Traceback (most recent call last):\n"
    f'  File "{SITE}/sglang/srt/managers/data_parallel_controller.py", line 390, in run_data_parallel_controller_process\n'
    "    controller = DataParallelController(server_args, port_args)\n"
    f'  File "{SITE}/sglang/srt/managers/data_parallel_controller.py", line 160, in launch_tensor_parallel_group\n'
    "    scheduler_info.append(scheduler_pipe_readers[i].recv())\n"
    '  File "/usr/lib/python3.12/multiprocessing/connection.py", line 250, in recv\n'
    "    buf = self._recv_bytes()\n"
    "EOFError\n"
)


@pytest.mark.parametrize(
    "what",
    [None, "  what():  CUDA error: out of memory\n"],
    ids=["c10-OutOfMemoryError", "c10-Error-cuda-error"],
)
def test_a_cpp_abort_on_many_ranks_is_the_cause_not_the_controllers_eof(what: str | None) -> None:
    aborts = "".join(C10_ABORT.format(rank=rank) for rank in range(4))
    if what is not None:
        aborts = "".join(line if "what()" not in line else what for line in aborts.splitlines(keepends=True))
    state = track_text(CAPTURING + aborts + CONTROLLER_EOF + SIGQUIT)
    error = state.error
    assert (error.kind, error.phase) == ("cuda_oom", "capture")
    assert "out of memory" in error.message and "EOFError" not in error.message
    assert "--mem-fraction-static" in error.hint


def test_a_native_crash_with_no_what_line_is_the_cause_and_the_eof_after_it_is_not() -> None:
    segfault = "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f3d8c1f4740 (most recent call first):\n"
    state = track_text(CAPTURING + segfault + CONTROLLER_EOF)
    assert state.error.message == "Fatal Python error: Segmentation fault"
    assert "native" in state.error.hint


def test_another_ranks_lost_peer_does_not_replace_the_first_ranks_error() -> None:
    first = scheduler_traceback("2026-12-03 09:00:44", " TP0", CAPTURE_FRAMES,
                                "AssertionError: cuda graph capture of bs 8 produced no output")  # fmt: skip
    peer = scheduler_traceback(
        "2026-12-03 09:00:45", " TP1", CAPTURE_FRAMES,
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
        "remote process exited or there was a network error, NCCL version 2.21.5",
    )
    state = track_text(CAPTURING + first + peer + SIGQUIT)
    assert state.error.message.startswith("AssertionError: cuda graph capture")


# --- 3. a scheduler's crash after ready fails the server -----------------------------------------------------

ILLEGAL = "RuntimeError: CUDA error: an illegal memory access was encountered"


@pytest.mark.parametrize("order", ["crash-then-sigquit", "sigquit-then-crash"])
def test_a_scheduler_exception_after_ready_fails_the_server(order: str) -> None:
    crash = scheduler_traceback("2026-12-03 09:05:00", " TP0", SERVING_FRAMES, ILLEGAL)
    tail = crash + SIGQUIT.replace("09:01:00", "09:05:00") if order == "crash-then-sigquit" else (
        SIGQUIT.replace("09:01:00", "09:05:00") + crash)  # fmt: skip
    state = track_text(READY + tail)
    assert state.state == "failed" and state.ready_at is not None
    assert (state.error.kind, state.error.phase) == ("cuda_error", "serving")
    assert state.error.message == ILLEGAL
    assert names(state)[-2:] == ["ready", "serving"] and state.phases[-1].status == "failed"
    assert format_summary(state).startswith("SGLang startup: FAILED (while serving; had been ready after 53.0s)")


@pytest.mark.parametrize("process", ["DataParallelController", "DetokenizerManager"])
def test_any_sglang_process_crashing_after_ready_fails_the_server(process: str) -> None:
    crash = (f"[2026-12-03 09:05:00] {process} hit an exception: Traceback (most recent call last):\n"
             f'  File "{SITE}/sglang/srt/managers/x.py", line 10, in event_loop\n'
             "KeyError: 'rid-1234'\n")  # fmt: skip
    state = track_text(READY + crash)
    assert (state.state, state.error.kind, state.error.phase) == ("failed", "exception", "serving")
    assert state.error.message == "KeyError: 'rid-1234'"


def test_a_failed_request_after_ready_still_leaves_the_server_ready() -> None:
    request = ("[2026-12-03 09:05:00] ERROR:    Exception in ASGI application\n"
               "Traceback (most recent call last):\n"
               f'  File "{SITE}/sglang/srt/entrypoints/http_server.py", line 600, in generate_request\n'
               "ValueError: bad request\n")  # fmt: skip
    state = track_text(READY + request)
    assert (state.state, state.error) == ("ready", None)


# --- 4. a multi-line exception's cause, not its head -------------------------------------------------------

FP8 = "type fp8e4nv not supported in this architecture. The supported fp8 dtypes are ('fp8e4b15', 'fp8e5')"


@pytest.mark.parametrize(
    "message",
    [
        f"triton.compiler.errors.CompilationError: at 1:0:\ndef _per_token_group_quant_fp8(\n^\nValueError(\"{FP8}\")",
        f"triton.compiler.errors.CompilationError: at 12:4:\n    y_s = tl.load(y_s_ptr)\nValueError: {FP8}",
        "torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\nCalledProcessError: Command "
        "'['/usr/bin/gcc', '/tmp/x.c']' returned non-zero exit status 1.\n\nSet TORCH_LOGS=\"+dynamo\" for more",
    ],
    ids=["triton-repr", "triton-type-colon", "inductor-raised"],
)
def test_a_multi_line_exceptions_cause_is_the_message_not_its_head(message: str) -> None:
    state = track_text(CAPTURING + scheduler_traceback("2026-12-03 09:00:44", " TP0", CAPTURE_FRAMES, message)
                       + SIGQUIT)  # fmt: skip
    error = state.error
    cause = message.splitlines()[3 if "ValueError(" in message else 2 if "ValueError:" in message else 1]
    assert error.message.startswith(cause.replace('ValueError("', "ValueError: ").rstrip('")'))
    assert error.phase == "capture" and ("(raised as " in error.message) == ("triton" in message)
    if "fp8e4nv" in message:
        assert "architecture" in error.hint


# --- 5. a kill after "sigquit" is a kill -------------------------------------------------------------------


@pytest.mark.parametrize(
    "kill",
    [
        "[specmon] Server process exited with code -9",
        "Server process exited with code -9 (SIGKILL)",
        "Killed",
        "[2026-12-03 09:01:01] Exit code: -9",
        "Container sglang exited with status 137",
    ],
)
def test_a_kill_after_an_unexplained_sigquit_is_a_kill(kill: str) -> None:
    state = track_text(CAPTURED + SIGQUIT + kill + "\n")
    assert state.error.kind == "killed" and "dmesg" in state.error.hint and "oom" in state.error.hint.lower()


def test_a_kill_after_a_childs_traceback_keeps_the_traceback() -> None:
    crash = scheduler_traceback("2026-12-03 09:00:44", " TP0", CAPTURE_FRAMES, ILLEGAL)
    state = track_text(CAPTURING + crash + SIGQUIT + "Server process exited with code -9\n")
    assert (state.error.kind, state.error.message) == ("cuda_error", ILLEGAL)


# --- 6. hints that send the user the right way ---------------------------------------------------------------


@pytest.mark.parametrize(
    "error",
    [
        "ImportError: cannot import name 'fp8_gemm_nt' from 'deep_gemm' (unknown location)",
        "ModuleNotFoundError: No module named 'flashinfer'",
        f"OSError: {SITE}/sgl_kernel/common_ops.so: undefined symbol: _ZN3c104cuda9SetDevice",
    ],
)
def test_a_missing_or_mismatched_package_is_not_blamed_on_the_model_path(error: str) -> None:
    frames = [CAPTURE_FRAMES[0],
              f'  File "{SITE}/sglang/srt/model_loader/loader.py", line 381, in load_weights_and_postprocess\n',
              "    model.load_weights(weights)\n"]  # fmt: skip
    state = track_text(STARTUP.split("[2026-12-03 09:00:40")[0] + scheduler_traceback(
        "2026-12-03 09:00:20", " TP0", frames, error))  # fmt: skip
    assert state.error.kind == "exception" and state.error.phase == "load_weights"
    assert "--model-path" not in state.error.hint and "package" in state.error.hint


def test_a_router_flag_given_to_the_server_is_said_to_be_the_routers() -> None:
    state = track_text("sglang serve: error: unrecognized arguments: --router-policy cache_aware --worker-urls "
                       "http://10.0.0.2:30000 --reasoning_parser qwen3\n")  # fmt: skip
    hint = state.error.hint
    assert "--router-policy, --worker-urls are flags of SGLang's router" in hint
    assert "use --reasoning-parser instead of --reasoning_parser" in hint
    assert "instead of --router-policy" not in hint and "instead of --worker-urls" not in hint


# --- 7. a crash on SGLang's own warmup request is a startup failure ----------------------------------------


@pytest.mark.parametrize("before", [HTTP_UP, CAPTURED], ids=["http-server-up", "log-level-warning"])
def test_a_scheduler_crash_on_the_warmup_request_is_a_startup_failure(before: str) -> None:
    crash = scheduler_traceback("2026-12-03 09:00:52", " TP0", SERVING_FRAMES, ILLEGAL.replace(
        "CUDA error: an illegal memory access was encountered", "shape '[1, 8, 128]' is invalid for input of size 512"))
    state = track_text(before + crash + SIGQUIT.replace("09:01:00", "09:00:52"))
    error = state.error
    assert state.state == "failed" and state.ready_at is None
    assert (error.kind, error.phase) == ("warmup_failed", "warmup")
    assert "Startup had finished" not in error.hint and "before the server reported ready" in error.hint
    text = format_summary(state)
    assert "FAILED" in text.splitlines()[0] and "Startup had finished" not in text


def test_a_child_that_exited_during_startup_is_no_failure_by_itself() -> None:
    """SGLang's SIGCHLD handler warns of any child's non-zero exit (a JIT compiler's too), and startup goes on."""
    jit = ("[2026-12-03 09:00:43] WARNING engine.py:140: Child process unexpectedly failed with exitcode=1. "
           "pid=5151\n")  # fmt: skip
    state = track_text(CAPTURING + jit + "[2026-12-03 09:00:45 TP0] Capture target decode CUDA graph end. "
                       "elapsed=3.00 s, mem usage=0.40 GB, avail mem=17.50 GB.\n" + MAX_TOTAL)  # fmt: skip
    assert (state.state, state.error) == ("starting", None)
