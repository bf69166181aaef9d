"""LoopThread: one coroutine run to its end in its own asyncio event loop, cancellable from any thread;
PeriodicReader: the one poll loop (a read every interval on such a thread, woken, paced, stopped at once)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Generic, TypeVar, cast

log = logging.getLogger(__name__)
S = TypeVar("S")


class LoopThread:
    """Runs `main()` in a fresh event loop: on a daemon thread (`start`) or on the caller's (`run`).

    `cancel()` may be called from any thread, before or while it runs; `cancel_requested` tells the
    coroutine about a cancel that came before its task existed.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.thread: threading.Thread | None = None
        self.cancel_requested = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self, main: Callable[[], Awaitable[None]]) -> None:
        """Run `main()` on a new daemon thread named after this LoopThread (once)."""
        if self.thread is not None:
            raise RuntimeError(f"{self.name} already started")
        self.thread = threading.Thread(target=self.run, args=(main,), name=self.name, daemon=True)
        self.thread.start()

    def run(self, main: Callable[[], Awaitable[None]]) -> None:
        """Run `main()` on the calling thread until it returns or is cancelled."""

        async def tracked() -> None:
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.current_task()
            await main()

        with contextlib.suppress(asyncio.CancelledError):
            asyncio.run(tracked())

    def cancel(self) -> None:
        """Cancel the coroutine (an await in progress raises CancelledError in it)."""
        self.cancel_requested = True
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(task.cancel)

    def call_soon_threadsafe(self, callback: Callable[[], object]) -> bool:
        """Run `callback` on the loop's thread soon; False when the loop is not running (yet, or any more)."""
        loop = self._loop
        if loop is None:
            return False
        try:
            loop.call_soon_threadsafe(callback)
        except RuntimeError:  # the loop already closed
            return False
        return True

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread; True when it has finished (False when never started)."""
        if self.thread is None:
            return False
        self.thread.join(timeout)
        return not self.thread.is_alive()


class PeriodicReader(Generic[S]):
    """The one poll loop: awaits `read(session)` every `interval_s` on its own thread and asyncio loop.

    `session()` (an async context manager: an HTTP client, say; none when not given) is opened once per start and
    handed to each read. A plain function `read(None)` (a blocking source: NVML, or one that runs its own
    `asyncio.run`) is called on the thread with no event loop, the wait between reads on a threading.Event. The next read starts `interval_s` after the last one began (at once when that is past);
    between reads the thread sleeps, with no wake-ups in between. `wake()` reads at once; `pace(interval_s)`
    changes the interval and reads at once. `stop()` cancels the read in flight and the wait: it never waits an
    interval. Errors are contained: an exception from opening the session or from a read goes to `failed(exc)`,
    where the owner turns it into a state, and the next read tries again; the thread never dies of one.
    """

    def __init__(
        self,
        name: str,
        read: Callable[[S], Awaitable[object]] | Callable[[None], object],
        *,
        interval_s: float,
        session: Callable[[], contextlib.AbstractAsyncContextManager[S]] | None = None,
        failed: Callable[[Exception], object] | None = None,
    ) -> None:
        self.name = name
        self.interval_s = interval_s
        self._read = read
        self._session = session or cast(Callable[[], contextlib.AbstractAsyncContextManager[S]], _no_session)
        self._failed = failed
        self._blocking = not inspect.iscoroutinefunction(read)
        self._runner: LoopThread | None = None
        self._thread: threading.Thread | None = None  # a blocking read's
        self._stopping = threading.Event()
        self._wake = threading.Event()  # kept for a wake asked while a read runs, or before the loop exists
        self._woken: asyncio.Event | None = None

    def __repr__(self) -> str:
        return f"PeriodicReader({self.name!r}, interval_s={self.interval_s})"

    @property
    def thread(self) -> threading.Thread | None:
        """The thread of the latest start (None before one)."""
        if self._blocking:
            return self._thread
        return self._runner.thread if self._runner is not None else None

    @property
    def running(self) -> bool:
        thread = self.thread
        return thread is not None and thread.is_alive()

    def start(self) -> None:
        """Start reading on a new daemon thread named `name` (nothing when it runs already; again after `stop`)."""
        if self.running:
            return
        self._stopping.clear()
        if self._blocking:
            self._thread = threading.Thread(target=self._run_blocking, name=self.name, daemon=True)
            self._thread.start()
            return
        self._runner = LoopThread(self.name)
        self._runner.start(self._run)

    def stop(self, timeout: float = 2.0) -> bool:
        """Stop reading (the read in flight is cancelled) and join the thread; True when it has finished."""
        self._stopping.set()
        if self._blocking:
            self._wake.set()
            if self._thread is not None:
                self._thread.join(timeout)
            return not self.running
        runner = self._runner
        if runner is None:
            return True
        runner.cancel()
        return runner.join(timeout)

    def wake(self) -> None:
        """Read at once (after the read in flight, if one is)."""
        self._wake.set()
        if self._runner is not None:
            self._runner.call_soon_threadsafe(self._wake_loop)

    def pace(self, interval_s: float) -> None:
        """Read every `interval_s` from now on; a change reads at once."""
        if interval_s != self.interval_s:
            self.interval_s = interval_s
            self.wake()

    def _wake_loop(self) -> None:
        if self._woken is not None:
            self._woken.set()

    async def _run(self) -> None:
        self._woken = asyncio.Event()
        while not self._stopping.is_set():
            started = time.monotonic()
            try:
                async with self._session() as session:
                    while not self._stopping.is_set():
                        started = time.monotonic()
                        try:
                            await cast(Callable[[S], Awaitable[object]], self._read)(session)
                        except Exception as exc:  # whatever is read, the reading goes on and says so
                            self._report(exc)
                        await self._sleep_until(started + self.interval_s)
                    return
            except Exception as exc:  # the session could not be opened: said, and tried again
                self._report(exc)
            await self._sleep_until(started + self.interval_s)

    def _run_blocking(self) -> None:
        read = cast(Callable[[None], object], self._read)
        while not self._stopping.is_set():
            started = time.monotonic()
            try:
                read(None)
            except Exception as exc:  # whatever is read, the reading goes on and says so
                self._report(exc)
            remaining = started + self.interval_s - time.monotonic()
            if remaining > 0 and not self._stopping.is_set():
                self._wake.wait(remaining)
            self._wake.clear()

    def _report(self, exc: Exception) -> None:
        log.debug("%s: a read failed", self.name, exc_info=exc)
        if self._failed is None:
            return
        try:
            self._failed(exc)
        except Exception:  # a failing handler must not stop the reading
            log.exception("%s: its failure handler failed", self.name)

    async def _sleep_until(self, deadline: float) -> None:
        woken = self._woken
        seconds = deadline - time.monotonic()
        if woken is not None and seconds > 0 and not self._wake.is_set() and not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await woken.wait()
        self._wake.clear()
        if woken is not None:
            woken.clear()


@contextlib.asynccontextmanager
async def _no_session() -> AsyncIterator[None]:
    yield None
