"""How StartupTracker reads a failing server's lines: tracebacks, deaths without one, consequences, argparse.

``FailureReading`` is a part of ``StartupTracker`` (a mixin, a ``parts.TrackerPart``: it reads and changes the
tracker's state through the tracker's own helpers, ``_enter``, ``_phase_name``, ``_emit`` ...). Which error is
the cause and which its consequence is decided by ``specmon.logs.causes``; what each error means and what to
do, by ``errors``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from specmon.logs import patterns
from specmon.logs.causes import (
    CAUSE,
    PLACEHOLDER,
    SYMPTOM,
    cause_line,
    consequence_exception,
    consequence_line,
    continues,
    failure_words,
    native_death,
    native_what,
    outranks,
    process_crash,
)
from specmon.logs.errors import TracebackReader, classify_exception, hint_for
from specmon.logs.model import PHASE_NAMES, LineKind, StartupError, StartupFailed
from specmon.logs.parts import TrackerPart
from specmon.sglang import loglines

_MAX_TRACEBACK_LINES = 400
_CONTINUATION_LINES = 12  # how far past a multi-line exception's head its cause is looked for
_CANDIDATE_LINES = 30  # how recent a failure line must be to be the cause a consequence names
_PHASE_ORDER = {name: i for i, name in enumerate(PHASE_NAMES)}


def kill_evidence(msg: str) -> bool:
    """Whether the line says a process died of signal 9 (``Killed``, ``exit code -9``, ``SIGKILL``...)."""
    for mark in patterns.KILL_MARKS:  # a loop, not any(): this runs for most lines of a log
        if mark in msg:
            break
    else:
        return False
    if msg.isascii():  # each match holds one of these, in any case (the case-blind search is slow on a long line)
        low = msg.lower()
        if "kill" not in low and "exit" not in low and "signal 9" not in low:
            return False
    return patterns.KILL_EVIDENCE.search(msg) is not None


def gpu_fault(msg: str) -> bool:
    """Whether the line says the GPU itself faulted (an HSA hardware exception, an NVIDIA Xid)."""
    for mark in patterns.GPU_FAULT_MARKS:
        if mark in msg:
            return patterns.GPU_FAULT.search(msg) is not None
    return False


def _leaked_message(msg: str, at: int) -> str:
    """The resource_tracker warning as an error message, without the file path before it."""
    start = msg.rfind("resource_tracker:", 0, at)
    return "the server died without logging an error; its last line: " + msg[start if start >= 0 else at :].strip()


@dataclass
class _Continuation:
    """The lines after a multi-line exception's head (`CompilationError: at 1:0:`), where its cause is."""

    head: str
    phase: str | None
    origin: str | None
    left: int = _CONTINUATION_LINES


