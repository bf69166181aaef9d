"""One refresh of the fleet: every column for every server in a few combined requests (the parts the columns
are made of, tagged; `specmon.fleet.figures` computes the columns), the tok/s history every few minutes, the
gauges a launch fixes when a target or a restart changes (and every few minutes), and each router's `/workers`.
Read-only GETs; each fault becomes a PromError or a note.

Every request is evaluated at Prometheus' own time (this host's clock may be off: the skew is said), the parts'
values are checked before a column is computed from them (`promql.PART_CHECKS`: an absurd one is said and
counts as NaN, so no figure is made from it), and what Prometheus said beside its answers (warnings, series
left out) is said with the snapshot."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from dataclasses import replace

from specmon.fleet.figures import figures
from specmon.fleet.promapi import PromClient, PromError, RecordingRule, Sample, ScrapeConfig, gc_paused
from specmon.fleet.promql import (
    COLUMN_LABEL,
    GAUGES_PART,
    HISTORY_S,
    LAUNCH_PART,
    NOW_PART,
    PART_CHECKS,
    SCRAPE_COUNT_S,
    SERVERS_LE,
    TTFT_BOUNDS,
    FleetQueries,
    recorded_columns,
    window_for,
)
from specmon.fleet.tracker import MAX_SERVERS, FleetReading, Worker
from specmon.inputs import InputError
from specmon.text import printable, quoted
from specmon.units import elapsed

QUERY_GROUPS = 2
"""The parts are asked in this many requests at once (Prometheus evaluates them on several cores)."""
MAX_ASKED = 200
"""At most this many servers or targets are named in one follow-up query (last seen, stall samples, names)."""
HISTORY_EVERY_S = 300.0
"""The 15-minute tok/s history is read whole this often (and at start); between, each refresh adds its point."""
LAUNCH_EVERY_S = 300.0
"""The launch's gauges (`promql.LAUNCH_GAUGES`) are read at least this often, and at once when the targets up or
the restarts change; between, each refresh uses those last read."""
MAX_WORKERS_BYTES = 4 * 1024 * 1024
MAX_WORKERS = 10000
ROLES = frozenset({"regular", "prefill", "decode"})
DEFAULT_SCRAPE_S = 60.0
"""The scrape interval taken when Prometheus says none and its samples cannot tell (Prometheus' own default)."""
SKEW_S = 10.0
"""This host's clock further than this from Prometheus' is said (the fleet is read at Prometheus' time)."""
MAX_JOBS_SAID = 5
ANSWER_S_PER_1000 = 3.0
"""Prometheus' answers may take this much longer per 1,000 targets past the first 1,000 (its evaluation grows
with the series it reads), up to MAX_SERVERS targets: at most 27 s more, said when raised."""


class FleetReader:
    """Reads the fleet from one Prometheus (and the routers). `read()` returns a FleetReading or raises
    PromError (Prometheus unreachable, 401, not answering the API)."""

    def __init__(self, client: PromClient, queries: FleetQueries, asked_window_s: float,
                 routers: Sequence[str] = (), clock=None) -> None:
        self.client = client
        self.queries = queries
        self.asked_window_s = asked_window_s
        self.routers = list(routers)
        self.clock = clock
        """The time to read the fleet at (tests, benchmarks); None: Prometheus' own time, never this host's."""
        self.answer_s = client.answer_s
        """How long an answer may take up to 1,000 targets (the client's own bound)."""
        self.jobs: list[str] | None = None
        """Prometheus' jobs, asked once when the selector matches no target (to say which there are)."""
        self.scrape: ScrapeConfig | None = None
        self.notes: list[str] = []
        self.groups = QUERY_GROUPS
        self.history_at: float | None = None
        self.with_history = True
        """Whether refreshes read the 15-minute tok/s history (one snapshot for a drill-down does not)."""
        self.last_up: dict[str, float | None] = {}
        """When each target seen down was last up (None: not in the last hour), asked once per target."""
        self.ttft_bounds: dict[str, tuple[float, float] | None] = {}
        """Each server's first and highest finite TTFT bucket bound (None: it has none), asked once per server
        (again with the history)."""
        self.launch: list[Sample] | None = None
        """The launch's gauges (LAUNCH_PART) as last read (None: not read since configured); their labels are
        never changed."""
        self.launch_at = 0.0
        self.launch_seen: tuple[frozenset[str], dict[str, float | None]] | None = None
        """The targets up and each server's restarts when the launch's gauges were last read."""
        self.names: dict[str, str | None] = {}
        """The server label of targets whose `up` lacks it, from their metrics (None: not found), asked once per
        target (again with the history, for those not found)."""

    async def configure(self) -> FleetQueries:
        """Ask Prometheus for its scrape interval and set the rate window to at least 4 × it; use the recording
        rules Prometheus evaluates without fault."""
        self.notes = []
        self.launch = None  # the columns read inline may change
        self.scrape = await self._scrape_config()
        self.notes += self.scrape.notes
        up = await self.client.query(self.queries.up(), at=self.clock() if self.clock is not None else None)
        self.client.answer_s = answer_s(self.answer_s, len(up))
        if self.client.answer_s > self.answer_s:
            self.notes.append(f"Prometheus' answers may take up to {self.client.answer_s:g} s ({len(up)} targets; "
                              f"{self.answer_s:g} s up to 1,000)")
        jobs = {s.labels["job"] for s in up if s.labels.get("job")}
        interval = self.scrape.interval_for(jobs)
        window = window_for(self.asked_window_s, interval)
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
        self.queries = replace(self.queries, recorded=recorded_columns(self.queries, _healthy(rules)))
        self.notes += _failing_rules(self.queries, rules)
        if self.queries.recorded:
            self.notes.append(f"{len(self.queries.recorded)} of {len(self.queries.columns())} columns read from "
                              f"the recording rules Prometheus evaluates (`specmon fleet rules`)")
        self.notes += self.client.take_notes()  # what Prometheus said beside these answers: said with every read
        return self.queries

    async def _scrape_config(self) -> ScrapeConfig:
        """status/config's scrape intervals; from a compatible backend that has none (Thanos Query,
        VictoriaMetrics, Mimir), the interval its `up` samples of the last minutes show (else
        DEFAULT_SCRAPE_S), said."""
        try:
            return await self.client.scrape_config()
        except PromError as exc:
            if exc.kind in ("unreachable", "unauthorized"):
                raise
            why = exc.message
        counts = await self.client.query(self.queries.scrape_counts())
        measured = [SCRAPE_COUNT_S / s.value for s in counts if math.isfinite(s.value) and s.value >= 2]
        if measured:
            interval = float(max(1, round(max(measured))))
            return ScrapeConfig(interval, notes=(
                f"no scrape interval from Prometheus ({why}): {interval:g} s taken, from its `up` samples of the "
                f"last {SCRAPE_COUNT_S / 60:g} minutes",))
        return ScrapeConfig(DEFAULT_SCRAPE_S, notes=(
            f"no scrape interval from Prometheus ({why}) nor from its `up` samples: {DEFAULT_SCRAPE_S:g} s taken "
            f"(Prometheus' default)",))

    async def read(self) -> FleetReading:
        if self.scrape is None:
            await self.configure()
        assert self.scrape is not None
        at = self.clock() if self.clock is not None else None
        local, started = time.time(), time.perf_counter()
        interval = self.scrape.interval_for()
        launch_asked = self.launch is None
        asked = [self.client.query(expr, at=at) for expr in self.queries.combined(self.groups, launch_asked)]
        bounds_first = not self.ttft_bounds and any(part.key == "ttft_quantile" for part in self.queries.parts())
        if bounds_first:  # the first read's TTFT bounds asked beside the parts (Prometheus evaluates them at once)
            asked.append(self.client.query(self.queries.ttft_shared_bounds(), at=at))
        answers = await asyncio.gather(*asked)
        shared_bounds = answers.pop() if bounds_first else None
        parts: dict[str, list[Sample]] = {}
        with gc_paused():
            for answer in answers:
                for sample in answer:  # each answer's labels are its own dicts: the part's tag is taken off in place
                    parts.setdefault(sample.labels.pop(COLUMN_LABEL, ""), []).append(sample)
        notes = list(self.notes)
        evaluated_at = parts.pop(NOW_PART, [])
        now = at if at is not None else self._evaluated_at(evaluated_at, local, started, notes)
        up = parts.pop("up", [])
        if not up:
            notes.append(await self._nothing_matches())
        launch = await self._launch_gauges(parts.pop(LAUNCH_PART, []) if launch_asked else None, up,
                                           parts.get("restarts", []), now)
        if launch:
            parts[LAUNCH_PART] = launch
        history_due = self.with_history and (self.history_at is None or now - self.history_at >= HISTORY_EVERY_S)
        history = await self.client.query_range(self.queries.history(interval), now - HISTORY_S, now,
                                                self.queries.history_step(interval)) if history_due else []
        if history_due:
            self.names = {target: name for target, name in self.names.items() if name is not None}
        with gc_paused():
            part_notes, nan_said = check_parts(self.queries, parts)
        notes += part_notes
        await self._name_targets(up, now)
        if "ttft_quantile" in parts:
            parts.update(await self._ttft_bounds(parts["ttft_quantile"], now, history_due, shared_bounds))
        with gc_paused():
            columns = figures(self.queries, parts)
        columns["last_up"] = await self._last_up(up, now)
        columns["stall_samples"] = await self._stall_samples(columns, now)
        query_s = time.perf_counter() - started
        if history_due:
            self.history_at = now
        workers: list[Worker] = []
        for router in self.routers:
            found, problem = await read_workers(router, self.client.timeout_s)
            workers += found
            if problem:
                notes.append(problem)
        notes += self.client.take_notes()
        return FleetReading(
            taken_at=now, window_s=self.queries.window_s, scrape_s=interval, up=up,
            columns={key: columns.get(key, []) for key in ("last_up", *(c.key for c in self.queries.columns()))},
            history=history, history_read=history_due, workers=workers, notes=notes, query_s=query_s,
            nan_said=nan_said,
        )

    def _evaluated_at(self, now: list[Sample], local: float, started: float, notes: list[str]) -> float:
        """The time Prometheus evaluated the refresh at (its `time()`); this host's clock off by more than SKEW_S
        is said. This host's time only when Prometheus did not say its own (said too)."""
        evaluated = now[0].value if len(now) == 1 else math.nan
        if not math.isfinite(evaluated) or evaluated <= 0:
            notes.append("Prometheus did not answer its time: the fleet is read at this host's time")
            return local
        skew = evaluated - (local + (time.perf_counter() - started) / 2)
        if abs(skew) > SKEW_S:
            notes.append(f"this host's clock is {elapsed(abs(skew))} {'behind' if skew > 0 else 'ahead of'} "
                         f"Prometheus': the fleet is read at Prometheus' time")
        return evaluated

    async def _nothing_matches(self) -> str:
        """What to say when `up{selector}` matches no target: the selector, and Prometheus' jobs (asked once)."""
        if self.jobs is None:
            answer = await self.client.query(self.queries.jobs())
            self.jobs = sorted({job for s in answer if (job := s.labels.get("job"))})
        jobs = ", ".join(quoted(job, 40) for job in self.jobs[:MAX_JOBS_SAID]) + (
            f" and {len(self.jobs) - MAX_JOBS_SAID} more" if len(self.jobs) > MAX_JOBS_SAID else "")
        return (f"no target matches {printable(self.queries.up())} in Prometheus: check --selector"
                + (f" (its jobs: {jobs})" if jobs else " (it has no targets)"))

    async def _launch_gauges(self, read: list[Sample] | None, up: list[Sample], restarts: list[Sample],
                             now: float) -> list[Sample]:
        """The launch's gauges: `read` with this refresh's parts, else asked again when the targets up or the
        servers' restarts changed since they were last read, or LAUNCH_EVERY_S passed; else the samples last
        read (a list of its own: `check_parts` replaces an absurd one in it)."""
        part = self.queries.launch_part()
        if part is None:
            return []
        label = self.queries.server_label
        seen = (frozenset(s.labels.get("instance", "") for s in up if s.value == 1.0),
                {s.labels.get(label, ""): None if math.isnan(s.value) else s.value for s in restarts})
        if read is None and (self.launch is None or seen != self.launch_seen or now - self.launch_at >= LAUNCH_EVERY_S):
            read = await self.client.query(part.expr, at=now)
        if read is not None:
            self.launch, self.launch_seen, self.launch_at = list(read), seen, now
        assert self.launch is not None
        return list(self.launch)

    async def _name_targets(self, up: list[Sample], now: float) -> None:
        """Give the server label to `up` samples that lack it (it is on the targets' metrics only: SGLang's
        `--extra-metric-labels`), from one query for the targets not seen before."""
        label = self.queries.server_label
        bare = [sample for sample in up if not sample.labels.get(label) and sample.labels.get("instance")]
        new = sorted({s.labels["instance"] for s in bare if s.labels["instance"] not in self.names})[:MAX_ASKED]
        if new:
            up_now = [t for t in new if any(s.labels["instance"] == t and s.value == 1.0 for s in bare)]
            answer = await self.client.query(
                self.queries.server_names(up_now, [t for t in new if t not in up_now]), at=now)
            found: dict[str, str] = {}
            for sample in answer:
                target, name = sample.labels.get("instance"), sample.labels.get(label)
                if target in new and name:
                    found[target] = min(name, found.get(target, name))
            for target in new:
                self.names[target] = found.get(target)
        for sample in bare:
            name = self.names.get(sample.labels["instance"])
            if name:
                sample.labels[label] = name

    async def _ttft_bounds(self, quantiles: list[Sample], now: float, again: bool,
                           shared_answer: list[Sample] | None = None) -> dict[str, list[Sample]]:
        """Each server's first and highest finite TTFT bucket bound, as samples (TTFT_BOUNDS), asked for the
        servers not asked before (every server `again`, with the history) and kept: one answer of a few samples
        when every server has the same bounds (`ttft_shared_bounds`, or `shared_answer`, its answer asked
        already), else one query for their own."""
        label = self.queries.server_label
        servers = sorted({name for s in quantiles if (name := s.labels.get(label))})
        if again:
            self.ttft_bounds = {}
        new = [name for name in servers if name not in self.ttft_bounds]
        if new:
            if shared_answer is None:
                shared_answer = await self.client.query(self.queries.ttft_shared_bounds(), at=now)
            shared = shared_bounds(shared_answer)
            if shared is not None:
                for name in new:
                    self.ttft_bounds[name] = shared
            else:
                await self._own_ttft_bounds(new, now, again)
        out: dict[str, list[Sample]] = {key: [] for key in TTFT_BOUNDS}
        for name in servers:
            span = self.ttft_bounds.get(name)
            if span is not None:
                for key, bound in zip(TTFT_BOUNDS, span, strict=True):
                    out[key].append(Sample({label: name}, bound))
        return out

    async def _own_ttft_bounds(self, new: list[str], now: float, again: bool) -> None:
        """The TTFT bucket bounds of each of `new`, from a sample per server and bound."""
        label = self.queries.server_label
        named = new if len(new) <= MAX_ASKED and not again else []  # [] asks every server's
        found: dict[str, list[float]] = {}
        for sample in await self.client.query(self.queries.ttft_bucket_bounds(named), at=now):
            bound = _bound(sample.labels.get("le", ""))
            if bound is not None:
                found.setdefault(sample.labels.get(label, ""), []).append(bound)
        for name in new:
            bounds = found.get(name)
            self.ttft_bounds[name] = (min(bounds), max(bounds)) if bounds else None

    async def _last_up(self, up: list[Sample], now: float) -> list[Sample]:
        """When the servers that are down now were last up (one query, only for targets newly seen down)."""
        label = self.queries.server_label
        states: dict[str, bool] = {}
        targets: dict[str, list[str]] = {}
        for sample in up:
            name = sample.labels.get(label)
            if name:
                states[name] = states.get(name, False) or sample.value == 1.0
                targets.setdefault(name, []).append(sample.labels.get("instance", name))
        down = sorted(name for name, is_up in states.items() if not is_up)
        down_targets = {target for name in down for target in targets[name]}
        for target in [t for t in self.last_up if t not in down_targets]:
            del self.last_up[target]  # up again (or gone): ask anew when it next goes down
        new = sorted(t for t in down_targets if t not in self.last_up)[:MAX_ASKED]
        if new:
            assert self.scrape is not None
            answer = await self.client.query(self.queries.last_up(new, self.scrape.interval_for()), at=now)
            for target in new:
                self.last_up[target] = None
            for sample in answer:
                if sample.labels.get("instance") in self.last_up:
                    self.last_up[sample.labels["instance"]] = sample.value
        out = []
        for name in down:
            seen = [when for target in targets[name] if (when := self.last_up.get(target)) is not None]
            if seen:
                out.append(Sample({label: name}, max(seen)))
        return out

    async def _stall_samples(self, columns: dict[str, list[Sample]], now: float) -> list[Sample]:
        """How far back Prometheus' samples reach for the servers that run requests with no decode progress
        over the stall window (asked only for them: for every other server the answer would not be used)."""
        label = self.queries.server_label
        rate = "stall_decode_tok_s" if "stall_decode_tok_s" in columns else "decode_tok_s"
        running: dict[str, float] = {}
        for sample in columns.get("running_per_dp", []):
            name = sample.labels.get(label)
            if name and sample.value > 0:
                running[name] = sample.value
        stalled = sorted({s.labels.get(label, "") for s in columns.get(rate, [])
                          if s.value == 0 and s.labels.get(label) in running})[:MAX_ASKED]
        if not stalled:
            return []
        return await self.client.query(self.queries.stall_samples(stalled), at=now)


def shared_bounds(answer: list[Sample]) -> tuple[float, float] | None:
    """The first and highest finite TTFT bucket bound every server with TTFT buckets has, from the answer to
    `FleetQueries.ttft_shared_bounds`, when each of their bounds is every one's (None otherwise: the servers'
    bounds differ, or none has a finite one)."""
    counts: dict[float, float] = {}
    servers = math.nan
    for sample in answer:
        le = sample.labels.get("le", "")
        if le == SERVERS_LE:
            servers = sample.value
            continue
        bound = _bound(le)
        if bound is not None:
            counts[bound] = sample.value
    if not counts or not all(count == servers for count in counts.values()):
        return None
    return min(counts), max(counts)


def answer_s(base_s: float, targets: int) -> float:
    """How long one answer may take for a fleet of `targets`: `base_s`, and ANSWER_S_PER_1000 more per 1,000
    targets past the first 1,000 (counted up to MAX_SERVERS)."""
    past = max(0, min(targets, MAX_SERVERS) - 1000)
    return base_s + ANSWER_S_PER_1000 * past / 1000


def _bound(le: str) -> float | None:
    """A TTFT bucket's `le` as a bound: finite and above 0 (+Inf is no bound; a TTFT bucket bound is above 0),
    else None."""
    try:
        bound = float(le) if len(le) <= 64 else math.nan
    except ValueError:
        return None
    return bound if math.isfinite(bound) and bound > 0 else None


def _with_window(queries: FleetQueries, window_s: float) -> FleetQueries:
    return replace(queries, window_s=window_s, recorded=frozenset())


def _healthy(rules: dict[str, RecordingRule]) -> dict[str, str]:
    """The recording rules Prometheus does not report failing (health "err"): record name → expression. A rule
    not evaluated yet since Prometheus started ("unknown") still has its records from before."""
    return {name: rule.query for name, rule in rules.items() if rule.health != "err"}


def _failing_rules(queries: FleetQueries, rules: dict[str, RecordingRule]) -> list[str]:
    """A note per recording rule of the fleet's (its record name and expression) that Prometheus reports
    failing: its column is computed inline instead."""
    failing = recorded_columns(queries, {name: rule.query for name, rule in rules.items() if rule.health == "err"})
    notes = []
    for column in queries.columns():
        if column.key in failing:
            error = rules[column.record].last_error
            notes.append(f"the recording rule {column.record} fails in Prometheus"
                         + (f" ({quoted(error, 120)})" if error else "") + f": {column.key} is computed inline")
    return notes


def check_parts(queries: FleetQueries, parts: dict[str, list[Sample]]) -> tuple[list[str], frozenset[str]]:
    """Each part's values checked against what they can be (`PART_CHECKS`, by part or by metric for the
    gauges and the framebuffer): an absurd one becomes NaN (so no column is computed from it, by PromQL's
    rules) and is said, with the columns it is read for; those columns are returned (their NaN is said)."""
    notes, said = [], set()
    for key, samples in parts.items():
        by_name = key in (GAUGES_PART, LAUNCH_PART, "dcgm_framebuffer")
        if not by_name and key not in PART_CHECKS:
            continue
        skipped: dict[tuple[str, str], int] = {}
        for i, sample in enumerate(samples):
            name = sample.labels.get("__name__", "") if by_name else key
            check = PART_CHECKS.get(name)
            if check is None or math.isnan(sample.value):
                continue
            why = check.check(sample.value)
            if why is not None:
                samples[i] = Sample(sample.labels, math.nan)
                skipped[(name, why)] = skipped.get((name, why), 0) + 1
        for (name, why), count in skipped.items():
            columns = [column.key for column in queries.columns() if name in column.reads or key in column.reads]
            said.update(columns)
            notes.append(f"skipped {count} value(s) of {printable(name)}"
                         + (f" ({', '.join(columns)})" if columns else "") + f": {why}")
    return notes, frozenset(said)


async def read_workers(router: str, timeout_s: float = 5.0) -> tuple[list[Worker], str | None]:
    """An sglang-router's `GET /workers`: each worker's URL and role; a problem as one line (never raises)."""
    from specmon.http.client import HttpClient
    from specmon.http.errors import AnswerTooLarge, HttpError

    url = router.rstrip("/")
    try:
        async with HttpClient(connect_timeout_s=timeout_s) as http:
            answer = await http.fetch("GET", url + "/workers", limit=MAX_WORKERS_BYTES, deadline_s=timeout_s)
    except AnswerTooLarge:
        return [], f"router {url}: /workers answer over {MAX_WORKERS_BYTES} bytes, ignored"
    except HttpError as exc:
        return [], f"router {url} did not answer ({type(exc).__name__}): roles from labels"
    if answer.status_code != 200:
        return [], f"router {url}: /workers answered HTTP {answer.status_code}: roles from labels"
    try:
        data = answer.json(f"router {url}: /workers")
    except InputError as exc:
        return [], f"{printable(exc)}: roles from labels"
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
        metadata = item.get("metadata")
        if not isinstance(metadata, dict):
            metadata = {}
        workers.append(Worker(
            url=item["url"][:512], role=role if isinstance(role, str) and role in ROLES else "unknown",
            healthy=item.get("is_healthy") if isinstance(item.get("is_healthy"), bool) else None,
            tp_size=_size(metadata.get("tp_size")), dp_size=_size(metadata.get("dp_size")), router=url,
        ))
    return workers, None


def _size(value: object) -> int | None:
    """A parallel size from the router's metadata (it gives "1", a string): a whole number in 1..4096, else
    None."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        size = float(value) if len(str(value)) <= 20 else math.nan
    except ValueError:
        return None
    return int(size) if math.isfinite(size) and size == int(size) and 0 < size <= 4096 else None
