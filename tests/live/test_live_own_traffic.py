"""specmon's own benchmark is left out of the Live view's traffic and shown apart, from /metrics and from the
log alike, checked against what the emulator really served: only the benchmark (other traffic ≈ 0), then the
benchmark beside another client whose tokens are counted as they arrive (other traffic ≈ that client's)."""

from __future__ import annotations

import bisect
import contextlib
import threading
import time

import httpx
import pytest

from specmon.bench.model import OwnTokens
from specmon.bench.run import BenchRun, RunSettings
from specmon.live.sampler import LiveMonitor, LiveSampler
from specmon.live.tracker import LiveTracker
from specmon.logs.follower import LogFollower
from tests.emulator.test_emulator import EAGLE3, launch
from tests.support.oncall import wait_for

pytestmark = pytest.mark.timeout(240)
SPEED = ["--emulator-speed", "50", "--emulator-decode-speed", "2", "--decode-log-interval", "10"]
WINDOW_S = 8.0


class Client(threading.Thread):
    """Traffic that is not specmon's: one stream after another, each chunk's new tokens counted when it
    arrives (wall time), so the tokens it had by any moment are known."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stopping = threading.Event()
        self.times: list[float] = [time.time()]
        self.totals: list[int] = [0]

    def run(self) -> None:
        import json

        payload = {"text": "Tell me a long story.", "stream": True,
                   "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}}
        with httpx.Client(timeout=60, trust_env=False) as http:
            while not self.stopping.is_set():
                done = 0
                with http.stream("POST", self.url + "/generate", json=payload) as response:
                    for line in response.iter_lines():
                        if not line.startswith("data: {"):
                            continue
                        tokens = json.loads(line[6:])["meta_info"]["completion_tokens"]
                        if tokens > done:
                            self.times.append(time.time())
                            self.totals.append(self.totals[-1] + tokens - done)
                            done = tokens

    def tokens_between(self, start: float, end: float) -> float:
        def at(t: float) -> int:
            return self.totals[max(0, bisect.bisect_right(self.times, t) - 1)]

        return at(end) - at(start)

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


class Tail(threading.Thread):
    """The server's log into the monitor as its lines arrive (the app's LogFeed observer does the same)."""

    def __init__(self, path, monitor: LiveMonitor) -> None:
        super().__init__(daemon=True)
        self.follower = LogFollower(path, from_start=False)
        self.monitor = monitor
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.02):
            lines = [item.text for item in self.follower.poll() if item.kind == "line"]
            if lines:
                self.monitor.feed_lines(lines)

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)
        self.follower.close()


@contextlib.contextmanager
def benchmark(url: str, own: OwnTokens, results_dir):
    """specmon's own benchmark against `url`, running (its requests in flight) until the block ends."""
    bench = BenchRun(url, "own", RunSettings(requests=400, max_new_tokens=200, warmup=0, concurrency=3),
                     results_dir=str(results_dir), own_tokens=own)
    bench.start()
    try:
        wait_for(lambda: own.now()[0] > 0, timeout=30, what="the benchmark's first tokens")
        yield bench
    finally:
        bench.cancel()
        bench.wait(30)


def settled(monitor: LiveMonitor, since: float):
    """A snapshot whose whole window is after `since` (the traffic it is asked about ran through all of it):
    from /metrics, its first scrape; from the log, lines stamped (to the second) within the window."""

    def ready():
        snap = monitor.snapshot(WINDOW_S)
        if snap.source == "metrics" and (snap.window_from is None or snap.window_from <= since):
            return None
        if snap.source == "log" and time.time() < since + WINDOW_S + 1.5:
            return None
        return snap if snap.own_tok_s else None

    return wait_for(ready, timeout=60, what="a window inside the traffic")


@pytest.mark.parametrize("source", ["metrics", "log"])
def test_own_benchmark_is_left_out_of_traffic_and_shown_apart(tmp_path, source):
    server = launch(tmp_path, *EAGLE3, *SPEED, *(["--enable-metrics"] if source == "metrics" else []))
    own = OwnTokens()
    monitor = LiveMonitor(LiveTracker(), own=own)
    feeders = []
    try:
        server.wait_ready(60)
        sampler = LiveSampler(server.url, monitor, interval_s=0.5)
        sampler.start()
        feeders.append(sampler)
        if source == "log":
            tail = Tail(server.log_path, monitor)
            tail.start()
            feeders.append(tail)
        with benchmark(server.url, own, tmp_path / "results"):
            alone = settled(monitor, time.time())
            assert alone.source == source
            # only specmon's benchmark runs: no other traffic, and all of it shown as specmon's own
            assert alone.decode_tok_s < 0.03 * alone.own_tok_s, alone
            other = Client(server.url)
            other.start()
            try:
                started = time.time()
                wait_for(lambda: other.totals[-1] > 0, timeout=30, what="the other client's first tokens")
                both = settled(monitor, max(started, other.times[1]))
                if source == "metrics":
                    truth = other.tokens_between(both.window_from, both.window_to) / (
                        both.window_to - both.window_from)
                else:
                    truth = other.tokens_between(time.time() - WINDOW_S, time.time()) / WINDOW_S
                assert both.decode_tok_s == pytest.approx(truth, rel=0.1), (both, truth)
            finally:
                other.stop()
    finally:
        for feeder in feeders:
            feeder.stop()
        server.stop()
