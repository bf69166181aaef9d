"""LoopThread: a coroutine on its own thread and event loop, cancelled from another thread; PeriodicReader, the
one poll loop on it, and a scan that no other module runs one."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import re
import threading
import time
from pathlib import Path

import pytest

from specmon.loop_thread import LoopThread, PeriodicReader


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


# -- PeriodicReader: the one poll loop --------------------------------------------------------------------------


def wait_until(condition, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


class Session:
    """An async context manager that counts its openings and closings."""

    def __init__(self, fail_first: int = 0) -> None:
        self.opened = self.closed = 0
        self.fail_first = fail_first

    @contextlib.asynccontextmanager
    async def __call__(self):
        self.opened += 1
        if self.opened <= self.fail_first:
            raise ConnectionError(f"refused #{self.opened}")
        try:
            yield f"session {self.opened}"
        finally:
            self.closed += 1


def test_reads_every_interval_in_one_session_on_its_own_named_thread():
    session, reads = Session(), []

    async def read(opened: str) -> None:
        reads.append((opened, threading.current_thread().name, time.monotonic()))

    reader = PeriodicReader("periodic-1", read, interval_s=0.05, session=session)
    reader.start()
    try:
        assert wait_until(lambda: len(reads) >= 4)
        reader.start()  # running already: nothing
    finally:
        assert reader.stop(5)
    assert not reader.running and session.opened == session.closed == 1
    assert {(opened, name) for opened, name, _ in reads} == {("session 1", "periodic-1")}
    gaps = [b - a for (_, _, a), (_, _, b) in zip(reads, reads[1:], strict=False)]
    assert min(gaps) >= 0.045  # one read an interval, never a burst


def test_a_stop_never_waits_an_interval_and_cancels_the_read_in_flight():
    started, outcome = threading.Event(), []

    async def read(_: None) -> None:
        if started.is_set():  # the second read hangs, as on a server that never answers
            try:
                await asyncio.sleep(600)
            except asyncio.CancelledError:
                outcome.append("cancelled")
                raise
        started.set()

    reader = PeriodicReader("stops", read, interval_s=600.0)
    reader.start()
    assert started.wait(5)
    began = time.monotonic()
    assert reader.stop(5) and time.monotonic() - began < 2  # asleep between reads: woken by the stop
    assert outcome == []
    reader.start()  # again after a stop: a new thread, which reads at once, then hangs in its read
    assert wait_until(lambda: reader.running)
    time.sleep(0.05)
    began = time.monotonic()
    assert reader.stop(5) and time.monotonic() - began < 2 and outcome == ["cancelled"]


def test_wake_reads_at_once_and_pace_changes_the_interval():
    reads: list[float] = []

    async def read(_: None) -> None:
        reads.append(time.monotonic())

    reader = PeriodicReader("paced", read, interval_s=600.0)
    reader.start()
    try:
        assert wait_until(lambda: len(reads) == 1)
        reader.wake()
        assert wait_until(lambda: len(reads) == 2)
        reader.pace(0.02)  # a change reads at once, then every 20 ms
        assert wait_until(lambda: len(reads) >= 6)
        reader.pace(600.0)
        settled = len(reads)
        assert wait_until(lambda: len(reads) >= settled)  # at most the read in flight and the one at the change
        time.sleep(0.3)
        assert len(reads) <= settled + 2 and reader.interval_s == 600.0
        reader.pace(600.0)  # no change: no read
        count = len(reads)
        time.sleep(0.2)
        assert len(reads) == count
    finally:
        reader.stop(5)


def test_errors_become_the_owners_state_and_never_kill_the_thread():
    session, failures, reads = Session(fail_first=2), [], []

    async def read(opened: str) -> None:
        reads.append(opened)
        if len(reads) % 2:
            raise ValueError(f"an answer that broke the parser ({len(reads)})")

    def failed(exc: Exception) -> None:
        failures.append(str(exc))
        if len(failures) == 3:
            raise RuntimeError("the owner's handler failed too")

    reader = PeriodicReader("contained", read, interval_s=0.02, session=session, failed=failed)
    reader.start()
    try:
        assert wait_until(lambda: len(reads) >= 6)
        assert reader.running
    finally:
        reader.stop(5)
    assert failures[:2] == ["refused #1", "refused #2"]  # the session is tried again each interval
    assert failures[2:5] == [f"an answer that broke the parser ({n})" for n in (1, 3, 5)]
    assert set(reads) == {"session 3"}


def test_a_blocking_read_runs_with_no_event_loop_and_is_woken_paced_and_stopped_at_once():
    """A plain function is a blocking source (NVML; DCGM through Prometheus runs its own `asyncio.run`, which a
    running loop refuses): it is called on the thread with no event loop."""
    reads, failures = [], []

    def read(_: None) -> None:
        reads.append(asyncio.run(asyncio.sleep(0, result=threading.current_thread().name)))
        if len(reads) == 2:
            raise OSError("NVML lost the GPU")

    reader = PeriodicReader("blocking", read, interval_s=600.0, failed=failures.append)
    reader.start()
    try:
        assert wait_until(lambda: len(reads) == 1)
        reader.wake()
        assert wait_until(lambda: len(reads) == 2) and wait_until(lambda: len(failures) == 1)
        reader.pace(0.02)
        assert wait_until(lambda: len(reads) >= 6) and reader.running
    finally:
        reader.pace(600.0)
        began = time.monotonic()
        assert reader.stop(5) and time.monotonic() - began < 2
    assert set(reads) == {"blocking"} and [str(f) for f in failures] == ["NVML lost the GPU"]
    count = len(reads)
    reader.start()  # again after a stop: a new thread, which reads at once
    assert wait_until(lambda: len(reads) == count + 1)
    assert reader.stop(5) and not reader.running


LOOP_OWNERS = {
    "specmon/loop_thread.py": "the periodic reader itself",
    "specmon/bench/run.py": "a benchmark run to its end on a LoopThread; its loop coalesces progress repaints",
    "specmon/testing/loopback_server.py": "a loopback SGLang stand-in (a server, not a reader): its streams pace tokens",
    "specmon/emulator/__main__.py": "the emulator is a stand-in server in its own process, not a reader of one",
    "specmon/emulator/nodes.py": "the emulator is a stand-in server in its own process, not a reader of one",
    "specmon/emulator/scheduler.py": "the emulator is a stand-in server in its own process, not a reader of one",
    "specmon/emulator/production.py": "the emulator's own clients: arrivals paced inside the stand-in server, not a "
                                      "reader of one",
}
"""Modules that start a thread and run a waiting loop for another reason than reading something periodically."""

_WAITS = re.compile(r"sleep|wait|timeout", re.IGNORECASE)


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def runs_a_poll_loop(source: str) -> bool:
    """A module starts a thread (`threading.Thread(` or `LoopThread(`) and has a `while` loop that sleeps or
    waits (a call named like `sleep`, `wait` or `timeout`: `asyncio.sleep`, `time.sleep`, `Event.wait`,
    `asyncio.wait_for`, a helper `_sleep`...)."""
    if "threading.Thread(" not in source and "LoopThread(" not in source:
        return False
    return any(isinstance(inner, ast.Call) and _WAITS.search(_called_name(inner))
               for node in ast.walk(ast.parse(source)) if isinstance(node, ast.While) for inner in ast.walk(node))


def test_no_module_but_the_periodic_reader_runs_its_own_poll_loop():
    root = Path(__file__).resolve().parents[2]
    found = {path.relative_to(root).as_posix() for folder in ("specmon", "tui", "widgets")
             for path in (root / folder).rglob("*.py") if runs_a_poll_loop(path.read_text())}
    assert found - LOOP_OWNERS.keys() == set(), "a poll loop of its own: read through specmon.loop_thread.PeriodicReader"
    assert LOOP_OWNERS.keys() - found == set(), "listed, but runs no loop any more: take it off LOOP_OWNERS"


def test_the_scan_finds_a_hand_written_poll_loop():
    hand_written = '''
class Poller:
    def start(self):
        self._runner = LoopThread("poller")
        self._runner.start(self._run)

    async def _run(self):
        while not self._stopping.is_set():
            await self.read()
            await asyncio.sleep(self.interval_s)
'''
    assert runs_a_poll_loop(hand_written)
    assert runs_a_poll_loop(hand_written.replace('LoopThread("poller")', "threading.Thread(target=self._run)")
                            .replace("await asyncio.sleep(self.interval_s)", "self._stop.wait(self.interval_s)"))
    assert not runs_a_poll_loop(hand_written.replace("await asyncio.sleep(self.interval_s)", "pass"))
