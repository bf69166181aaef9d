"""Fatal SGLang startup errors: reading tracebacks, classifying the error, saying what to do about it."""

from __future__ import annotations

import math

from specmon.logs.model import ERROR_KINDS
from specmon.logs.patterns import BIND_PORT, MEM_FRACTION, suggest_flag
from specmon.sglang.bounds import FRACTION, lowered_fraction
from specmon.sglang.flags import router_flag

_RANK = {kind: i for i, kind in enumerate(ERROR_KINDS)}

_CUDA_ERROR_MARKS = ("cuda error", "cudaerror", "cublas_status", "cudnn_status", "nccl error", "ncclerror")
# A package or native library that is missing or does not match: the environment, not the model or its flags.
_DEPENDENCY_TYPES = ("ImportError", "ModuleNotFoundError")
_DEPENDENCY_TEXTS = ("cannot open shared object file", "undefined symbol")
# A kernel, dtype or feature this GPU's architecture does not have.
_ARCHITECTURE_TEXTS = (
    "not supported in this architecture", "only supports ampere", "requires compute capability",
    "not supported on this gpu", "unsupported gpu architecture",
)  # fmt: skip


# Traceback frame text -> the phase it shows (checked in order; the deepest matching frame wins, except that
# nothing below the scheduler's serving loop moves the blame back to startup: serving replays the graphs).
_FRAME_PHASES = (
    ("run_event_loop", "serving"),
    ("in event_loop", "serving"),
    ("self.event_loop", "serving"),
    ("speculative_hook", "server_args"),
    ("server_args.py", "server_args"),
    ("prepare_server_args", "server_args"),
    ("_wait_and_warmup", "warmup"),
    ("init_attention_backend", "attention_backend"),  # the backend's setup: its workspaces and graph buffers
    ("_get_attention_backend", "attention_backend"),
    ("init_cuda_graph_state", "attention_backend"),
    ("eagle_draft_extend_cuda_graph_runner", "capture_draft_extend"),
    ("eagle_draft_cuda_graph_runner", "capture_draft"),
    ("piecewise_cuda_graph_runner", "capture_prefill"),
    ("prefill_cuda_graph_runner", "capture_prefill"),
    ("cuda_graph_runner", "capture"),
    ("init_cuda_graphs", "capture"),
    ("weight_utils", "load_weights"),
    ("model_loader", "load_weights"),
    ("load_weights", "load_weights"),
    ("load_model", "load_weights"),
    ("memory_pool", "kv_cache"),
    ("init_memory_pool", "kv_cache"),
    ("pool_configurator", "kv_cache"),
)
_DRAFT_FRAME_MARKS = ("EAGLEWorker", "draft_worker", "eagle_worker", "draft_model_runner", "DraftWorker")
# Frames of code that waits on another process: what it raises there reports that process's death.
_CONSEQUENCE_FRAMES = ("_wait_for_scheduler_ready", "wait_for_ready", "in lifespan", "multiprocessing/connection.py")


class TracebackReader:
    """A Python traceback being read: where it came from and what its frames show.

    ``consequence``: its frames wait on another process (its error is that process's death, not a cause);
    ``scheduler``: a scheduler's own traceback (`Scheduler hit an exception`)."""

    __slots__ = ("origin", "phase", "draft", "speculative", "lines", "consequence", "scheduler")

    def __init__(self, origin: str | None) -> None:
        self.origin = origin
        self.phase: str | None = "warmup" if origin == "warmup" else None
        self.draft = False
        self.speculative = False
        self.lines = 0
        self.consequence = False
        self.scheduler = False

    def see_frame(self, text: str) -> None:
        """Read one indented frame line (``File ...`` or its source line)."""
        if not self.draft and any(mark in text for mark in _DRAFT_FRAME_MARKS):
            self.draft = True
        if not self.speculative and ("specul" in text or "eagle" in text.lower()):
            self.speculative = True
        if not self.consequence and any(mark in text for mark in _CONSEQUENCE_FRAMES):
            self.consequence = True
        if self.phase == "serving":
            return
        for mark, phase in _FRAME_PHASES:
            if mark in text:
                if self.draft and phase == "capture":
                    phase = "capture_draft"
                elif self.draft and phase == "load_weights":
                    phase = "load_draft_weights"
                self.phase = phase
                return