class FailureReading(TrackerPart):
    """The failure side of ``StartupTracker``, which it is a base of (see the module docstring). Its own fields
    are set by ``_init_failures``; what it uses of the tracker and of the other parts is declared by
    ``parts.TrackerPart``."""

    def _init_failures(self) -> None:
        self._tb = None
        self._level = CAUSE  # how telling the current error is (``causes``): what may replace it
        self._continuation: _Continuation | None = None
        self._candidate: tuple[int, str] | None = None  # (lines_seen, text): a failure line nothing recognised
        self._usage_line = -2  # lines_seen of the last line of an argparse `usage:` block
        self._native_type: str | None = None  # the C++ exception type a `terminate called ...` line named

    # --- lines before the end -----------------------------------------------------------------------------

    def _failure_line(self, level: str | None, msg: str) -> LineKind | None:
        st = self._state
        if "Traceback (most recent call last)" in msg:
            origin = "warmup" if "warmup" in msg else None
            tb = self._tb = TracebackReader(origin)
            tb.scheduler = process_crash(msg) == "Scheduler"
            self._fail("exception", msg.strip(), self._phase_name(), level=PLACEHOLDER)
            return "error"
        if "address already in use" in msg:
            self._fail("port_in_use", msg.strip(), "http_server")
            return "error"
        if msg.startswith("usage: ") or (self._usage_line == st.lines_seen - 1 and msg[:1] in (" ", "\t")):
            self._usage_line = st.lines_seen  # argparse's usage block: its error line follows
            return None
        if ": error: " in msg and self._argparse_may_fail():
            m = patterns.ARGPARSE_ERROR.match(msg)
            if m is not None:
                what = m.group(1)
                error_kind = "unrecognized_arguments" if "unrecognized arguments" in what else "invalid_server_args"
                self._fail(error_kind, msg.strip(), "server_args")
                return "error"
        if kill_evidence(msg):
            self._fail("killed", msg.strip(), self._phase_name())
            return "error"
        if "igquit" in msg or "IGQUIT" in msg:
            # the parent saw a child fail: the child's traceback (before or after this line) says why
            self._fail("exception", msg.strip(), self._phase_name(), level=PLACEHOLDER)
            return "error"
        if "leaked" in msg:
            m = patterns.LEAKED_AT_EXIT.search(msg)
            if m is not None:
                self._fail("killed", _leaked_message(msg, m.start()), self._phase_name(), level=PLACEHOLDER)
                return "error"
        if gpu_fault(msg):
            self._fail("cuda_error", msg.strip(), self._phase_name())
            return "error"
        if "what()" in msg or "Fatal" in msg or "terminate called" in msg:
            kind = self._native(msg)
            if kind is not None:
                return kind
        if "CUDA e" in msg or "CUDA E" in msg or "cudaError" in msg:  # what CUDA_ERROR_LINE needs
            kind = self._cuda_error_line(level, msg)
            if kind is not None:
                return kind
        if "SIGTERM received" in msg:
            self._stopped("shutdown")
            return "phase"
        died = consequence_line(msg)
        if died is not None:
            self._consequence(msg, died.group(1))
            return "error"
        if msg.startswith("Initialization failed"):
            self._fail("exception", msg.strip(), self._phase_name(), level=PLACEHOLDER)
            return "error"
        if msg[:1] not in (" ", "\t") and (
            "out of memory" in msg or "Not enough memory" in msg or "graph failed" in msg
        ):
            m = patterns.EXCEPTION_LINE.match(msg.strip())
            if m is not None:
                phase = self._phase_name()
                self._fail(classify_exception(msg, phase, None), msg.strip(), phase)
                return "error"
        candidate = self._candidate
        if (candidate is None or candidate[0] < st.lines_seen - _CANDIDATE_LINES) and (
            self._tb is None and failure_words(level, msg)
        ):
            self._candidate = (st.lines_seen, msg.strip()[:500])  # the first of a run: the first death
        return None

    def _argparse_may_fail(self) -> bool:
        """An argparse error (`prog: error: ...`) ends a launch before SGLang logs a line, or right after its
        `usage:` block; the same words anywhere else (`collect2: error: ld returned 1 exit status` inside an
        exception) are another program's."""
        if self._tb is not None or self._continuation is not None:
            return False
        st = self._state
        return self._usage_line == st.lines_seen - 1 or (st.first_ts is None and not st.phases and st.error is None)

    def _native(self, msg: str) -> LineKind | None:
        """A process dying in C++ code, with no Python traceback: its `what():` is the error."""
        what = native_what(msg)
        if what is not None:
            phase = self._phase_name()
            message = f"{self._native_type}: {what}" if self._native_type else what
            level = SYMPTOM if consequence_exception(what) else CAUSE
            self._fail(classify_exception(message, phase, None), message, phase, level=level)
            return "error"
        death = native_death(msg)
        if death is None:
            return None
        if death.startswith("terminate"):
            self._native_type = death.rsplit(" ", 1)[-1].strip("'")
            return "error"
        self._fail("exception", death, self._phase_name(), level=SYMPTOM)  # `Fatal Python error: Aborted`
        return "error"

    def _consequence(self, msg: str, code: str | None) -> None:
        """A line saying that a process died (`Scheduler or DataParallelController 123 terminated with 255`): the
        cause is what that process said before, a failure line just before this one, else this line itself."""
        phase = self._phase_name()
        if code in ("-9", "137") or kill_evidence(msg):
            self._fail("killed", msg.strip(), phase, level=PLACEHOLDER)
            return
        candidate = self._candidate
        if candidate is not None and candidate[0] >= self._state.lines_seen - _CANDIDATE_LINES:
            cause = candidate[1]
            self._fail(classify_exception(cause, phase, None), cause, phase, level=SYMPTOM, after=msg.strip())
            return
        self._fail("exception", msg.strip(), phase, level=PLACEHOLDER)

    def _cuda_error_line(self, level: str | None, msg: str) -> LineKind | None:
        """A CUDA error printed by C++ code (a kernel, c10), not by a Python traceback: it fails the phase."""
        if level == "WARNING" or "arning" in msg or patterns.CUDA_ERROR_LINE.search(msg) is None:
            return None
        phase = self._phase_name()
        self._fail(classify_exception(msg, phase, None), msg.strip(), phase)
        return "error"

    def _warmup_failed(self, msg: str) -> LineKind:
        """SGLang's own warmup request failed: the Python server's `Initialization failed. warmup error`, whose
        traceback may follow it (then the line is a placeholder for the traceback's error), or 0.5.22+'s Rust
        server's one line, `startup warmup failed ... error=...`."""
        self._enter("warmup")
        if not msg.startswith("Initialization failed. warmup error"):
            self._fail("warmup_failed", msg.strip(), "warmup", level=SYMPTOM)
            return "error"
        self._fail("warmup_failed", msg, "warmup", level=PLACEHOLDER if "Traceback" in msg else SYMPTOM)
        if "Traceback" in msg:
            self._tb = TracebackReader("warmup")
        return "error"

    # --- tracebacks ---------------------------------------------------------------------------------------

    def _traceback_line(self, tb: TracebackReader, tags: str, level: str | None, msg: str) -> LineKind | None:
        """Read a line while a traceback is open; returns None when the line is not part of it."""
        tb.lines += 1
        if tb.lines > _MAX_TRACEBACK_LINES:
            self._tb = None
            return None
        if tags or level is not None:
            return None  # another process's log line interleaved with the traceback
        first = msg[:1]
        if first == " " or first == "\t":
            if "what()" in msg and native_what(msg) is not None:
                self._tb = None  # a C++ abort's message (`  what():  ...`), not a frame: another process died
                return None
            before = tb.phase
            tb.see_frame(msg)
            if tb.phase != before:
                self._refine_provisional(tb)
            return "error"
        if not msg or msg.startswith(("Traceback", "During handling", "The above exception")):
            return "error"
        m = patterns.EXCEPTION_LINE.match(msg.rstrip())
        if m is None:
            return None
        self._tb = None
        if self._ready and not self._over:
            return "error"
        phase = self._startup_phase(tb.phase or self._phase_name())
        message = msg.strip()
        kind = classify_exception(message, phase, tb.origin)
        telling = SYMPTOM if tb.consequence or tb.origin == "warmup" or consequence_exception(message) else CAUSE
        self._fail(kind, message, phase, level=telling, speculative=tb.speculative, from_traceback=True,
                   scheduler_crash=tb.scheduler)  # fmt: skip
        if continues(m.group(2) or "") and self._state.error is not None and self._state.error.message == message:
            self._continuation = _Continuation(message, phase, tb.origin)
        return "error"

    def _continued(self, tags: str, level: str | None, msg: str) -> LineKind | None:
        """A line after a multi-line exception's head: the cause it names replaces the head as the message."""
        cont = self._continuation
        if tags or level is not None or cont is None or cont.left <= 0 or msg.startswith(
            ("Traceback", "During handling", "The above exception")
        ):
            self._continuation = None
            return None
        cont.left -= 1
        cause = cause_line(msg)
        if cause is None:
            return "error"
        self._continuation = None
        error = self._state.error
        if error is None or error.message != cont.head:
            return "error"
        head_type = cont.head.split(":", 1)[0]
        message = f"{cause} (raised as {head_type})"[:500]
        kind = classify_exception(f"{cause} {cont.head}", cont.phase, cont.origin)
        self._state.error = replace(error, kind=kind, message=message, hint=self._hint(kind, message, cont.phase))
        self._emit(StartupFailed(error=replace(self._state.error)))
        return "error"

    def _refine_provisional(self, tb: TracebackReader) -> None:
        """A traceback with no exception line yet: let its frames say where it happened."""
        error = self._state.error
        if error is None or self._level != PLACEHOLDER or error.kind != "exception" or tb.phase is None:
            return
        phase = self._startup_phase(tb.phase)
        kind = classify_exception("", phase, tb.origin)
        self._state.error = replace(error, kind=kind, phase=phase, hint=self._hint(kind, error.message, phase))
        self._blame(phase)
        self._emit(StartupFailed(error=replace(self._state.error)))

    def _startup_phase(self, phase: str | None) -> str | None:
        """The phase of an error in the scheduler's serving loop: serving once the server was ready (or on a worker
        node, which serves without a ready line), else startup's last step, SGLang's own warmup request."""
        st = self._state
        if phase != "serving" or st.ready_at is not None or st.phase("serving") is not None:
            return phase
        head = self._seen_rank0 or any(map(patterns.is_rank_zero, self._load_count))  # untagged: one GPU
        return "warmup" if head or st.phase("http_server") is not None or st.phase("warmup") is not None else phase

    # --- lines after ready, and after the end -------------------------------------------------------------

    def _after_ready(self, level: str | None, msg: str) -> LineKind | None:
        if gpu_fault(msg):  # the server dies of it: a GPU fault, not a plain death
            self._ready = False
            self._fail("cuda_error", msg.strip(), "serving")
            return "error"
        if "address already in use" in msg:
            self._ready = False
            self._state.state = "starting"
            self._fail("port_in_use", msg.strip(), "http_server")
            return "error"
        if process_crash(msg) is not None:
            return self._crashed_serving(msg)
        if "SIGTERM received" in msg or "Gracefully exiting" in msg or "kill_process_tree" in msg:
            self._stopped("shutdown")
            return "phase"
        if (
            "igquit" in msg
            or "IGQUIT" in msg
            or kill_evidence(msg)
            or ("leaked" in msg and patterns.LEAKED_AT_EXIT.search(msg) is not None)
        ):
            self._stopped("died")  # no shutdown was logged: the server died
            return "phase"
        if level == "ERROR" or level == "CRITICAL" or "Traceback (most recent call last)" in msg:
            if "Traceback" in msg:
                self._tb = TracebackReader(None)
            return "error"
        if level == "WARNING" or "arning" in msg:
            return "warning"
        return None

    def _crashed_serving(self, msg: str) -> LineKind:
        """`Scheduler hit an exception` once the server was ready: a process of it is gone, and the server with
        it (its traceback, which follows, says why)."""
        self._ready = False
        if "Traceback" in msg:
            tb = self._tb = TracebackReader(None)
            tb.phase = "serving"
            tb.scheduler = process_crash(msg) == "Scheduler"
        self._fail("exception", msg.strip(), "serving", level=PLACEHOLDER)
        return "error"

    def _after_end(self, level: str | None, msg: str) -> LineKind | None:
        st = self._state
        if st.state == "stopped" and msg.startswith("kill_process_tree called"):
            shutdown = st.current_phase
            if shutdown is not None and shutdown.name == "shutdown" and shutdown.status == "running":
                self._finish_phase(shutdown, "done")  # SGLang's last line: the process tree is gone
            return "phase"
        if st.state == "stopped" and st.stop_cause == "died" and process_crash(msg) is not None:
            return self._death_explained(msg)
        if st.state == "failed":
            if "address already in use" in msg:
                self._fail("port_in_use", msg.strip(), st.error.phase if st.error else None)
                return "error"
            kind = self._failure_line(level, msg)
            if kind is not None:
                return kind
        if level == "ERROR" or level == "CRITICAL":
            return "error"
        if level == "WARNING" or "arning" in msg:
            return "warning"
        return None

    def _death_explained(self, msg: str) -> LineKind:
        """A process's crash logged just after the death it caused (`Received sigquit` came first): the server
        did not just die, it failed while serving."""
        st = self._state
        if st.phases and st.phases[-1].name == "shutdown":
            st.phases.pop()
        st.state, st.stopped_at, st.stop_cause = "ready", None, None
        self._over = False
        return self._crashed_serving(msg)

    # --- recording an error -------------------------------------------------------------------------------

    def _fail(
        self,
        kind: str,
        message: str,
        phase: str | None,
        *,
        level: int = CAUSE,
        speculative: bool = False,
        from_traceback: bool = False,
        scheduler_crash: bool = False,
        after: str | None = None,
    ) -> None:
        """Record an error, unless the one already recorded says more (``causes.outranks``). ``after``: the line
        saying that the process died after it."""
        st = self._state
        if st.state == "stopped" or (self._ready and kind != "port_in_use"):
            return
        current = st.error
        if current is not None and not outranks(
            kind, level, current.kind, self._level, from_traceback=from_traceback, traceback_open=self._tb is not None
        ):
            return
        message = message[:500]
        hint = self._hint(kind, message, phase, speculative=speculative, scheduler_crash=scheduler_crash)
        if after is not None:  # the last line before a process's exit, with no traceback
            died = f"A process exited right after this line, with no Python traceback ({after[:200]})"
            hint = f"{died}. {hint}" if kind != "exception" else (
                f"{died}: this line is why. From a communication library (NCCL, NVSHMEM for DeepEP, Mooncake), "
                "check the network devices and settings it names; else check `dmesg -T`."
            )  # fmt: skip
        st.error = StartupError(kind=kind, message=message, phase=phase, hint=hint, at=self._ts)
        self._level = level
        st.state = "failed"
        self._ready = False
        self._over = True
        now = self.clock
        for capture in st.captures:
            if capture.status == "running":
                capture.status = "failed"
                capture.ended = now
                self._capture_event(capture)
        for weight in st.weights:
            if weight.status == "running":
                weight.status = "failed"
                weight.ended = now
                self._weights_event(weight)
        self._blame(phase)
        self._emit(StartupFailed(error=replace(st.error)))

    def _hint(self, kind: str, message: str, phase: str | None, *, speculative: bool = False,
              scheduler_crash: bool = False) -> str:  # fmt: skip
        fraction = self._state.mem_fraction_static
        flag = loglines.cuda_graph_flag(self._fit.versions)
        return hint_for(kind, message, phase, speculative=speculative, mem_fraction=fraction, cuda_graph_flag=flag,
                        scheduler_crash=scheduler_crash)  # fmt: skip

    def _blame(self, phase: str | None) -> None:
        """Fail `phase` (and whatever still runs); a phase before it that a provisional error failed was done
        (before it in the log and in a startup's order: an error blamed on an earlier phase finishes nothing)."""
        st = self._state
        if phase is not None and st.phase(phase) is None:
            self._enter(phase)
        blamed = next((i for i, entry in enumerate(st.phases) if entry.name == phase), None)
        order = _PHASE_ORDER.get(phase or "", -1)
        for i, entry in enumerate(st.phases):
            if entry.status == "running":
                self._finish_phase(entry, "failed")
            elif (
                entry.status == "failed" and blamed is not None and i < blamed
                and _PHASE_ORDER.get(entry.name, len(_PHASE_ORDER)) < order
            ):  # fmt: skip
                entry.status = "done"
