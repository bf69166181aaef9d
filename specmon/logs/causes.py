"""Which of a failing server's error lines is the cause and which are its consequences.

A server dies one process at a time: the first death (a scheduler's traceback, a C++ abort, a communication
library giving up) is the cause; what follows it (the parent's "sigquit", "Scheduler ... terminated with 255",
the controller's `EOFError` on the pipe of the dead process, the HTTP server's lifespan crash, other ranks losing
their peer) only says that something died. The tracker keeps the cause: a consequence never replaces it.

Each error the tracker records has a level: a PLACEHOLDER (a line that only says something failed, or a traceback
still awaiting its exception line) is replaced by anything more telling; a SYMPTOM (a consequence's exception,
or a failure read from the lines before a consequence) is replaced by a cause; a CAUSE is replaced only by a more
specific cause (``errors.precedence``).
"""

from __future__ import annotations

import re

from specmon.logs.errors import precedence
from specmon.logs.patterns import EXCEPTION_LINE

PLACEHOLDER, SYMPTOM, CAUSE = 0, 1, 2


def outranks(kind: str, level: int, current_kind: str, current_level: int, *, from_traceback: bool,
             traceback_open: bool) -> bool:
    """Whether a new error (``kind`` at ``level``) replaces the current one.

    A traceback's exception line replaces a placeholder (its own header, or a parent's "a child failed"); a kill
    replaces a placeholder no open traceback owns (a "sigquit" that nothing explained, then exit code -9)."""
    if current_level == CAUSE:
        return level == CAUSE and precedence(kind) < precedence(current_kind)
    if current_level == SYMPTOM:
        return level == CAUSE and (from_traceback or precedence(kind) <= precedence(current_kind))
    if from_traceback or precedence(kind) <= precedence(current_kind):
        return True
    return kind == "killed" and level == CAUSE and not traceback_open


# --- consequences -----------------------------------------------------------------------------------------

# Lines that only say that another process died: SGLang's parent and DP controller, uvicorn's lifespan.
_CONSEQUENCE_LINE = re.compile(
    r"Scheduler or DataParallelController \d+ terminated with (-?\d+)"
    r"|Rank \d+ scheduler (?:is dead|died)"
    r"|Application startup failed"
)  # not the SIGCHLD handler's `Child process unexpectedly failed` warning: any child, a JIT compiler's too
# An exception that reports another process's death, not its own failure.
_CONSEQUENCE_TEXT = (
    "EOFError", "BrokenPipeError", "ConnectionResetError", "ConnectionAbortedError", "scheduler died",
    "scheduler is dead", "remote process exited", "closed by peer", "reset by peer", "communicator was aborted",
    "Watchdog caught collective operation timeout", "Please see the error messages above",
)  # fmt: skip


def consequence_line(msg: str) -> re.Match[str] | None:
    """A line saying that a process died (its exit code in group 1 when it gives one), or None."""
    if (  # each of _CONSEQUENCE_LINE's forms holds one of these
        "terminated with" not in msg
        and "scheduler is dead" not in msg
        and "scheduler died" not in msg
        and "Application startup failed" not in msg
    ):
        return None
    return _CONSEQUENCE_LINE.search(msg)


def consequence_exception(message: str) -> bool:
    """Whether an exception's message reports another process's death (a pipe closed, a peer gone)."""
    return any(mark in message for mark in _CONSEQUENCE_TEXT)


# --- deaths without a Python traceback ----------------------------------------------------------------------

_WHAT = re.compile(r"^\s*what\(\):\s+(.+)$")
_TERMINATE = re.compile(r"terminate called after throwing an instance of '([^']{1,200})'")
_FATAL_PYTHON = re.compile(r"^Fatal Python error: (.+)$")


def native_what(msg: str) -> str | None:
    """The message of a C++ exception that ended a process (`  what():  CUDA out of memory. ...`), or None."""
    if "what()" not in msg:
        return None
    m = _WHAT.match(msg)
    return m.group(1).strip() if m is not None else None


def native_death(msg: str) -> str | None:
    """A process dying in native code: `Fatal Python error: Aborted`, `terminate called after throwing an
    instance of 'c10::Error'` (its `what():` line follows), or None."""
    if "Fatal" in msg:
        m = _FATAL_PYTHON.match(msg.strip())
        if m is not None:
            return m.group(0)
    if "terminate called" in msg:
        m = _TERMINATE.search(msg)
        if m is not None:
            return m.group(0)
    return None


_FAILURE_WORDS = re.compile(r"\b(?:failed|failure|fatal|error|abort(?:ed|ing)?|segmentation fault)\b", re.IGNORECASE)


_FAILURE_MARKS = re.compile("ail|AIL|rror|RROR|atal|ATAL|bort|BORT|fault")  # cheap test before _FAILURE_WORDS


def failure_words(level: str | None, msg: str) -> bool:
    """Whether a line that nothing else recognised says that something failed (a communication library giving
    up before its process exits, `nvshmem initialization failed, exiting`): the cause a consequence names."""
    if level in ("INFO", "DEBUG", "WARNING") or _FAILURE_MARKS.search(msg) is None:
        return False
    if "arning" in msg or "WARN" in msg:
        return False
    return len(msg) < 2000 and _FAILURE_WORDS.search(msg) is not None


# --- one process's crash, after ready -----------------------------------------------------------------------

_CRASHED = re.compile(r"\b(Scheduler|DataParallelController|DetokenizerManager|TokenizerManager) hit an exception")


def process_crash(msg: str) -> str | None:
    """The SGLang process whose crash this line reports (`Scheduler hit an exception: Traceback ...`), or None:
    it is gone, and the server with it."""
    if "hit an exception" not in msg:
        return None
    m = _CRASHED.search(msg)
    return m.group(1) if m is not None else None


# --- a multi-line exception message -------------------------------------------------------------------------

_REPR_EXCEPTION = re.compile(r"((?:[A-Za-z_]\w*\.)*\w*(?:Error|Exception))\((['\"])(.*)\2\)$")


def continues(message: str) -> bool:
    """Whether an exception line's message goes on over the next lines to its cause (`CompilationError: at 1:0:`,
    `BackendCompilerFailed: backend='inductor' raised:`)."""
    return message.rstrip().endswith(":")


def cause_line(line: str) -> str | None:
    """A line inside a multi-line exception message that names the cause (`ValueError: type fp8e4nv not
    supported in this architecture`, or its repr `ValueError("type fp8e4nv ...")`), as `Type: message`."""
    text = line.strip()
    if not text or len(text) > 2000:
        return None
    m = _REPR_EXCEPTION.match(text)
    if m is not None:
        return f"{m.group(1)}: {m.group(3)}"
    m = EXCEPTION_LINE.match(text)
    if m is not None and m.group(2):
        return text
    return None
