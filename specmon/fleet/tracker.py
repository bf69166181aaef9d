"""FleetTracker: the answers to the fleet's queries in, one FleetRow per server out. Pure: no clock, no I/O.

Servers are found from `up{selector}` grouped by the server label; a server that went down keeps its row
(state "down", last seen N s ago), also once its targets left Prometheus' service discovery. Alerts are the
Live view's own rules (specmon.live.rules), fed from the fleet's figures.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from specmon.fleet.model import FleetRow, FleetSnapshot
from specmon.fleet.promapi import PromError, RangeSeries, Sample, gc_paused, host_of
from specmon.fleet.promql import HISTORY_STEPS, HOST_NAME_LABELS, PART_CHECKS, Column, FleetQueries
from specmon.live import rules
from specmon.live.model import Alert
from specmon.live.paying import CurveFinder, ServingConfig, fleet_reading
from specmon.live.quantiles import Quantile
from specmon.plausible import MAX_TOK_S
from specmon.serving.prom import MAX_DP_RANKS
from specmon.sglang.metric_names import SPEC_NUM_DRAFT_TOKENS, SPEC_NUM_STEPS
from specmon.text import quoted
from specmon.units import elapsed

MAX_SERVERS = 10000
"""More servers than this are left out (and said): bounded memory whatever the selector matches."""
FORGET_AFTER_S = 86400.0
"""A server gone from Prometheus this long is no longer shown."""
HISTORY_POINTS = HISTORY_STEPS + 1
"""A server's tok/s history: the 15 minutes of its sparkline (a point per step, both ends)."""
LAST_UP = Column("last_up", "", "", 0, 1e11)
"""When a down server was last up (Unix time), as the reader asks it (`FleetQueries.last_up`)."""
NAN_IS_NO_DATA = frozenset({"ttft_p99_s", "accept_length"})
"""Columns where NaN means "no requests in the window", not a bad value."""
DOWN_NAMED = 4
"""A server's targets that are down named in its alert (the rest counted)."""
TARGET_CHARS = 60


@dataclass(frozen=True)
class Worker:
    """One worker of an sglang-router's `/workers`: its URL and role ("regular", "prefill", "decode")."""

    url: str
    role: str
    healthy: bool | None = None
    tp_size: int | None = None
    dp_size: int | None = None
    router: str | None = None


@dataclass(frozen=True)
class Record:
    """What specmon's own records say about a server: the preset it last benchmarked and that run's acceptance."""

    preset: str | None = None
    algorithm: str | None = None
    draft_tokens: int | None = None
    accept_length: float | None = None
    config: ServingConfig | None = None
    """The model and speculative settings that run's server said it ran (its measured curve's key)."""


@dataclass(frozen=True)
class FleetReading:
    """One refresh: the answers to every column's query (and `up`), the tok/s history, the routers' workers."""

    taken_at: float
    window_s: float
    scrape_s: float
    up: Sequence[Sample]
    columns: Mapping[str, Sequence[Sample]]
    history: Sequence[RangeSeries] = ()
    history_read: bool = True
    """Whether `history` is a fresh 15-minute read (else each server's point is added from this refresh)."""
    workers: Sequence[Worker] = ()
    notes: Sequence[str] = ()
    query_s: float | None = None
    nan_said: frozenset[str] = frozenset()
    """Columns computed from a value already said to be absurd (made NaN): their NaN is not said again."""


@dataclass
class _Target:
    instance: str
    up: bool
    labels: dict[str, str]


@dataclass
class _Server:
    name: str
    targets: list[_Target] = field(default_factory=list)


