"""A server reachable only through Prometheus, drilled down into: its Live view fed from one instant query of
its `sglang:*` samples (turned into the exposition text the /metrics parser reads), every few seconds."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterable

from specmon.fleet.matchers import valid_label_name
from specmon.fleet.model import FleetRow
from specmon.fleet.promapi import PromClient, PromError, Sample
from specmon.fleet.promql import FleetQueries
from specmon.fleet.text import MISSING
from specmon.live.model import Alert
from specmon.live.sampler import LiveMonitor
from specmon.loop_thread import PeriodicReader
from specmon.serving.prom import parse_scrape
from specmon.text import printable
from specmon.units import elapsed

HISTORY_S = 3600.0
HISTORY_STEP_S = 15.0
HISTORY_EVERY_S = 300.0
"""The running count's last hour (a grid sweep's recommendation is weighted by it), read again this often."""
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
TARGET_LABELS = frozenset({"instance", "job", "__name__"})
"""Labels Prometheus adds per target: left out, so a multi-node server's ranks merge as one /metrics would."""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def samples_text(samples: Iterable[Sample], drop: frozenset[str] = TARGET_LABELS) -> str:
    """Instant-vector samples as Prometheus exposition text (`name{labels} value` lines)."""
    lines = []
    for sample in samples:
        name = sample.labels.get("__name__")
        if not name or not _METRIC_NAME.fullmatch(name):  # a name or label name that is not one: no line of its own
            continue
        labels = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(sample.labels.items())
                          if k not in drop and valid_label_name(k))
        lines.append(f"{name}{{{labels}}} {sample.value!r}" if labels else f"{name} {sample.value!r}")
    return "\n".join(lines) + "\n"


class PromLiveSampler:
    """Feeds a LiveMonitor from Prometheus: one instant query of the server's `sglang:*` samples per interval.
    Same `start()`/`stop()` as LiveSampler; Prometheus failing marks the server unreachable."""

    def __init__(self, client_factory, queries: FleetQueries, server: str, monitor: LiveMonitor,
                 interval_s: float = 2.0, row: FleetRow | None = None, last_up_at: float | None = None) -> None:
        self.client_factory = client_factory
        self.row = row
        """The server's row in the fleet when the drill-down began: said while Prometheus has no samples of it."""
        self.last_up_at = last_up_at
        self.queries = queries
        self.server = server
        self.monitor = monitor
        self.error: str | None = None
        self.running_history: tuple[list[float | None], float] | None = None
        """The server's running requests over the last hour as Prometheus holds them (a point per HISTORY_STEP_S)
        and the span they cover; None until read, or when Prometheus has none."""
        self._history_at: float | None = None
        self._runner = PeriodicReader("specmon-prom-live-sampler", self.read_once, interval_s=interval_s,
                                      session=client_factory, failed=self._read_failed)

    @property
    def interval_s(self) -> float:
        return self._runner.interval_s

    def start(self) -> None:
        with self.monitor.lock:
            self.monitor.tracker.metrics_source = "prometheus"
        self._runner.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._runner.stop(timeout)

    def _read_failed(self, exc: Exception) -> None:
        """Anything but Prometheus failing (an answer that broke the parser, the client not opened): said, and
        the server marked unreachable as for Prometheus failing."""
        self.error = PromError("bad_answer", f"{type(exc).__name__}: {exc}").message
        with self.monitor.lock:
            self.monitor.tracker.set_reachable(False)

    async def read_once(self, client: PromClient) -> None:
        drop = TARGET_LABELS | {self.queries.server_label} | (
            {self.queries.host_label} if self.queries.host_label else set())
        try:
            samples = await client.query(self.queries.server_samples(self.server))
        except PromError as exc:
            self.error = exc.message
            with self.monitor.lock:
                self.monitor.tracker.set_reachable(False)
            return
        self.error = None
        now = time.time()
        if self._history_at is None or now - self._history_at >= HISTORY_EVERY_S:
            self._history_at = now
            await self._read_history(client, now)
        scrape = parse_scrape(samples_text(samples, frozenset(drop)), now)
        why = () if samples or self.row is None else row_alerts(self.row, self.last_up_at, now)
        with self.monitor.lock:
            self.monitor.tracker.set_reachable(bool(samples), why)
            if samples:
                self.monitor.tracker.add_scrape(scrape)


    async def _read_history(self, client: PromClient, now: float) -> None:
        """The last hour of the server's running count (one range query; Prometheus failing leaves the last)."""
        with contextlib.suppress(PromError):
            history = await running_history(client, self.queries.running_of(self.server), now)
            self.running_history = history[:2] if history is not None else None


