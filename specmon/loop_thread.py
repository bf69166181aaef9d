"""LoopThread: one coroutine run to its end in its own asyncio event loop, cancellable from any thread."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable


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
