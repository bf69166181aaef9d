"""How specmon's commands end: bad usage with 2 (``UsageError``, said in one line by ``specmon.cli:main``), and on
SIGINT and SIGTERM always with an exit code (130, 143), never by the signal.

``install`` runs first thing in ``specmon.__main__`` and ``specmon.cli:main`` (the console script), before
the heavy imports: from then on a SIGINT is a KeyboardInterrupt and a SIGTERM a SystemExit(143), which the
commands' ``finally`` blocks (stopping the demo's server) see. ``settle`` runs once ``main`` has its exit code: a
signal that lands later, while the interpreter shuts down, is ignored, for CPython restores the default actions
(death by the signal, exit -2) late in its finalization, and the code is already decided. A SIGTERM that lands
inside a ``__del__``, where Python would print the SystemExit and drop it, is sent again for after it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator

EXIT_USAGE = 2
EXIT_SIGINT = 128 + signal.SIGINT
EXIT_SIGTERM = 128 + signal.SIGTERM


RETRY_IN_FINALIZER_S = 0.01


class UsageError(Exception):
    """Bad usage: an unknown preset or server, a question that cannot be asked. ``specmon.cli:main`` says it in one
    line on stderr (with ``--json``, also ``{"error": ...}`` on stdout) and exits 2."""


def _on_sigterm(signum, frame) -> None:
    if _in_finalizer(frame):
        # Raised in a ``__del__`` (a ``Popen`` reaped as its owner goes away), the SystemExit would be printed as
        # "Exception ignored in" and lost: the signal is sent again, to land once the finalizer has returned.
        retry = threading.Timer(RETRY_IN_FINALIZER_S, os.kill, (os.getpid(), signum))
        retry.daemon = True
        retry.start()
        return
    raise SystemExit(EXIT_SIGTERM)


def _in_finalizer(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def install() -> None:
    """SIGINT raises KeyboardInterrupt, SIGTERM raises SystemExit(143) (main thread only; else a no-op)."""
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread (main() called from a test's thread): leave the handlers alone
        pass


def settle() -> None:
    """The exit code is decided: SIGINT and SIGTERM are ignored from here to the end of the process."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    except ValueError:
        pass


def interrupted_code(exc: BaseException) -> int | None:
    """The exit code of a SIGINT or SIGTERM hidden inside another exception, else None.

    A signal that lands while a class body runs (Textual's imports are full of them) surfaces as
    ``RuntimeError: Error calling __set_name__`` with the KeyboardInterrupt or SystemExit as its cause."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, KeyboardInterrupt):
            return EXIT_SIGINT
        if isinstance(current, SystemExit) and current.code in (EXIT_SIGINT, EXIT_SIGTERM):
            return int(current.code)
        current = current.__cause__ or current.__context__
    return None


@contextlib.contextmanager
def first_interrupt_calls(stop_after_step: Callable[[], None]) -> Iterator[None]:
    """While inside: the first SIGINT (Ctrl+C) calls ``stop_after_step`` (an operation that ends after the step
    under way), a second one raises KeyboardInterrupt as usual. Only on the main thread; elsewhere nothing
    changes."""
    interrupts = 0

    def on_sigint(signum, frame) -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts > 1:
            raise KeyboardInterrupt
        stop_after_step()

    try:
        previous = signal.signal(signal.SIGINT, on_sigint)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