async def running_history(client: PromClient, expr: str, now: float) -> tuple[list[float | None], float, int] | None:
    """The running-request counts of the servers `expr` gives over the last hour (one range query, a point per
    HISTORY_STEP_S), the longest span one server's points cover, and how many servers; None when no server has two
    points. PromError when Prometheus fails."""
    series = await client.query_range(expr, now - HISTORY_S, now, HISTORY_STEP_S)
    spans = [s.points[-1][0] - s.points[0][0] for s in series if len(s.points) > 1]
    if not spans:
        return None
    return [v for s in series for _, v in s.points], max(spans), len(series)


def row_alerts(row: FleetRow, last_up_at: float | None, now: float) -> tuple[Alert, ...]:
    """What the fleet's row says of a server Prometheus holds no samples of now (a drill-down shows no less
    than its row): down since when, then its preset · algorithm · draft tokens, role, nodes up and host."""
    if last_up_at is not None:
        down = Alert("down", "error", f"down, last seen {elapsed(now - last_up_at)} ago: no target answers "
                                      "Prometheus' scrapes")
    else:
        down = next((a for a in row.alerts if a.kind == "down"),
                    Alert("down", "error", "no samples in Prometheus now: no target answers its scrapes"))
    draft = f"{row.draft_tokens} draft" if row.draft_tokens else f"{MISSING} draft"
    facts = " · ".join([row.preset or MISSING, row.algorithm or MISSING, draft, *([row.role] if row.role else []),
                        f"nodes {row.nodes_up}/{row.nodes_total}", row.host or MISSING])
    return down, Alert("fleet", "info", printable(f"fleet row: {facts}"))


MAX_TARGETS_TRIED = 8
"""A server's targets asked whether they answer from here, at most (each may take the whole timeout)."""


def target_url(instance: str) -> tuple[str | None, str | None]:
    """The URL of a scrape target (its `instance` label), made from its host and port only: `http://host:port`.
    A scheme, path, query or fragment the label carries is left off (SGLang's /health_generate generates); what
    is left must be a plain `host:port` (`urls.target_url`: a label that names a user, `user@host`, which would
    send the request to the host after `@`, has no port or a host that is not a name or an address is not
    contacted). Returns (URL, None) or (None, why)."""
    from specmon.urls import UrlRefused
    from specmon.urls import target_url as plain_target_url

    text = instance.split("://", 1)[1] if "://" in instance else instance
    address = re.split(r"[/?#]", text, maxsplit=1)[0]
    try:
        return plain_target_url(address, what="target"), None
    except UrlRefused as exc:
        return None, f"{exc}: not contacted"


def reachable_url(targets: Iterable[str], timeout_s: float = 1.5) -> tuple[str | None, list[str]]:
    """The first target that answers SGLang's API from here (`/model_info`, which generates nothing), as a URL
    of its host and port only (`target_url`), and what was said of the targets not asked (at most
    MAX_TARGETS_TRIED are). Each answer is read within `timeout_s` and at most MAX_INFO_BYTES once decoded (else
    not SGLang's)."""
    from specmon.http.blocking import BlockingFetcher
    from specmon.http.errors import HttpError
    from specmon.serving.client import MAX_INFO_BYTES

    notes: list[str] = []
    targets = list(targets)
    if len(targets) > MAX_TARGETS_TRIED:
        notes.append(f"{len(targets)} targets: the first {MAX_TARGETS_TRIED} asked")
    with BlockingFetcher(connect_timeout_s=timeout_s) as fetcher:
        for target in targets[:MAX_TARGETS_TRIED]:
            url, why = target_url(target)
            if url is None:
                notes.append(why or "")
                continue
            try:
                for path in ("/model_info", "/get_model_info"):
                    if fetcher.fetch("GET", url + path, limit=MAX_INFO_BYTES, deadline_s=timeout_s).status_code == 200:
                        return url, notes
            except HttpError:
                continue
    return None, notes