def precedence(kind: str) -> int:
    """Lower is more specific (the order of ``ERROR_KINDS``)."""
    return _RANK.get(kind, len(_RANK))


def classify_exception(message: str, phase: str | None, origin: str | None) -> str:
    """The error kind of a traceback's exception line.

    ``phase`` is where it happened (from the traceback's frames or the tracker's current phase); ``origin`` is
    "warmup" when the traceback was printed by the warmup thread.
    """
    text = message.lower()
    if "out of memory" in text or "outofmemoryerror" in text:
        return "cuda_oom"
    if "not enough memory" in text or "memory pool size is too small" in text:
        return "not_enough_memory"
    if "address already in use" in text or "errno 98" in text:
        return "port_in_use"
    if any(mark in text for mark in _CUDA_ERROR_MARKS):
        return "cuda_error"
    if "capture cuda graph failed" in text or "capture cpu graph failed" in text:
        return "capture_failed"
    exc_type = message.split(":", 1)[0].rsplit(".", 1)[-1]
    if exc_type in _DEPENDENCY_TYPES or any(mark in text for mark in _DEPENDENCY_TEXTS):
        return "exception"  # wherever it was raised: a missing package is neither the weights nor the graphs
    if origin == "warmup" or phase == "warmup":
        return "warmup_failed"
    if phase == "server_args" and exc_type in ("AssertionError", "ValueError", "TypeError"):
        return "invalid_server_args"
    if phase in ("load_weights", "load_draft_weights"):
        return "weight_load"
    if phase is not None and phase.startswith("capture"):
        return "capture_failed"
    return "exception"


def unrecognized_flags(what: str) -> list[str]:
    """The flags named in argparse's `unrecognized arguments: --a 1 --b` text."""
    rest = what.split("unrecognized arguments:", 1)[-1]
    return [token.split("=", 1)[0] for token in rest.split() if token.startswith("-")][:20]


def _lower_fraction(mem_fraction: float | None) -> str | None:
    """"now 0.85; e.g. 0.8": the value a log showed and a lower one still inside (0, 1] (`lowered_fraction`);
    None without a value."""
    if mem_fraction is None:
        return None
    lowered = lowered_fraction(mem_fraction)
    return f"now {mem_fraction:g}" + (f"; e.g. {lowered:g}" if lowered is not None else "")


def _number(value: str | float) -> float:
    try:
        return float(value)
    except ValueError:
        return math.nan


def _no_fraction(value: str | float | None) -> str | None:
    """The hint for a --mem-fraction-static that is no fraction in (0, 1] (lowering or raising it from there
    means nothing), else None."""
    if value is None or FRACTION.contains(_number(value)):
        return None
    return (f"--mem-fraction-static is {value}, which is no fraction in {FRACTION} of the GPU's memory: set it "
            "inside, e.g. 0.8, and start again.")