class FleetTracker:
    """Turns FleetReadings into FleetSnapshots; remembers servers that went away and when each was last up."""

    def __init__(self, queries: FleetQueries, prometheus: str, records: Mapping[str, Record] | None = None,
                 presets: Mapping[str, Record] | None = None, curves: CurveFinder | None = None) -> None:
        self.queries = queries
        self.curves = curves
        """The measured curves of stored grid sweeps (None: not read)."""
        self.prometheus = prometheus
        self.records = dict(records or {})
        """specmon's benchmark records by server address (`host:port`)."""
        self.presets = dict(presets or {})
        """What specmon's presets launch, by preset name (for a target labelled `preset`)."""
        self.last: FleetSnapshot | None = None
        self._last_up: dict[str, float] = {}
        self._gone: dict[str, FleetRow] = {}
        self._history: dict[str, deque[tuple[float, float | None]]] = {}

    def failed(self, error: PromError, at: float) -> FleetSnapshot:
        """Prometheus could not be read: the last snapshot kept, marked stale, with the one-line reason."""
        base = self.last or FleetSnapshot(self.prometheus, self.queries.window_s)
        return replace(base, error=error.message, error_kind=error.kind, stale=self.last is not None)

    def update(self, reading: FleetReading) -> FleetSnapshot:
        with gc_paused():
            return self._update(reading)

    def _update(self, reading: FleetReading) -> FleetSnapshot:
        notes: list[str] = list(reading.notes)
        servers = self._servers(reading.up, notes)
        values: dict[str, dict[str, float]] = {}
        labelled: dict[str, list[tuple[dict[str, str], float]]] = {}
        columns = {column.key: column for column in self.queries.columns()} | {"last_up": LAST_UP}
        for key, samples in reading.columns.items():
            column = columns.get(key)
            if column is None:
                continue
            checked, spoiled = self._checked(column, samples, notes, key in reading.nan_said)
            labelled[key] = checked + spoiled  # a figure made with a spoiled sample is no figure (`_pick`, per DP)
            if not column.per_host:
                values[key] = self._by_server(checked)
        last_up = {name: when for name, when in values.get("last_up", {}).items()}
        for name, server in servers.items():
            if any(t.up for t in server.targets):
                last_up[name] = reading.taken_at
        for name, when in last_up.items():
            self._last_up[name] = max(when, self._last_up.get(name, 0.0))
        history = self._update_history(reading, values.get("decode_tok_s", {}), servers, notes)
        gpu_memory = self._by_host(labelled.get("gpu_memory_used_ratio", []))
        gpu_util = self._by_host(labelled.get("gpu_util_min", []))
        gpu_note = None
        if not gpu_memory and not gpu_util:
            gpu_note = f"no DCGM series match {{{self.queries.gpu_selector}}}: GPU columns show —"
        # each server's samples and router worker found by key, not by a scan of every server's (quadratic)
        per_dp = _by_label(labelled.get("running_per_dp", []), self.queries.server_label)
        workers: dict[str, tuple[int, Worker]] = {}
        for i, worker in enumerate(reading.workers):
            workers.setdefault(_netloc(worker.url), (i, worker))
        rows = []
        for server in servers.values():
            rows.append(self._row(server, reading, values, per_dp.get(server.name, ()), workers, history,
                                  (gpu_memory, gpu_util), notes))
        seen = {row.server for row in rows}
        for name in list(self._gone):
            if name in seen:
                del self._gone[name]
        for row in (self.last.rows if self.last else ()):
            if row.server not in seen and row.server not in self._gone:
                self._gone[row.server] = row
        for name, row in list(self._gone.items()):
            up_at = self._last_up.get(name)
            if up_at is not None and reading.taken_at - up_at > FORGET_AFTER_S:
                del self._gone[name]
                continue
            rows.append(self._down(row, reading.taken_at, up_at))
        rows.sort(key=lambda row: (row.worst, row.server))
        snapshot = FleetSnapshot(self.prometheus, reading.window_s, tuple(rows), reading.taken_at, reading.scrape_s,
                                 reading.query_s, tuple(notes), gpu_note)
        self.last = snapshot
        return snapshot

    # ----- reading the answers

    def _servers(self, up: Sequence[Sample], notes: list[str]) -> dict[str, _Server]:
        """The servers of `up` by the server label, each target once (a target answered twice is up when either
        says so): an `up` that is neither 0 nor 1 is left out and said."""
        label = self.queries.server_label
        servers: dict[str, _Server] = {}
        targets: dict[tuple[str, str], _Target] = {}
        unlabelled, absurd, twice = 0, 0, 0
        for sample in up:
            name = sample.labels.get(label)
            if not name:
                unlabelled += 1
                continue
            if sample.value not in (0.0, 1.0):  # NaN included
                absurd += 1
                continue
            instance = sample.labels.get("instance", name)
            target = targets.get((name, instance))
            if target is not None:
                twice += 1
                target.up = target.up or sample.value == 1.0
                continue
            if name not in servers and len(servers) >= MAX_SERVERS:
                notes.append(f"more than {MAX_SERVERS} servers: the rest left out")
                break
            target = targets[(name, instance)] = _Target(instance, sample.value == 1.0, dict(sample.labels))
            servers.setdefault(name, _Server(name)).targets.append(target)
        if unlabelled:
            notes.append(f"{unlabelled} target(s) without the server label {label!r} left out")
        if absurd:
            notes.append(f"skipped {absurd} value(s) of up: neither 0 nor 1 (those targets left out)")
        if twice:
            notes.append(f"{twice} target(s) answered twice in up (the same server and instance): counted once")
        return servers

    def _checked(self, column: Column, samples: Sequence[Sample], notes: list[str], nan_said: bool = False
                 ) -> tuple[list[tuple[dict, float]], list[tuple[dict, float]]]:
        """The samples whose value can be used, and those that cannot (each with NaN: "spoiled", said unless it
        is a NaN that means no data or was said already)."""
        kept: list[tuple[dict, float]] = []
        spoiled: list[tuple[dict, float]] = []
        skipped: dict[str, int] = {}
        for sample in samples:
            why = column.check(sample.value)
            if why is None:
                kept.append((sample.labels, sample.value))
                continue
            if not (why == "NaN" and column.key in NAN_IS_NO_DATA):
                spoiled.append((sample.labels, math.nan))
            if not (why == "NaN" and (column.key in NAN_IS_NO_DATA or nan_said)):
                skipped[why] = skipped.get(why, 0) + 1
        for why, count in skipped.items():
            notes.append(f"skipped {count} value(s) of {column.key}: {why}")
        return kept, spoiled

    def _by_server(self, samples: list[tuple[dict, float]]) -> dict[str, float]:
        label = self.queries.server_label
        out: dict[str, float] = {}
        for labels, value in samples:
            name = labels.get(label)
            if name is not None and name not in out:
                out[name] = value
        return out

    def _update_history(self, reading: FleetReading, decode: dict[str, float], servers: dict[str, _Server],
                        notes: list[str]) -> dict[str, tuple[float | None, ...]]:
        """Each server's tok/s over 15 minutes: a fresh range read replaces it (an absurd point a gap, said);
        between reads, each refresh adds its own point (one per history step at most)."""
        label = self.queries.server_label
        step = self.queries.history_step(reading.scrape_s)
        if reading.history_read:
            checker = Column("history", "", "", high=MAX_TOK_S)  # the decode rate's own range
            self._history = {}
            skipped: dict[str, int] = {}
            for item in reading.history:
                name = item.labels.get(label)
                if name:
                    points: deque[tuple[float, float | None]] = deque(maxlen=HISTORY_POINTS)
                    for t, v in item.points:
                        why = checker.check(v)
                        if why is not None:
                            skipped[why] = skipped.get(why, 0) + 1
                        points.append((t, None if why else v))
                    self._history[name] = points
            for why, count in skipped.items():
                notes.append(f"skipped {count} point(s) of the 15-minute tok/s: {why} (shown as gaps)")
        else:
            for name in servers:
                points = self._history.setdefault(name, deque(maxlen=HISTORY_POINTS))
                if not points or reading.taken_at - points[-1][0] >= step:
                    points.append((reading.taken_at, decode.get(name)))
        for name in [n for n in self._history if n not in servers and n not in self._gone]:
            if len(self._history) > MAX_SERVERS:
                del self._history[name]
        return {name: tuple(v for _, v in points) for name, points in self._history.items()}

    # ----- one row

    def _row(self, server: _Server, reading: FleetReading, values: dict[str, dict[str, float]],
             running_per_dp: Sequence[tuple[dict, float]], workers: dict[str, tuple[int, Worker]], history: dict[str, tuple],
             gpus: tuple[dict[str, list[float]], dict[str, list[float]]], notes: list[str]) -> FleetRow:
        name = server.name

        def v(key: str) -> float | None:
            return values.get(key, {}).get(name)

        hosts = self._hosts(server)
        nodes_up = sum(1 for t in server.targets if t.up)
        target_label = _first_label(server, ("preset", "algorithm", "role", "draft_tokens"))
        record = self._record(server)
        per_dp: dict[str, float] = {}
        engine_type = None
        for labels, value in running_per_dp:
            per_dp[labels.get("dp_rank", "")] = value
            engine_type = engine_type or labels.get("engine_type")
        if len(per_dp) > MAX_DP_RANKS:  # as the Live view refuses such a /metrics: no figure, said
            notes.append(f"{quoted(name)} has {len(per_dp):,} dp_rank values, more than {MAX_DP_RANKS}: its "
                         f"running requests not used")
            per_dp = {}
        if any(math.isnan(value) for value in per_dp.values()):  # a rank's value was absurd (said): no sum
            per_dp = {}
        running = sum(per_dp.values()) if per_dp else None
        role, role_source = self._role(server, workers, target_label, engine_type)
        preset = target_label.get("preset") or record.preset
        known = self.presets.get(preset, Record()) if preset else Record()
        draft = v("draft_tokens")
        draft_tokens = (int(draft) if draft else _label_count(target_label, "draft_tokens", name, notes)
                        or known.draft_tokens or record.draft_tokens)
        algorithm = target_label.get("algorithm") or known.algorithm or record.algorithm
        accept = v("accept_length")
        source: str | None = "counters"
        gauge = v("accept_gauge")
        if accept is None and gauge:
            accept, source = gauge, "gauge"
        if accept is None:
            source = None
        speculative = bool((algorithm and algorithm.upper() != "NONE") or (draft_tokens or 0) > 0
                           or (v("num_steps") or 0) > 0 or accept)
        generated = (v("generation_tok_s") or 0.0) * reading.window_s
        restarts = int(v("restarts") or 0)
        kv, queued = v("kv_used_ratio"), v("queued")
        decode = v("decode_tok_s")
        stall_rate = v("stall_decode_tok_s") if "stall_decode_tok_s" in values else decode
        stalled_for = 0.0
        if stall_rate == 0:  # no progress over the stall window, as far as Prometheus' samples reach back
            covered = (v("stall_samples") or 0.0) * reading.scrape_s
            stalled_for = min(max(reading.window_s, rules.STALL_S), covered)
        alerts: list[Alert] = []
        paying = fleet_reading(self.curves, record.config, algorithm, draft_tokens, running, reading.taken_at)
        if nodes_up == 0:
            alerts.append(self._down_alert(name, reading.taken_at))
            paying = None
        else:
            if nodes_up < len(server.targets):
                down = [t.instance for t in server.targets if not t.up]
                more = f" and {len(down) - DOWN_NAMED} more" if len(down) > DOWN_NAMED else ""
                alerts.append(Alert("down", "warning", f"{len(down)} of {len(server.targets)} nodes down: "
                                    + ", ".join(t[:TARGET_CHARS] for t in down[:DOWN_NAMED]) + more))
            for alert in (rules.stall(running, stalled_for),
                          rules.acceptance(accept, speculative, generated, record.accept_length),
                          rules.kv_full(kv, 1.0, queued),
                          rules.dp_imbalance(per_dp),
                          rules.restarted(restarts), paying.alert() if paying is not None else None):
                if alert is not None:
                    alerts.append(alert)
        if nodes_up == 0:
            state = "down"
        elif any(a.kind == "stall" for a in alerts):
            state = "stalled"
        elif restarts:
            state = "restarted"
        else:
            state = "serving" if rules.serving(running, decode) else "idle"
        last_up = self._last_up.get(name)
        return FleetRow(
            server=name, host=hosts[0] if hosts else None, role=role, role_source=role_source, state=state,
            restarts=restarts,
            nodes_up=nodes_up, nodes_total=len(server.targets),
            last_seen_s=None if nodes_up or last_up is None else max(0.0, reading.taken_at - last_up),
            preset=preset, algorithm=algorithm, draft_tokens=draft_tokens,
            decode_tok_s=decode if nodes_up else None, accept_length=accept if nodes_up else None,
            accept_source=source if nodes_up else None, running=running if nodes_up else None,
            queued=queued if nodes_up else None, kv_used_ratio=kv if nodes_up else None,
            ttft_p99=Quantile(v("ttft_p99_s"), v("ttft_p99_below_s"), v("ttft_p99_above_s")) if nodes_up
            else Quantile(),
            gpu_memory_used_ratio=_pick(gpus[0], hosts, max), gpu_util_min_ratio=_ratio(_pick(gpus[1], hosts, min)),
            alerts=tuple(alerts), history=history.get(name, ()),
            targets=tuple(t.instance for t in server.targets), speculation_pays=paying,
        )

    def _down_alert(self, name: str, now: float) -> Alert:
        last_up = self._last_up.get(name)
        seen = f"last seen {elapsed(now - last_up)} ago" if last_up is not None else "not up in the last hour"
        return Alert("down", "error", f"down, {seen}: no target answers Prometheus' scrapes")

    def _down(self, row: FleetRow, now: float, last_up: float | None) -> FleetRow:
        """A server whose targets left Prometheus: kept as down, its last figures dropped."""
        alert = Alert("down", "error", "gone from Prometheus' targets"
                      + (f" (last seen {elapsed(now - last_up)} ago)" if last_up is not None else ""))
        return FleetRow(server=row.server, host=row.host, role=row.role, role_source=row.role_source, state="down",
                        restarts=row.restarts, nodes_up=0, nodes_total=row.nodes_total,
                        last_seen_s=None if last_up is None else max(0.0, now - last_up), preset=row.preset,
                        algorithm=row.algorithm, draft_tokens=row.draft_tokens, alerts=(alert,),
                        targets=row.targets)

    def _hosts(self, server: _Server) -> list[str]:
        """The hosts of the server's targets (a multi-node server has several): the host label, else the
        target's address without its port."""
        label = self.queries.host_label
        hosts = []
        for target in server.targets:
            host = target.labels.get(label) if label else host_of(target.instance)
            if host and host not in hosts:
                hosts.append(host)
        return hosts

    def _record(self, server: _Server) -> Record:
        for target in server.targets:
            record = self.records.get(target.instance) or self.records.get(server.name)
            if record is not None:
                return record
        return Record()

    def _role(self, server: _Server, workers: dict[str, tuple[int, Worker]], target_label: dict[str, str],
              engine_type: str | None) -> tuple[str | None, str | None]:
        """The role a router gives one of the server's addresses (its first worker that matches, in the routers'
        order; `workers`: the first of each address, with its place), else its label's, else its engine type."""
        addresses = {t.instance for t in server.targets} | {server.name}
        found = [workers[address] for address in addresses if address in workers]
        if found:
            return min(found, key=lambda placed: placed[0])[1].role, "router"
        if target_label.get("role"):
            return target_label["role"], "label"
        if engine_type:
            return engine_type, "engine_type"
        return None, None

    def _by_host(self, samples: list[tuple[dict, float]]) -> dict[str, list[float]]:
        """DCGM figures by every host they belong to (`series_hosts`), so each server finds its own at once."""
        out: dict[str, list[float]] = {}
        for labels, value in samples:
            for host in series_hosts(labels, self.queries.host_label):
                out.setdefault(host, []).append(value)
        return out


