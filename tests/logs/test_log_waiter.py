"""LogWaiter: a follower sleeps until its file changes (inotify), not polling an idle log several times a second,
and falls back to polling where inotify cannot watch."""

from __future__ import annotations

import os
import threading
import time

import pytest

import specmon.logs.waiter as waiter_module
from specmon.logs.follower import follow
from specmon.logs.waiter import LogWaiter

pytestmark = pytest.mark.skipif(waiter_module.INotify is None, reason="inotify is Linux's")


def _sleeper(waiter: LogWaiter, stop: threading.Event) -> tuple[threading.Thread, list[float]]:
    woke: list[float] = []
    thread = threading.Thread(target=lambda: (waiter.sleep(stop, False), woke.append(time.monotonic())), daemon=True)
    thread.start()
    return thread, woke


def test_a_sleeping_follower_wakes_when_its_file_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(waiter_module, "WATCHED_WAIT_S", 600.0)  # only the write can wake it within the test
    log = tmp_path / "server.log"
    log.write_text("first\n")
    with LogWaiter(log) as waiter:
        assert waiter.watching
        waiter.clear()
        stop = threading.Event()
        thread, woke = _sleeper(waiter, stop)
        with log.open("a") as out:
            out.write("second\n")
        thread.join(30)
        assert woke, "the write did not wake the sleeping follower"


def test_a_file_created_after_the_follower_started_wakes_it(tmp_path, monkeypatch):
    monkeypatch.setattr(waiter_module, "WATCHED_WAIT_S", 600.0)
    log = tmp_path / "later.log"
    with LogWaiter(log) as waiter:
        assert waiter.watching  # the folder is watched although the file does not exist yet
        waiter.clear()
        thread, woke = _sleeper(waiter, threading.Event())
        log.write_text("the server started\n")
        thread.join(30)
        assert woke


def test_follow_reads_each_line_of_a_trickle_and_stops_when_asked(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("")
    got: list[str] = []
    stop = threading.Event()
    thread = threading.Thread(target=follow, args=(log, lambda items: got.extend(i.text for i in items), stop))
    thread.start()
    try:
        for i in range(5):
            with log.open("a") as out:
                out.write(f"line {i}\n")
            deadline = time.monotonic() + 30
            while f"line {i}" not in got and time.monotonic() < deadline:
                time.sleep(0.01)
        assert got == [f"line {i}" for i in range(5)]
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()


def test_without_inotify_it_polls_with_back_off(tmp_path, monkeypatch):
    log = tmp_path / "server.log"
    log.write_text("")

    def no_instance() -> None:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(waiter_module, "INotify", no_instance)
    with LogWaiter(log, interval=0.01, max_interval=0.04) as waiter:
        assert not waiter.watching
        stop = threading.Event()
        waits = []
        stop.wait = lambda timeout: waits.append(timeout)  # type: ignore[method-assign]
        for _ in range(5):
            waiter.sleep(stop, False)
        waiter.sleep(stop, True)
        assert waits[0] == 0.01 and waits[4] == 0.04 and waits[-1] == 0.01
    assert not LogWaiter(tmp_path / "no-such-folder" / "x.log").watching


def test_a_stream_is_read_in_batches_not_a_wake_a_line(tmp_path, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(waiter_module.time, "monotonic", lambda: clock[0])
    log = tmp_path / "server.log"
    log.write_text("")
    with LogWaiter(log, interval=0.05) as waiter:
        stop = threading.Event()
        waits: list[float] = []
        stop.wait = lambda timeout: waits.append(timeout)  # type: ignore[method-assign]
        changed: list[bool] = []
        monkeypatch.setattr(waiter, "_sleep_until_changed", lambda stop_event: changed.append(True))
        waiter.sleep(stop, True)  # a lone line: the next poll comes at once, then it sleeps until a change
        waiter.sleep(stop, False)
        assert waits == [] and changed == [True]
        clock[0] += 0.01
        waiter.sleep(stop, True)  # lines again soon after: a stream, polled every interval
        assert waits == [0.05]
        clock[0] += 0.05
        waiter.sleep(stop, False)  # a stream pausing between bursts: still polled every interval
        assert waits == [0.05, 0.05] and changed == [True]
        clock[0] += waiter_module.STREAM_GAP_S
        waiter.sleep(stop, False)  # quiet since: sleeps until the file changes
        assert changed == [True, True]


def test_the_inotify_instance_is_released(tmp_path):
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        with LogWaiter(tmp_path / "server.log"):
            pass
    assert len(os.listdir("/proc/self/fd")) <= before
