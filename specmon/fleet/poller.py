"""FleetPoller: reads the fleet from Prometheus every interval on its own thread (its own asyncio loop) and hands
each FleetSnapshot to a callback (which posts a message; it never touches a widget)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Mapping

from specmon.fleet.model import FleetSnapshot
from specmon.fleet.promapi import PromError
from specmon.fleet.reader import FleetReader
from specmon.fleet.tracker import FleetTracker, Record
from specmon.loop_thread import LoopThread


class FleetPoller:
    """One refresh every `options.interval_s`; Prometheus failing gives the last snapshot, stale, with why."""

    def __init__(self, options, on_snapshot: Callable[[FleetSnapshot], object],
                 records: Mapping[str, Record] | None = None, presets: Mapping[str, Record] | None = None) -> None:
        self.options = options
        self.on_snapshot = on_snapshot
        self.tracker = FleetTracker(options.queries, options.prometheus or "", records, presets)
        self._runner = LoopThread("specmon-fleet-poller")
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._woken: asyncio.Event | None = None

    def start(self) -> None:
        self._runner.start(self._run)

    def refresh_now(self) -> None:
        self._wake.set()  # kept for a refresh asked before the loop runs
        self._runner.call_soon_threadsafe(self._wake_loop)

    def _wake_loop(self) -> None:
        if self._woken is not None:
            self._woken.set()

    def stop(self, timeout: float = 2.0) -> None:
        self._stopping.set()
        self._runner.cancel()
        self._runner.join(timeout)

    async def _run(self) -> None:
        configured = False
        async with self.options.client() as client:
            reader = FleetReader(client, self.options.queries, self.options.window_s, self.options.routers)
            while not self._stopping.is_set():
                started = time.monotonic()
                try:
                    if not configured:
                        self.tracker.queries = await reader.configure()
                        configured = True
                    snapshot = self.tracker.update(await reader.read())
                except PromError as exc:
                    snapshot = self.tracker.failed(exc, time.time())
                    configured = configured and exc.kind == "query"
                self.on_snapshot(snapshot)
                await self._sleep(max(0.0, self.options.interval_s - (time.monotonic() - started)))

    async def _sleep(self, seconds: float) -> None:
        """Until the next refresh is due or one is asked for (no wake-ups in between: `stop` cancels)."""
        if self._woken is None:
            self._woken = asyncio.Event()
        if not self._wake.is_set() and not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), seconds)
        self._wake.clear()
        self._woken.clear()
