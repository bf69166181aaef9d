"""FleetPoller: reads the fleet from Prometheus every interval on its own thread (its own asyncio loop) and hands
each FleetSnapshot to a callback (which posts a message; it never touches a widget)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping

from specmon.fleet.model import FleetSnapshot
from specmon.fleet.promapi import PromError
from specmon.fleet.reader import FleetReader
from specmon.fleet.tracker import FleetTracker, Record
from specmon.live.paying import CurveFinder
from specmon.loop_thread import PeriodicReader


class FleetPoller:
    """One refresh every `options.interval_s`; Prometheus failing gives the last snapshot, stale, with why."""

    def __init__(self, options, on_snapshot: Callable[[FleetSnapshot], object],
                 records: Mapping[str, Record] | None = None, presets: Mapping[str, Record] | None = None,
                 curves: CurveFinder | None = None) -> None:
        self.options = options
        self.on_snapshot = on_snapshot
        self.tracker = FleetTracker(options.queries, options.prometheus or "", records, presets, curves)
        self._runner = PeriodicReader("specmon-fleet-poller", self._refresh, interval_s=options.interval_s,
                                      session=self._reader, failed=self._read_failed)
        self._configured = False

    def start(self) -> None:
        self._runner.start()

    def refresh_now(self) -> None:
        self._runner.wake()

    def stop(self, timeout: float = 2.0) -> None:
        self._runner.stop(timeout)

    @contextlib.asynccontextmanager
    async def _reader(self) -> AsyncIterator[FleetReader]:
        self._configured = False
        async with self.options.client() as client:
            yield FleetReader(client, self.options.queries, self.options.window_s, self.options.routers)

    async def _refresh(self, reader: FleetReader) -> None:
        try:
            if not self._configured:
                self.tracker.queries = await reader.configure()
                self._configured = True
            snapshot = self.tracker.update(await reader.read())
        except PromError as exc:
            snapshot = self.tracker.failed(exc, time.time())
            self._configured = self._configured and exc.kind == "query"
        self.on_snapshot(snapshot)

    def _read_failed(self, exc: Exception) -> None:
        """Anything else that failed (an answer that broke the reader, the client not opened): the last snapshot,
        stale, with why, as for Prometheus failing."""
        if isinstance(exc, PromError):
            error = exc
        else:
            error = PromError("bad_answer", f"the fleet could not be read ({type(exc).__name__}: {exc})")
        self.on_snapshot(self.tracker.failed(error, time.time()))