def hint_for(
    kind: str,
    message: str,
    phase: str | None,
    *,
    speculative: bool = False,
    mem_fraction: float | None = None,
    cuda_graph_flag: str = "--cuda-graph-max-bs",
    scheduler_crash: bool = False,
) -> str:
    """One or two sentences on what to do about an error of ``kind``.

    ``mem_fraction`` is the server's --mem-fraction-static when the log showed it (its server_args line);
    ``cuda_graph_flag`` the flag that caps the captured batch sizes in the SGLang that wrote the log
    (`loglines.cuda_graph_flag`: 0.5.20 renamed it `--cuda-graph-max-bs-decode`); ``scheduler_crash``: the error
    is a scheduler's own traceback (not the warmup thread's, not the parent's).
    """
    if kind == "unrecognized_arguments":
        return _unrecognized_hint(message)
    if any(mark in message.lower() for mark in _ARCHITECTURE_TEXTS):
        return (
            "This GPU's architecture lacks a kernel, dtype or feature the launch needs (e.g. FP8 e4m3 needs compute "
            "capability 8.9+): choose another --quantization, --kv-cache-dtype or --attention-backend, or install "
            "builds of SGLang, sgl-kernel and Triton made for this GPU."
        )
    if kind == "invalid_server_args":
        if speculative and message.strip() in ("AssertionError", "AssertionError:"):
            return (
                "Give --speculative-num-steps, --speculative-eagle-topk and --speculative-num-draft-tokens "
                "together, or none of them (SGLang then chooses all three)."
            )
        return "Fix the server arguments: " + message.split(":", 1)[-1].strip()
    if kind == "port_in_use":
        m = BIND_PORT.search(message)
        port = f"port {m.group(2)}" if m else "the port"
        return (
            f"Something else listens on {port}: choose another --port or stop it. Any ready line after this "
            "came from the other server answering the warmup request."
        )
    if kind == "cuda_oom" and _no_fraction(mem_fraction):
        return _no_fraction(mem_fraction) or ""
    if kind == "cuda_oom":
        if phase is not None and phase.startswith("capture"):
            lower = _lower_fraction(mem_fraction) or "e.g. 0.8 -> 0.7"
            return (
                f"CUDA ran out of memory while capturing graphs: lower --mem-fraction-static ({lower}) "
                f"or {cuda_graph_flag} (e.g. 16) to leave room for the graphs."
            )
        if phase == "attention_backend":
            now = f" ({_lower_fraction(mem_fraction)})" if mem_fraction is not None else ""
            return (
                "CUDA ran out of memory while the attention backend set up its buffers, before any graph was "
                f"captured: lower --mem-fraction-static{now} to leave it room outside the KV cache, lower "
                f"{cuda_graph_flag} (its graph buffers grow with the largest batch), or try another "
                "--attention-backend."
            )
        if phase in ("load_weights", "load_draft_weights"):
            return (
                "The weights do not fit: use more GPUs (--tp), a quantized checkpoint, or free the GPU from "
                "other processes."
            )
        return (
            "CUDA ran out of memory: lower --mem-fraction-static (leaves more for activations), "
            "--chunked-prefill-size or --max-running-requests."
        )
    if kind == "not_enough_memory":
        m = MEM_FRACTION.search(message)
        value = m.group(1) if m else (f"{mem_fraction:g}" if mem_fraction is not None else None)
        current = f" (now {value})" if value else ""
        if _no_fraction(value):
            return _no_fraction(value) or ""
        if value is not None and FRACTION.contains(_number(value)) and _number(value) >= 1:
            return (
                "The KV cache does not fit although --mem-fraction-static is already 1: use more GPUs, a quantized "
                "checkpoint or a shorter --context-length."
            )
        return (
            f"The KV cache does not fit in what is left: raise --mem-fraction-static{current}, "
            "or use more GPUs or a shorter --context-length."
        )
    if kind == "cuda_error":
        if "HSA_STATUS" in message or "Xid" in message or "fallen off the bus" in message:
            where = "while serving" if phase == "serving" else f"during {phase}" if phase else ""
            return (
                f"The GPU itself faulted {where} (an AMD HSA hardware exception or an NVIDIA Xid): the server "
                "cannot recover. Check `dmesg` for the Xid (or the HSA error) and the GPU's health (nvidia-smi -q, "
                "rocm-smi), reset or drain that GPU, then restart the server."
            ).replace("  ", " ")
        if "no kernel image" in message or "NoKernelImage" in message:
            return (
                "A kernel was not built for this GPU's architecture (no kernel image): install an SGLang / "
                "sgl-kernel / flash-attention build for this GPU, or choose another --attention-backend."
            )
        return (
            "A CUDA error: check the driver and GPU health (nvidia-smi); retry with --disable-cuda-graph or "
            "another --attention-backend to isolate it."
        )
    if kind == "weight_load":
        if phase == "load_draft_weights":
            return (
                "The draft checkpoint does not match the draft model class: check that "
                "--speculative-draft-model-path is a draft made for this target and algorithm (EAGLE vs EAGLE3) "
                "and that this SGLang version reads its weight names."
            )
        return "Loading the weights failed: check --model-path, the checkpoint files, --load-format and --quantization."
    if kind == "capture_failed":
        text = message.lower()
        if "shapes cannot be multiplied" in text or "size mismatch" in text:
            return (
                "Graph capture hit a shape mismatch: the draft model most likely does not match the target "
                "(hidden size); check --speculative-draft-model-path. --disable-cuda-graph confirms it."
            )
        return (
            "CUDA-graph capture failed: retry with --disable-cuda-graph to confirm, then lower "
            f"{cuda_graph_flag} or --mem-fraction-static."
        )
    if kind == "warmup_failed":
        if scheduler_crash:
            return (
                "A scheduler crashed on SGLang's own warmup request, before the server reported ready: startup "
                "failed, and a real request would crash it the same way (--skip-server-warmup only defers it). "
                "Read the scheduler's traceback above."
            )
        if "502" in message or "503" in message or "proxy" in message.lower():
            return (
                "The warmup request to the server's own port got an HTTP error from something else, usually an "
                "HTTP proxy: set NO_PROXY=127.0.0.1,localhost (or unset http_proxy)."
            )
        return "The server started but its warmup request failed; --skip-server-warmup starts it anyway."
    if kind == "killed":
        silent = "leaked" in message and "without logging" in message
        how = "The server died without a word, as a SIGKILLed one does" if silent else "The process was killed (SIGKILL)"
        return (
            f"{how}, often by the OS out-of-memory killer: check `dmesg -T | grep -i oom` and reduce host "
            "memory use (or find who sent the kill)."
        )
    return _exception_hint(message, phase)


