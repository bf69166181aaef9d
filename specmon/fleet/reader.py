"""One refresh of the fleet: every column for every server in a few combined requests (one expression per
column, tagged), the tok/s history every few minutes, and each router's `/workers`. Read-only GETs; each fault
becomes a PromError or a note."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import replace

import httpx

from specmon.fleet.promapi import PromClient, PromError, Sample, ScrapeConfig
from specmon.fleet.promql import COLUMN_LABEL, HISTORY_S, FleetQueries, recorded_columns, window_for
from specmon.fleet.tracker import FleetReading, Worker

QUERY_GROUPS = 3
"""The columns are asked in this many requests at once (Prometheus evaluates them on several cores)."""
HISTORY_EVERY_S = 300.0
"""The 15-minute tok/s history is read whole this often (and at start); between, each refresh adds its point."""
MAX_WORKERS_BYTES = 4 * 1024 * 1024
MAX_WORKERS = 10000
ROLES = frozenset({"regular", "prefill", "decode"})


class FleetReader:
    """Reads the fleet from one Prometheus (and the routers). `read()` returns a FleetReading or raises
    PromError (Prometheus unreachable, 401, not answering the API)."""

    def __init__(self, client: PromClient, queries: FleetQueries, asked_window_s: float,
                 routers: Sequence[str] = (), clock=time.time) -> None:
        self.client = client
        self.queries = queries
        self.asked_window_s = asked_window_s
        self.routers = list(routers)
        self.clock = clock
        self.scrape: ScrapeConfig | None = None
        self.notes: list[str] = []
        self.groups = QUERY_GROUPS
        self.history_at: float | None = None
        self.last_up: dict[str, float | None] = {}
        """When each server seen down was last up (None: not in the last hour), asked once per server."""

    async def configure(self) -> FleetQueries:
        """Ask Prometheus for its scrape interval and set the rate window to at least 4 × it."""
        self.scrape = await self.client.scrape_config()
        up = await self.client.query(self.queries.up())
        jobs = {s.labels["job"] for s in up if s.labels.get("job")}
        interval = self.scrape.interval_for(jobs)
        window = window_for(self.asked_window_s, interval)
        self.notes = []
        if window > self.asked_window_s:
            self.notes.append(f"rate window raised from {self.asked_window_s:g} s to {window:g} s "
                              f"(4 × the scrape interval {interval:g} s)")
        self.queries = _with_window(self.queries, window)
        try:
            rules = await self.client.recording_rules()
        except PromError as exc:
            if exc.kind in ("unreachable", "unauthorized"):
                raise
            rules = {}  # an API without /rules: every column inline
        self.queries = replace(self.queries, recorded=recorded_columns(self.queries, rules))
        if self.queries.recorded:
            self.notes.append(f"{len(self.queries.recorded)} of {len(self.queries.columns())} columns read from "
                              f"the recording rules Prometheus evaluates (`specmon fleet rules`)")
        return self.queries

    async def read(self) -> FleetReading:
        if self.scrape is None:
            await self.configure()
        assert self.scrape is not None
        now = self.clock()
        columns = self.queries.columns()
        started = time.perf_counter()
        interval = self.scrape.interval_for()
        history_due = self.history_at is None or now - self.history_at >= HISTORY_EVERY_S
        asks = [self.client.query(expr, at=now) for expr in self.queries.combined(self.groups)]
        if history_due:
            asks.append(self.client.query_range(self.queries.history(), now - HISTORY_S, now,
                                                self.queries.history_step(interval)))
        answers = await asyncio.gather(*asks)
        history = answers[len(answers) - 1:] if history_due else []
        combined = [sample for answer in answers[: len(answers) - len(history)] for sample in answer]
        by_column: dict[str, list[Sample]] = {}
        for sample in combined:  # each answer's labels are its own dicts: the column's tag is taken off in place
            key = sample.labels.pop(COLUMN_LABEL, "")
            by_column.setdefault(key, []).append(sample)
        up = by_column.pop("up", [])
        by_column["last_up"] = await self._last_up(up, now)
        query_s = time.perf_counter() - started
        if history_due:
            self.history_at = now
        notes = list(self.notes)
        workers: list[Worker] = []
        for router in self.routers:
            found, problem = await read_workers(router, self.client.timeout_s)
            workers += found
            if problem:
                notes.append(problem)
        return FleetReading(
            taken_at=now, window_s=self.queries.window_s, scrape_s=interval, up=up,
            columns={key: by_column.get(key, []) for key in ("last_up", *(column.key for column in columns))},
            history=history[0] if history else (), history_read=history_due, workers=workers, notes=notes,
            query_s=query_s,
        )

    async def _last_up(self, up: list[Sample], now: float) -> list[Sample]:
        """When the servers that are down now were last up (one query, only for servers newly seen down)."""
        label = self.queries.server_label
        states: dict[str, bool] = {}
        for sample in up:
            name = sample.labels.get(label)
            if name:
                states[name] = states.get(name, False) or sample.value == 1.0
        down = sorted(name for name, is_up in states.items() if not is_up)
        for name in [n for n in self.last_up if states.get(n, False)]:
            del self.last_up[name]  # up again: ask anew when it next goes down
        new = [name for name in down if name not in self.last_up][:200]
        if new:
            assert self.scrape is not None
            answer = await self.client.query(self.queries.last_up(new, self.scrape.interval_for()), at=now)
            for name in new:
                self.last_up[name] = None
            for sample in answer:
                if sample.labels.get(label) in self.last_up:
                    self.last_up[sample.labels[label]] = sample.value
        return [Sample({label: name}, when) for name in down if (when := self.last_up.get(name)) is not None]


def _with_window(queries: FleetQueries, window_s: float) -> FleetQueries:
    return replace(queries, window_s=window_s, recorded=frozenset())


async def read_workers(router: str, timeout_s: float = 5.0) -> tuple[list[Worker], str | None]:
    """An sglang-router's `GET /workers`: each worker's URL and role; a problem as one line (never raises)."""
    url = router.rstrip("/")
    try:
        async with httpx.AsyncClient(timeout=timeout_s, trust_env=False) as http, \
                http.stream("GET", url + "/workers") as response:
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_WORKERS_BYTES:
                    return [], f"router {url}: /workers answer over {MAX_WORKERS_BYTES} bytes, ignored"
            status = response.status_code
    except (httpx.HTTPError, OSError) as exc:
        return [], f"router {url} did not answer ({type(exc).__name__}): roles from labels"
    if status != 200:
        return [], f"router {url}: /workers answered HTTP {status}: roles from labels"
    try:
        data = json.loads(body)
    except ValueError:
        return [], f"router {url}: /workers is not JSON: roles from labels"
    items = data.get("workers") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return [], f"router {url}: /workers holds no worker list: roles from labels"
    workers = []
    for item in items[:MAX_WORKERS]:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            continue
        role = item.get("worker_type")
        metadata = item.get("metadata") if isinstance(item.get("metadata"), dict) else {}
        workers.append(Worker(
            url=item["url"][:512], role=role if role in ROLES else "unknown",
            healthy=item.get("is_healthy") if isinstance(item.get("is_healthy"), bool) else None,
            tp_size=_size(metadata.get("tp_size")), dp_size=_size(metadata.get("dp_size")), router=url,
        ))
    return workers, None


def _size(value: object) -> int | None:
    try:
        size = int(value)  # the router gives "1" (a string)
    except (TypeError, ValueError):
        return None
    return size if 0 < size <= 4096 else None
