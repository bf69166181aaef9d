"""LiveMonitor: a LiveTracker shared by the scraping thread, the log follower's thread and the UI (locked);
LiveSampler: scrapes /metrics and /server_info on its own thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from specmon.bench.model import OWN_TOKENS, OwnTokens
from specmon.live.model import LiveSnapshot
from specmon.live.scrape import read_metrics, read_server_info
from specmon.live.tracker import LiveTracker
from specmon.loop_thread import PeriodicReader
from specmon.serving.prom import ScrapeParser

ABSENT_RECHECK_S = 30.0


class LiveMonitor:
    """Thread-safe front of a LiveTracker: sources feed it, the UI asks for snapshots. With each scrape and each
    batch of log lines it notes specmon's own generation so far (`own`: this process's benchmarks), which the
    tracker leaves out of the server's traffic over exactly the same spans."""

    def __init__(self, tracker: LiveTracker | None = None, own: OwnTokens = OWN_TOKENS) -> None:
        self.lock = threading.Lock()
        self.tracker = tracker or LiveTracker()
        self.own = own

    def feed_lines(self, lines: Sequence[str]) -> None:
        """Log lines as the LogFeed hands them over, on its thread."""
        now = time.time()
        streamed, finished = self.own.now()
        with self.lock:
            self.tracker.note_own_tokens(now, streamed, finished)
            self.tracker.feed_lines(lines, now)

    def snapshot(self, window_s: float = 60.0) -> LiveSnapshot:
        with self.lock:
            return self.tracker.snapshot(window_s, now=time.time())


class LiveSampler:
    """Scrapes /metrics every ``interval_s`` and /server_info every ``info_s`` into a LiveMonitor.

    Its reads never generate: they are not traffic. A 404 on /metrics makes the log the source (checked
    again every 30 s).
    """

    def __init__(self, url: str, monitor: LiveMonitor, api_key: str | None = None, interval_s: float = 2.0,
                 info_s: float = 15.0) -> None:
        self.url = url
        self.monitor = monitor
        self.api_key = api_key
        self.info_s = info_s
        self._runner = PeriodicReader("specmon-live-sampler", self._read_once, interval_s=interval_s,
                                      session=self._http, failed=self._read_failed)
        self._info_at: float | None = None
        self._absent_at: float | None = None
        self._parser = ScrapeParser()

    @property
    def interval_s(self) -> float:
        return self._runner.interval_s

    def start(self) -> None:
        self._info_at = self._absent_at = None
        self._runner.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._runner.stop(timeout)

    def _http(self):
        from specmon.http.client import HttpClient
        from specmon.http.headers import auth_headers
        from specmon.urls import base_url

        return HttpClient(base_url(self.url), headers=auth_headers(self.api_key), connect_timeout_s=5.0)

    def _read_failed(self, exc: Exception) -> None:  # whatever a server sends, the scraping goes on
        with self.monitor.lock:
            self.monitor.tracker.scrape_failed(f"{type(exc).__name__}: {exc}")

    async def _read_once(self, http) -> None:
        started = time.monotonic()
        if self._info_at is None or started - self._info_at >= self.info_s:
            info_reading = await read_server_info(http)
            with self.monitor.lock:
                if info_reading.info is not None:
                    self._info_at = started
                    self.monitor.tracker.set_server_info(info_reading.info)
                elif info_reading.error is not None:
                    self._info_at = started  # asked again in info_s, not every scrape
                    self.monitor.tracker.server_info_unreadable(info_reading.error)
        if self._absent_at is None or started - self._absent_at >= ABSENT_RECHECK_S:
            taken_at = time.time()
            own = self.monitor.own.now()  # what specmon had generated when the server was asked
            reading = await read_metrics(http, taken_at, self._parser)
            with self.monitor.lock:
                tracker = self.monitor.tracker
                tracker.note_own_tokens(taken_at, *own)
                tracker.set_reachable(not reading.unreachable)
                if reading.unreachable:
                    self._info_at = None  # read the settings again when it is back (maybe restarted)
                if reading.absent:
                    self._absent_at = started
                    tracker.metrics_unavailable()
                elif reading.scrape is not None:
                    self._absent_at = None
                    tracker.add_scrape(reading.scrape)
