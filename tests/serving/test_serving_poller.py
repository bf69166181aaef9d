"""ServerPoller against a replay server process that is killed for real and started again."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from specmon.serving.poller import ServerPoller, ServerStatus
from tests.support.serving_replay import ReplayServer

REPLAY = Path(__file__).parents[1] / "support" / "serving_replay.py"


class StatusLog:
    """Collects the statuses the poller reports (from its thread) and waits for one that matches."""

    def __init__(self) -> None:
        self.items: list[tuple[float, ServerStatus]] = []
        self._cond = threading.Condition()

    def __call__(self, status: ServerStatus) -> None:
        with self._cond:
            self.items.append((time.monotonic(), status))
            self._cond.notify_all()

    def wait_for(self, match: Callable[[ServerStatus], bool], timeout: float = 5.0) -> tuple[float, ServerStatus]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for at, status in self.items:
                    if match(status):
                        return at, status
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"no matching status in {[s.state for _, s in self.items]}")
                self._cond.wait(remaining)

    def states(self) -> list[str]:
        with self._cond:
            return [s.state for _, s in self.items]


def _start_replay(*args: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, str(REPLAY), *args], stdout=subprocess.PIPE, text=True, stderr=subprocess.DEVNULL
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("LISTENING "), line
    return proc, int(line.split()[1])


@pytest.fixture
def replay_process() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(5)


def test_poller_notices_a_killed_server_within_2s_and_recovers(replay_process: list) -> None:
    proc, port = _start_replay("--port", "0")
    replay_process.append(proc)
    log = StatusLog()
    poller = ServerPoller(f"http://localhost:{port}", log, interval_s=0.25)
    poller.start()
    try:
        _, ready = log.wait_for(lambda s: s.state == "ready" and s.spec is not None)
        assert ready.url == f"http://127.0.0.1:{port}"
        assert ready.spec is not None and ready.spec.algorithm == "EAGLE3" and ready.version == "0.5.16"
        assert ready.latency_s is not None and ready.last_error is None

        proc.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        proc.wait(5)
        seen_at, gone = log.wait_for(lambda s: s.state == "unreachable", timeout=3.0)
        assert seen_at - killed_at < 2.0
        assert gone.last_error == "unreachable" and gone.since >= ready.since
        assert gone.spec == ready.spec  # the last known settings stay on show

        # The same port comes back, now without speculation: the poller must read server_info again.
        proc2, _ = _start_replay("--port", str(port), "--server-info", "h200-0.5.16-server-info-plain.json")
        replay_process.append(proc2)
        _, back = log.wait_for(lambda s: s.state == "ready" and s.since > gone.since, timeout=5.0)
        assert back.spec is not None and not back.spec.enabled
    finally:
        poller.stop()


def test_poller_reports_starting_then_ready_and_only_changes() -> None:
    with ReplayServer(health_codes=deque([503, 503, 503])) as server:
        log = StatusLog()
        poller = ServerPoller(server.url, log, interval_s=0.05, heartbeat_s=60.0)
        poller.start()
        try:
            log.wait_for(lambda s: s.state == "ready" and s.spec is not None)
            time.sleep(0.5)  # ~10 more polls of an unchanged server
        finally:
            poller.stop()
        info_reads = [r for r in server.behaviour.requests if r["path"] == "/server_info"]
    assert log.states() == ["starting", "ready"]
    starting, ready = (s for _, s in log.items)
    assert starting.last_error == "starting" and ready.since >= starting.since
    assert len(info_reads) == 1
    assert poller.status is not None and poller.status.checked_at >= ready.checked_at


def test_poller_heartbeat_repeats_an_unchanged_status() -> None:
    with ReplayServer() as server:
        log = StatusLog()
        poller = ServerPoller(server.url, log, interval_s=0.05, heartbeat_s=0.2)
        poller.start()
        try:
            log.wait_for(lambda s: len(log.items) >= 3, timeout=3.0)
        finally:
            poller.stop()
    assert set(log.states()) == {"ready"}


def test_poller_with_a_rejected_key_is_ready_but_says_why_settings_are_missing() -> None:
    with ReplayServer(api_key="right") as server:
        log = StatusLog()
        poller = ServerPoller(server.url, log, interval_s=0.05, api_key="wrong")
        poller.start()
        try:
            _, status = log.wait_for(lambda s: s.state == "ready")
        finally:
            poller.stop()
    assert status.spec is None and status.last_error == "API key rejected by /server_info"
    assert "wrong" not in repr(poller) and "wrong" not in repr(status)


def test_stop_joins_promptly_even_with_a_long_interval() -> None:
    with ReplayServer() as server:
        log = StatusLog()
        poller = ServerPoller(server.url, log, interval_s=30.0)
        poller.start()
        log.wait_for(lambda s: s.state == "ready")
        started = time.monotonic()
        poller.stop()
        assert time.monotonic() - started < 1.0
        assert poller._runner.thread is not None and not poller._runner.thread.is_alive()


def test_a_failing_callback_does_not_stop_polling() -> None:
    calls: list[ServerStatus] = []

    def flaky(status: ServerStatus) -> None:
        calls.append(status)
        raise RuntimeError("callback bug")

    with ReplayServer(health_codes=deque([503])) as server:
        poller = ServerPoller(server.url, flaky, interval_s=0.05)
        poller.start()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and [c.state for c in calls] != ["starting", "ready"]:
            time.sleep(0.02)
        poller.stop()
    assert [c.state for c in calls] == ["starting", "ready"]


def test_a_stopped_server_is_unhealthy_until_it_continues(replay_process: list) -> None:
    proc, port = _start_replay("--port", "0")
    replay_process.append(proc)
    log = StatusLog()
    poller = ServerPoller(f"http://127.0.0.1:{port}", log, interval_s=0.1, health_timeout_s=0.5)
    poller.start()
    try:
        log.wait_for(lambda s: s.state == "ready" and s.spec is not None)
        proc.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        seen_at, hung = log.wait_for(lambda s: s.state == "unhealthy", timeout=3.0)
        assert seen_at - stopped_at < 0.5 + 0.1 + 0.5
        assert hung.last_error == "no answer within 0.5 s"
        proc.send_signal(signal.SIGCONT)
        _, back = log.wait_for(lambda s: s.state == "ready" and s.since > hung.since, timeout=3.0)
        assert back.last_error is None
    finally:
        proc.send_signal(signal.SIGCONT)
        poller.stop()


def test_settings_are_read_again_every_info_refresh_s() -> None:
    with ReplayServer() as server:
        log = StatusLog()
        poller = ServerPoller(server.url, log, interval_s=0.05, info_refresh_s=0.2, heartbeat_s=60.0)
        poller.start()
        try:
            log.wait_for(lambda s: s.spec is not None and s.spec.num_steps == 3)
            server.behaviour.server_info = "h200-0.5.16-topk1-server-info.json"  # same state, new settings
            _, changed = log.wait_for(lambda s: s.spec is not None and s.spec.num_steps == 1, timeout=3.0)
        finally:
            poller.stop()
    assert changed.state == "ready" and changed.spec.num_draft_tokens == 2


def test_once_ready_it_polls_model_info_not_the_health_generation() -> None:
    # Seen on a real SGLang 0.5.16: every GET /health runs a one-token generation (a `Prefill batch` line in
    # the server log each second, and a request in its counters). Once ready, /model_info is the probe.
    with ReplayServer() as server:
        log = StatusLog()
        poller = ServerPoller(server.url, log, interval_s=0.05, info_refresh_s=None, health_refresh_s=60.0)
        poller.start()
        try:
            log.wait_for(lambda s: s.state == "ready")
            time.sleep(1.0)
        finally:
            poller.stop()
        paths = [r["path"] for r in server.behaviour.requests]
    assert paths.count("/health") == 1
    assert paths.count("/model_info") >= 10


def test_a_ready_server_is_asked_health_again_every_health_refresh_s() -> None:
    with ReplayServer() as server:
        log = StatusLog()
        poller = ServerPoller(server.url, log, interval_s=0.05, info_refresh_s=None, health_refresh_s=0.3)
        poller.start()
        try:
            log.wait_for(lambda s: s.state == "ready")
            time.sleep(1.0)
            server.behaviour.health_codes.extend([503] * 1000)  # the scheduler stopped answering generations
            _, unhealthy = log.wait_for(lambda s: s.state != "ready", timeout=3.0)
        finally:
            poller.stop()
        health_calls = [r["path"] for r in server.behaviour.requests].count("/health")
    assert unhealthy.state == "starting"
    assert 2 <= health_calls <= 8  # again every 0.3 s, not at every 0.05 s poll