def _ratio(percent: float | None) -> float | None:
    return None if percent is None else percent / 100.0


def _pick(by_host: dict[str, list[float]], hosts: Sequence[str], pick) -> float | None:
    """The highest memory use or the lowest utilization over the server's hosts' DCGM figures (None when one
    of them could not be used: NaN)."""
    mine = [value for host in hosts for value in by_host.get(host, ())]
    return pick(mine) if mine and not any(math.isnan(value) for value in mine) else None


def series_hosts(labels: Mapping[str, str], host_label: str | None) -> set[str]:
    """The hosts a DCGM series belongs to: its `Hostname` (`hostname` since dcgm-exporter#655), and its
    target's host label (the target's address without its port when no host label is given)."""
    hosts = {labels[name] for name in HOST_NAME_LABELS if labels.get(name)}
    target_host = labels.get(host_label) if host_label else host_of(labels.get("instance", ""))
    if target_host:
        hosts.add(target_host)
    return hosts


def on_host(labels: Mapping[str, str], hosts: set[str], host_label: str | None) -> bool:
    """Whether a DCGM series belongs to one of `hosts` (by `series_hosts`)."""
    return not hosts.isdisjoint(series_hosts(labels, host_label))


def _first_label(server: _Server, names: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for target in server.targets:
        for name in names:
            if name not in out and target.labels.get(name):
                out[name] = target.labels[name]
    return out


def _by_label(samples: Sequence[tuple[dict, float]], label: str) -> dict[str, list[tuple[dict, float]]]:
    """The samples by their `label`'s value (in their order; those without it left out)."""
    out: dict[str, list[tuple[dict, float]]] = {}
    for sample in samples:
        name = sample[0].get(label)
        if name is not None:
            out.setdefault(name, []).append(sample)
    return out


def _netloc(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0]


def _label_count(labels: Mapping[str, str], key: str, server: str, notes: list[str]) -> int | None:
    """A target label's count (`draft_tokens`), checked as the column of the same name is: None (said) when
    it is not a whole number in the column's range."""
    text = labels.get(key)
    if text is None:
        return None
    check = PART_CHECKS[{"draft_tokens": SPEC_NUM_DRAFT_TOKENS, "steps": SPEC_NUM_STEPS}[key]]
    try:
        value = float(text) if len(text) <= 20 else float("nan")
    except ValueError:
        value = float("nan")
    why = check.check(value) if value != 0 else "0"
    if why is not None:
        notes.append(f"the label {key}={quoted(text, 20)} of {quoted(server)} cannot be true ({why}): not used")
        return None
    return int(value)


