"""LoopThread: a coroutine on its own thread and event loop, cancelled from another thread."""

from __future__ import annotations

import asyncio
import threading

import pytest

from specmon.loop_thread import LoopThread


def test_runs_on_a_named_daemon_thread_once_and_joins():
    seen: list[str] = []

    async def main() -> None:
        seen.append(threading.current_thread().name)

    runner = LoopThread("worker-1")
    assert runner.join(0.1) is False  # never started
    runner.start(main)
    assert runner.join(5) and seen == ["worker-1"] and runner.thread.daemon
    with pytest.raises(RuntimeError, match="worker-1 already started"):
        runner.start(main)


def test_cancel_from_another_thread_interrupts_an_await():
    waiting, outcome = threading.Event(), []

    async def main() -> None:
        waiting.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise

    runner = LoopThread("sleeper")
    runner.start(main)
    assert waiting.wait(5)
    runner.cancel()
    assert runner.join(5) and outcome == ["cancelled"] and runner.cancel_requested


def test_a_cancel_before_the_loop_exists_is_visible_to_the_coroutine():
    checked: list[bool] = []

    async def main() -> None:
        checked.append(runner.cancel_requested)

    runner = LoopThread("early")
    runner.cancel()
    runner.run(main)  # on this thread
    assert checked == [True] and runner.thread is None
