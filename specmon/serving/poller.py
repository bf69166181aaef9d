"""Polls an SGLang server's health and settings on its own thread and reports `ServerStatus` changes."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specmon import urls
from specmon.loop_thread import PeriodicReader
from specmon.serving.client import (
    AuthenticationFailed,
    HealthState,
    SGLangClient,
    SGLangError,
    SpecSettings,
    spec_settings,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerStatus:
    """What the poller knows about the server.

    `state` is "unreachable" (nothing listening: not started, loading weights, or gone), "starting" (HTTP up,
    /health answers 503 until warmup is done), "ready" (/health 200) or "unhealthy" (another answer, or none in
    time). `since` is the wall-clock time the state began. `spec` and `version` are the last ones read from
    /server_info (kept while the server is away, read again when it is ready after a restart).
    """

    state: HealthState
    since: float
    last_error: str | None
    spec: SpecSettings | None
    version: str | None
    url: str
    latency_s: float | None
    checked_at: float = 0.0

    def _key(self) -> tuple[Any, ...]:
        return (self.state, self.since, self.last_error, self.spec, self.version)


class ServerPoller:
    """Polls the server every `interval_s` on its own thread (with its own event loop).

    Until the server is ready it asks /health (503 until warmup is done). Once ready it asks /model_info, which
    costs the server nothing, and /health only every `health_refresh_s`: on SGLang 0.4.10+ every /health call
    runs a one-token generation (a `Prefill batch` line in the server log, and a request in its counters).

    Reads /server_info once the server is ready, again after it went away and came back, and every
    `info_refresh_s` while ready (the live avg_spec_accept_length / last_gen_throughput; None: never). Calls `on_status(ServerStatus)` from the poller thread when the state, error,
    settings or version changed, and at least every `heartbeat_s`. Callers that own a UI must hand the status
    over to their own thread (e.g. post a message); the callback must not block.
    """

    def __init__(
        self,
        base_url: str,
        on_status: Callable[[ServerStatus], object],
        interval_s: float = 1.0,
        api_key: str | None = None,
        *,
        heartbeat_s: float = 10.0,
        health_timeout_s: float = 5.0,
        info_refresh_s: float | None = 10.0,
        health_refresh_s: float = 30.0,
        use_health_generate: bool = False,
    ) -> None:
        self.url = urls.base_url(base_url)
        self.heartbeat_s = heartbeat_s
        self.health_timeout_s = health_timeout_s
        self.info_refresh_s = info_refresh_s
        self.health_refresh_s = health_refresh_s
        self._health_at: float | None = None
        self.use_health_generate = use_health_generate
        self._on_status = on_status
        self._api_key = api_key
        self._runner = PeriodicReader("specmon-server-poller", self.poll_once, interval_s=interval_s,
                                      session=self._client, failed=self._read_failed)
        self._status: ServerStatus | None = None
        self._emitted_key: tuple[Any, ...] | None = None
        self._emitted_at = 0.0
        self._info_at: float | None = None  # None: server_info must be (re)read when ready

    def __repr__(self) -> str:
        return f"ServerPoller({self.url!r}, interval_s={self.interval_s})"

    @property
    def interval_s(self) -> float:
        return self._runner.interval_s

    @property
    def status(self) -> ServerStatus | None:
        """The latest status (also between callbacks)."""
        return self._status

    def start(self) -> None:
        """Start polling on the poller's own thread."""
        self._runner.start()

    def stop(self, timeout: float = 2.0) -> None:
        """Stop polling and join the thread (an in-flight request is cancelled)."""
        self._runner.stop(timeout)

    def _client(self) -> SGLangClient:
        return SGLangClient(self.url, api_key=self._api_key, timeout=self.health_timeout_s)

    def _read_failed(self, exc: Exception) -> None:  # whatever a server answers, the polling goes on and says so
        self._report_failure(f"the server's answer could not be read ({type(exc).__name__}: {exc})")

    async def poll_once(self, client: SGLangClient) -> ServerStatus:
        """One health check (and server_info read when due); reports the status if it changed."""
        previous = self._status
        ready_before = previous is not None and previous.state == "ready"
        health_due = self._health_at is None or time.monotonic() - self._health_at >= self.health_refresh_s
        if ready_before and not health_due:
            health = await client.alive(timeout=self.health_timeout_s)
            if health.status_code not in (None, 200):  # an odd answer: ask /health itself
                health_due = True
        if not ready_before or health_due:
            health = await client.health(generate=self.use_health_generate, timeout=self.health_timeout_s)
            self._health_at = time.monotonic()
        now = time.time()
        state = health.state
        last_error = None if health.ok else health.error
        spec = previous.spec if previous else None
        version = previous.version if previous else None
        if state != "ready":
            self._info_at = None
        elif self._info_due():
            try:
                info = await client.server_info()
            except AuthenticationFailed:
                last_error = "API key rejected by /server_info"
            except SGLangError as exc:
                last_error = str(exc)
            else:
                spec = spec_settings(info)
                version = spec.version
                self._info_at = time.monotonic()
        since = previous.since if previous and previous.state == state else now
        status = ServerStatus(state, since, last_error, spec, version, self.url, health.latency_s, now)
        self._status = status
        if status._key() != self._emitted_key or time.monotonic() - self._emitted_at >= self.heartbeat_s:
            self._emit(status)
        return status

    def _report_failure(self, error: str) -> None:
        previous = self._status
        since = previous.since if previous and previous.state == "unhealthy" else time.time()
        status = ServerStatus("unhealthy", since, error[:300], previous.spec if previous else None,
                              previous.version if previous else None, self.url, None, time.time())
        self._status = status
        if status._key() != self._emitted_key:
            self._emit(status)

    def _info_due(self) -> bool:
        if self._info_at is None:
            return True
        return self.info_refresh_s is not None and time.monotonic() - self._info_at >= self.info_refresh_s

    def _emit(self, status: ServerStatus) -> None:
        self._emitted_key = status._key()
        self._emitted_at = time.monotonic()
        try:
            self._on_status(status)
        except Exception:  # a failing callback must not stop the polling
            log.exception("ServerPoller on_status callback failed")