def _unrecognized_hint(message: str) -> str:
    router, fixes = [], []
    for flag in unrecognized_flags(message):
        if router_flag(flag):
            router.append(flag)
            continue
        right = suggest_flag(flag)
        if right:
            fixes.append(f"use {right} instead of {flag}")
    if router:
        fixes.insert(0, f"{', '.join(router)} {'is a flag' if len(router) == 1 else 'are flags'} of SGLang's router, "
                        "not of the server: give it to `python -m sglang_router.launch_router` (or launch both "
                        "with `python -m sglang_router.launch_server`), or drop it")  # fmt: skip
    if fixes:
        return "Not an SGLang flag: " + "; ".join(fixes) + "."
    return "Remove the unknown flag, or check `--help` of this SGLang version (flags change between versions)."


def _exception_hint(message: str, phase: str | None) -> str:
    text = message.lower()
    exc_type = message.split(":", 1)[0].rsplit(".", 1)[-1]
    if exc_type in _DEPENDENCY_TYPES or any(mark in text for mark in _DEPENDENCY_TEXTS):
        return (
            "A Python package or native library that this launch needs is missing or does not match (often an "
            "optional backend's: a kernel library, an attention or MoE backend, a quantization method): install "
            "the version this SGLang pins, or choose a backend or --quantization that does not need it."
        )
    if "fatal python error" in text or "terminate called" in text:
        return (
            "A process died in native (C++/CUDA) code, with no Python exception: the lines just before it (a "
            "`what():`, a library's error) say why; if none does, --disable-cuda-graph or another "
            "--attention-backend isolates a crashing kernel."
        )
    if "terminated with" in text or "scheduler is dead" in text or "scheduler died" in text or "eoferror" in text:
        return (
            "A scheduler process died and the others noticed (its pipe closed): its own error, above or in another "
            "rank's or node's log, is the cause; with none, it was killed or crashed in native code (check "
            "`dmesg -T | grep -i -e oom -e xid`)."
        )
    if "sigquit" in text:
        return (
            "A child process (a scheduler or the detokenizer) failed and its parent shut the server down: "
            "its traceback, often from another rank or node, says why."
        )
    if phase == "serving":
        if "closed by peer" in text or "reset by peer" in text or "connection refused" in text:
            return (
                "Startup had finished; serving stopped when another rank or node of this server went away "
                "(connection closed by peer): that node's log says why it died first."
            )
        return (
            "Startup had finished; the server failed while serving (in its scheduler loop), not while starting: "
            "read the traceback above."
        )
    where = f" during {phase}" if phase else ""
    return f"The server stopped with an exception{where}; read the traceback above."
