"""QuietLinuxDriver: Textual's Linux terminal driver with an input thread that sleeps until a key, a mouse event or
the app's exit wakes it. Textual's own wakes ten times a second (``select(0.1)``) to look at its exit flag: at idle
that is 0.1 % of a core, a fifth of what the whole app may cost idle. Its parser's timeouts (a lone Esc is a key
once ``ESCDELAY`` has passed with nothing after it) are still served: after any input the thread looks every
``INPUT_TICK_S`` until ``SETTLE_S`` passed with none.

Written for Textual 8.2.8 (pinned ``<9``); reaches into ``textual._parser``, ``textual._xterm_parser`` and
``LinuxDriver._get_terminal_size``/``run_input_thread``. Upstream: the input thread's ``select(0.1)`` has no
issue of its own (its wake-up is how Textual looks at its exit flag); the terminal size taken from stale
``$COLUMNS``/``$LINES`` is Textualize/textual#6153 (open). After ``App.suspend`` (the fleet's drill-down) the
driver starts again with a new wake pipe. Drop each part when Textual's own does the same."""

from __future__ import annotations

import asyncio
import contextlib
import os
import selectors
import signal
import sys
import threading
import time
from codecs import getincrementaldecoder
from typing import Any

from textual import constants
from textual._parser import ParseError
from textual._xterm_parser import XTermParser
from textual.app import App
from textual.drivers.linux_driver import LinuxDriver

EXIT_SIGNALS = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)
"""The signals that end the app as q does (a hang-up: `kill -HUP`, or the SSH link's end)."""
INPUT_TICK_S = 0.1
"""How often the parser is looked at while input may still be completing (Textual's own cadence)."""
SETTLE_S = max(1.0, 10 * constants.ESCAPE_DELAY)
"""How long after the last input the thread keeps looking; then it sleeps until the next input or the exit."""
SUSPENDED_PROGRAM_EXIT_S = 5.0
"""How long a program run while suspended has to end after the app's own end sent it SIGTERM (then SIGKILL)."""


class WakingEvent(threading.Event):
    """A ``threading.Event`` that also writes to a pipe when set, so a thread blocked in ``select`` wakes."""

    def __init__(self, wake_fd: int) -> None:
        super().__init__()
        self.wake_fd = wake_fd

    def set(self) -> None:
        super().set()
        if self.wake_fd >= 0:  # -1 once the driver closed the pipe (its number may belong to another file since)
            with contextlib.suppress(OSError):  # the pipe is full: it is woken already
                os.write(self.wake_fd, b"x")


class QuietLinuxDriver(LinuxDriver):
    """Textual's ``LinuxDriver``, its input thread blocked while nothing comes in (see the module's docstring)."""

    exit_event: WakingEvent

    def __init__(self, app: App[Any], **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._wake_r = self._wake_w = -1
        self.exit_event = WakingEvent(-1)
        self._open_wake_pipe()
        self.input_wakeups = 0
        """How many times the input thread woke (a test's measure of its idleness)."""

    def _open_wake_pipe(self) -> None:
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self.exit_event.wake_fd = self._wake_w

    def start_application_mode(self) -> None:
        """Start (or, after ``App.suspend``, which closed the driver, start again) with a wake pipe open."""
        if self._wake_r < 0:
            self._open_wake_pipe()
        super().start_application_mode()

    def _get_terminal_size(self) -> tuple[int, int]:
        """The size of the terminal the app draws on, asked of the terminal itself (its output, then its input).

        Textual's own asks ``shutil.get_terminal_size()``, which prefers ``$COLUMNS`` and ``$LINES``: exported
        once (by readline, a tool that launched the shell, a user's rc file) they are stale, so the app laid out
        for a terminal it was not on and ignored every resize. They are used only where no terminal answers."""
        for stream in (self._file, sys.__stdout__, sys.__stdin__):
            with contextlib.suppress(AttributeError, ValueError, OSError):
                columns, lines = os.get_terminal_size(stream.fileno())  # type: ignore[union-attr]
                if columns > 0 and lines > 0:
                    return columns, lines
        return super()._get_terminal_size()

    def run_input_thread(self) -> None:
        """Wait for input and dispatch events (Textual's loop, with the timeout above)."""
        selector = selectors.SelectSelector()
        fileno, wake = self.fileno, self._wake_r
        selector.register(fileno, selectors.EVENT_READ)
        selector.register(wake, selectors.EVENT_READ)
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode
        last_input = time.monotonic()

        def process(events: list[tuple[selectors.SelectorKey, int]], final: bool = False) -> None:
            for key, mask in events:
                if key.fd == wake:
                    _drain(wake)
                elif mask & selectors.EVENT_READ:
                    data = decode(os.read(fileno, 4096), final=final)
                    if not data:
                        break  # stdin is a pipe that ended
                    for event in parser.feed(data):
                        self.process_message(event)
            for event in parser.tick():
                self.process_message(event)

        try:
            while not self.exit_event.is_set():
                settled = time.monotonic() - last_input >= SETTLE_S
                events = selector.select(None if settled else INPUT_TICK_S)
                self.input_wakeups += 1
                if any(key.fd == fileno for key, _ in events):
                    last_input = time.monotonic()
                process(events)
            selector.unregister(fileno)
            process(selector.select(INPUT_TICK_S), final=True)
        finally:
            selector.close()
            try:
                for _ in parser.feed(""):
                    pass
            except (EOFError, ParseError):
                pass

    def close(self) -> None:
        super().close()
        self.exit_event.wake_fd = -1
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._wake_r = self._wake_w = -1


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except OSError:  # empty (non-blocking)
        pass


class QuietTerminal:
    """An ``App`` mixin for how the app holds its terminal and lets go of it. A Linux terminal gets
    ``QuietLinuxDriver``; any other driver Textual picks is kept. A hang-up, SIGINT or SIGTERM ends the app as q
    does (the terminal restored: cursor shown, mouse reporting off, the main screen back), with 128 + the signal's
    number, even mid-mount, where a KeyboardInterrupt raised inside a handler would end it as a crash. A panic
    (Textual's end for an exception its driver's input thread raised) ends it with exit code 1, as an exception in
    a handler does: an app that printed a traceback never exits 0."""

    _return_code: int | None  # App's

    def on_load(self) -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not on the main thread, or no signals
            loop = asyncio.get_running_loop()
            for signum in EXIT_SIGNALS:
                if signum == signal.SIGHUP and signal.getsignal(signum) is signal.SIG_IGN:
                    continue  # run under nohup: a hang-up stays ignored
                loop.add_signal_handler(signum, self.exit, None, 128 + signum)  # type: ignore[attr-defined]

    def on_unmount(self) -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop = asyncio.get_running_loop()
            for signum in EXIT_SIGNALS:
                loop.remove_signal_handler(signum)

    async def run_suspended(self, argv: list[str], announce: str = "") -> int:
        """Run `argv` on the terminal while this app is suspended (the fleet's drill-down) and return its exit code.
        The app's loop stays free meanwhile, so a hang-up, SIGINT or SIGTERM ends the app at once, as q does, and
        takes the program down with it (SIGTERM, SIGKILL after SUSPENDED_PROGRAM_EXIT_S) before the terminal is
        given back. Raises SuspendNotSupported where the driver cannot suspend (headless, the browser)."""
        with self.suspend():  # type: ignore[attr-defined]
            if announce:
                print(announce, file=sys.stderr, flush=True)
            program = await asyncio.create_subprocess_exec(*argv)
            try:
                return await program.wait()
            finally:
                if program.returncode is None:  # the app ended first
                    program.terminate()
                    try:
                        await asyncio.wait_for(program.wait(), SUSPENDED_PROGRAM_EXIT_S)
                    except TimeoutError:
                        program.kill()
                        await program.wait()

    def get_driver_class(self) -> type:
        driver_class = super().get_driver_class()  # type: ignore[misc]
        return QuietLinuxDriver if driver_class is LinuxDriver else driver_class

    def panic(self, *renderables: Any) -> None:
        if not self._return_code:
            self._return_code = 1
        super().panic(*renderables)  # type: ignore[misc]
