"""LiveTracker: scrapes, /server_info and log lines in; a LiveSnapshot out. Pure: no clock, no I/O.

Each run of the server (a restart begins a new one) has its own scrape window, batch-line log and history
series; nothing is mixed across runs.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specmon.live import rules
from specmon.live.absurd import drop_absurd
from specmon.live.loglines import BatchLog, LogFigures
from specmon.live.model import WINDOWS_S, Alert, Latencies, LiveSnapshot, Series, SeriesPoint
from specmon.live.rules import STALL_S
from specmon.live.window import DECODE_TOKENS, GEN, ScrapeWindow, WindowFigures, counters_went_down
from specmon.serving.prom import Scrape
from specmon.serving.spec import SpecSettings, spec_settings
from specmon.sglang.metric_names import (
    CACHE_HIT_RATE,
    CUDA_GRAPH_PASSES_TOTAL,
    GEN_THROUGHPUT,
    MAX_TOTAL_NUM_TOKENS,
    NUM_QUEUE_REQS,
    NUM_RUNNING_REQS,
    NUM_USED_TOKENS,
    PREFIX,
    SPEC_ACCEPT_LENGTH,
    SPEC_ACCEPT_RATE,
    SPEC_NUM_DRAFT_TOKENS,
    SPEC_NUM_STEPS,
    TOKEN_USAGE,
)
from specmon.units import elapsed

MAX_RUNS = 6
SERIES_EVERY_S = 5.0
SERIES_KEEP = 720  # an hour at one point per 5 s
QUIET_S = 10.0
"""Traffic is what arrives: no token progress (or, from the log, no batch line) for this long is no traffic now.
SGLang logs a decode batch, and refreshes its gauges, every 40 decode steps: well under this while it serves.
From the log the limit grows to three times the usual gap between its batch lines."""
SAME_CLOCK_S = 3600.0
"""A log timestamp this close to the wall clock is on it (the same host's time): it says when the line was
written, not when specmon read it."""
_PROGRESS_GAUGES = (NUM_USED_TOKENS, GEN_THROUGHPUT, TOKEN_USAGE)


def serves(spec: SpecSettings, asked: Mapping[str, Any] | Sequence[str] | None) -> bool:
    """Whether a server running `spec` is what a preset asking `asked` launches: speculation on or off as asked,
    and every speculative flag it gives as effective (a preset with unknown flags is taken at its word)."""
    if asked is None:
        return True
    if isinstance(asked, Mapping):
        wanted = asked.get("speculative-algorithm")
        wants_spec = isinstance(wanted, str) and bool(wanted)
    else:
        wants_spec = any(a == "--speculative-algorithm" or a.startswith("--speculative-algorithm=") for a in asked)
    return wants_spec == spec.enabled and not spec.requested_vs_effective(asked)


def describe_spec(spec: SpecSettings) -> str:
    """What a server runs, in a few words: "EAGLE3 · 5 draft" or "no speculation"."""
    if not spec.enabled:
        return "no speculation"
    return f"{spec.algorithm} · {spec.num_draft_tokens} draft" if spec.num_draft_tokens else str(spec.algorithm)


@dataclass
class Run:
    """One server run: from a start (or from attaching) to a restart."""

    index: int
    presets: list[tuple[str, Any]] = field(default_factory=list)
    """The presets believed to run during this run (name, asked flags), the latest last."""
    spec: SpecSettings | None = None
    """What this run serves: the effective settings of its own /server_info."""
    identity: Any = None
    """Its start time (or pid): a /server_info with another one is another run."""
    window: ScrapeWindow = field(default_factory=ScrapeWindow)
    batches: BatchLog = field(default_factory=BatchLog)
    points: deque[SeriesPoint] = field(default_factory=lambda: deque(maxlen=SERIES_KEEP))
    progress_key: tuple | None = None
    progress_at: float | None = None
    tokens_key: tuple | None = None
    tokens_at: float | None = None
    """When the token counters last moved (gauges left out: SGLang refreshes them when idle too)."""

    @property
    def label(self) -> str:
        """The preset this run serves, checked against its effective settings (a preset whose flags it does not
        run is not its label); those settings in words when no preset fits; the preset alone before the run's
        settings are known."""
        if self.spec is None:
            return self.presets[-1][0] if self.presets else "no preset"
        for name, asked in reversed(self.presets):
            if serves(self.spec, asked):
                return name
        return describe_spec(self.spec)

    def believe(self, preset: str | None, asked: Any) -> None:
        if preset and (not self.presets or self.presets[-1][0] != preset):
            self.presets.append((preset, asked))


OWN_KEEP = 8192
OWN_MIN_GAP_S = 0.05
"""Own-token readings closer than this to the last are not kept (a log read in many small batches)."""


class _Own:
    """specmon's own generation (its benchmarks), to leave out of the server's traffic: cumulative tokens,
    `streamed` (as they arrive: what `realtime_tokens_total` and the log's batch lines count) and `finished`
    (when their request ends: what `generation_tokens_total` counts), read when each scrape is taken and each
    batch of log lines arrives; between two readings they are interpolated."""

    def __init__(self) -> None:
        self.samples: deque[tuple[float, float, float]] = deque(maxlen=OWN_KEEP)

    def add(self, at: float, streamed: float, finished: float) -> None:
        samples = self.samples
        if samples:
            last = samples[-1]
            if at < last[0] + OWN_MIN_GAP_S:
                return
            if len(samples) > 1 and samples[-2][1:] == last[1:] == (streamed, finished):
                samples[-1] = (at, streamed, finished)  # a flat stretch keeps its two ends only
                return
        samples.append((at, streamed, finished))

    def reader(self, finished: bool = False) -> Callable[[float, float], float] | None:
        """Tokens between two wall times (None when specmon generated nothing while these readings were
        taken)."""
        if not self.samples or self.samples[0][1:] == self.samples[-1][1:]:
            return None
        column = 2 if finished else 1
        times = [sample[0] for sample in self.samples]
        values = [sample[column] for sample in self.samples]

        def at(t: float) -> float:
            i = bisect.bisect_right(times, t)
            if i == 0:
                return values[0]
            if i == len(times):
                return values[-1]
            t0, t1 = times[i - 1], times[i]
            return values[i - 1] + (values[i] - values[i - 1]) * (t - t0) / (t1 - t0)

        return lambda start, end: max(0.0, at(end) - at(start))


class LiveTracker:
    """Joins /metrics scrapes (or, without them, `Decode batch` lines) and /server_info into LiveSnapshots.

    Feed it with `add_scrape`, `metrics_unavailable`, `set_server_info`, `feed_line`, `note_own_tokens`,
    `set_reachable`, `set_process_alive`, `set_starting`; read `snapshot(window_s, now)`. `now` is wall-clock seconds (time.time()).
    """

    def __init__(self, preset: str | None = None, asked: Mapping[str, Any] | Sequence[str] | None = None,
                 baseline_accept: float | None = None, stall_s: float = STALL_S) -> None:
        self.preset = preset
        self.asked = asked
        self.baseline_accept = baseline_accept
        self.stall_s = stall_s
        self.runs: deque[Run] = deque([Run(0)], maxlen=MAX_RUNS)
        self.run.believe(preset, asked)
        self.restarts = 0
        self.metrics_state: str = "unknown"  # "ok", "absent" (404: the log is the source), "error"
        self.metrics_error: str | None = None
        self.server_info: dict[str, Any] | None = None
        self.info_error: str | None = None  # why the last /server_info could not be used
        self.identity: Any = None
        self.reachable = True
        self.unreachable_why: tuple[Alert, ...] = ()
        self.metrics_source = "metrics"
        """What the scrapes come from: "metrics" (the server's /metrics) or "prometheus" (its samples there)."""
        self.process_alive: bool | None = None
        """False once the server's process is known to be gone (specmon knows its pid): "exited"."""
        self.starting = False
        """The server is starting up (its log, a switch or its HTTP says so): no answer yet is "starting"."""
        self._own = _Own()
        self._spec_of: dict[str, Any] | None = None
        self._spec_cache = spec_settings({})
        self._last_series_at: float | None = None
        self.last_log_line: str | None = None

    @property
    def run(self) -> Run:
        return self.runs[-1]

    # ----- inputs

    def set_preset(self, preset: str | None, asked=None, baseline_accept: float | None = None) -> None:
        """The preset now running (after a switch): the current run is labelled with it if it serves it."""
        self.preset, self.asked, self.baseline_accept = preset, asked, baseline_accept
        self.run.believe(preset, asked)

    def new_run(self, reason: str = "restart") -> None:
        """The server restarted: a new series begins (a counter went down, a new start time, a new startup)."""
        if self.run.window.latest is None and not self.run.batches.lines:
            return
        self.restarts += 1
        self.runs.append(Run(self.run.index + 1))
        self.run.believe(self.preset, self.asked)

    def add_scrape(self, scrape: Scrape) -> None:
        if scrape.error is not None:
            self.metrics_state, self.metrics_error = "error", scrape.error
            return
        self.metrics_state, self.metrics_error = "ok", None
        latest = self.run.window.latest
        if latest is not None and counters_went_down(latest, scrape):
            self.new_run()
        run = self.run
        run.window.add(scrape)
        key = (scrape.counters.get(GEN), scrape.counters.get(DECODE_TOKENS),
               scrape.counters.get(CUDA_GRAPH_PASSES_TOTAL),
               *(scrape.gauges.get(name) for name in _PROGRESS_GAUGES))
        if key != run.progress_key:
            run.progress_key, run.progress_at = key, scrape.taken_at
        if key[:2] != run.tokens_key:
            run.tokens_key, run.tokens_at = key[:2], scrape.taken_at

    def metrics_unavailable(self) -> None:
        """The server has no /metrics (404: started without --enable-metrics): the log is the source."""
        self.metrics_state = "absent"

    def set_server_info(self, info: Mapping[str, Any]) -> None:
        """A /server_info answer: effective settings, max_running_requests, and the start time (restarts)."""
        if not isinstance(info, Mapping):
            return
        self.server_info = dict(info)
        self.info_error = None
        states = info.get("internal_states")
        state0 = states[0] if isinstance(states, list) and states and isinstance(states[0], Mapping) else {}
        identity = info.get("startup_time", state0.get("startup_time"))
        if isinstance(identity, int | float | str) and not isinstance(identity, bool):
            self.set_identity(identity)
        self.run.spec = spec_settings(info)

    def server_info_unreadable(self, reason: str) -> None:
        """A /server_info answer that could not be used (too big, too slow, not strict JSON, too deep)."""
        self.info_error = reason

    def scrape_failed(self, reason: str) -> None:
        """A scrape that failed in a way nobody foresaw: said, and the next one tried."""
        self.metrics_state, self.metrics_error = "error", f"a scrape failed: {reason}"[:300]

    def set_identity(self, identity: Any) -> None:
        """A server's pid or start time: a new one begins a new run, unless the run began with this server (a
        counter reset or a new startup in the log already began it)."""
        if self.run.identity is not None and identity != self.run.identity:
            self.new_run()
        self.run.identity = self.identity = identity

    def set_reachable(self, reachable: bool, why: Sequence[Alert] = ()) -> None:
        """Whether the server answers; `why`: what else is known of it while it does not (shown as alerts)."""
        self.reachable = reachable
        self.unreachable_why = tuple(why) if not reachable else ()

    def set_process_alive(self, alive: bool | None) -> None:
        """Whether the server's own process runs (None: specmon does not know its pid)."""
        self.process_alive = alive

    def set_starting(self, starting: bool) -> None:
        """Whether the server is starting up: until it answers with figures, its state is "starting", not
        "unreachable" (which reads as down) or "waiting"."""
        self.starting = starting

    def feed_line(self, line: str, arrived_at: float | None = None) -> None:
        """A server log line (only `Decode batch` / `Prefill batch` lines are kept)."""
        self.feed_lines((line,), arrived_at)

    def feed_lines(self, lines: Sequence[str], arrived_at: float | None = None) -> None:
        """Server log lines that arrived together (only `Decode batch` / `Prefill batch` lines are kept)."""
        if not lines:
            return
        batches = self.run.batches
        if "server_args=" not in "\n".join(lines):
            batches.feed_many(lines, arrived_at)
        else:
            for line in lines:
                if "server_args=" in line and batches.lines and self.metrics_state != "ok":
                    self.new_run()  # a new startup in the log (with /metrics, counters tell)
                    batches = self.run.batches
                batches.feed(line, arrived_at)
        last = lines[-1] if lines[-1].strip() else next((line for line in reversed(lines) if line.strip()), None)
        if last is not None:
            self.last_log_line = last[:400]

    def note_own_tokens(self, at: float, streamed: float, finished: float) -> None:
        """specmon's own generated tokens so far, at wall time `at`: streamed, and those of finished requests
        (`specmon.bench.model.OwnTokens`)."""
        self._own.add(at, streamed, finished)

    # ----- output

    def snapshot(self, window_s: float = 60.0, now: float | None = None) -> LiveSnapshot:
        run = self.run
        latest = run.window.latest
        scrape = latest if self.metrics_state == "ok" and latest is not None and not latest.empty else None
        effective = self._effective(run)
        alerts: list[Alert] = []
        if scrape is not None:
            snap = self._from_metrics(run, scrape, window_s, effective, alerts, now)
        elif run.batches.lines:
            snap = self._from_log(run, window_s, effective, alerts, now)
        else:  # no figures: none yet, or none that can be read
            snap = {"state": "unreadable" if self.metrics_state == "error" else "waiting", "source": "none"}
        if self.process_alive is False:  # gone, not "unreachable": nothing it last said is current
            snap = {"state": "exited", "source": snap.get("source", "none")}
            alerts.clear()
        elif self.starting and (not self.reachable or snap["state"] == "waiting"):
            snap["state"] = "starting"
        elif not self.reachable:
            snap["state"] = "unreachable"
            alerts.extend(self.unreachable_why)
        stale_for = snap.pop("stale_for", None)
        absurd = drop_absurd(snap, effective, self._max_running())
        if stale_for is not None:
            if snap.get("running") is not None:
                alerts.append(Alert("quiet", "info", f"no tokens generated for {elapsed(stale_for)}: no traffic now "
                                    f"(SGLang's gauges still say {int(snap['running'])} running from its last decode "
                                    "window: not shown)"))
            snap["running"] = snap["queued"] = None
        if "running" in absurd:
            # serving, stalled or unbalanced would be read from a count that cannot be true
            alerts[:] = [alert for alert in alerts if alert.kind not in ("stall", "dp_imbalance")]
            if snap["state"] in ("serving", "idle", "stalled"):
                snap["state"] = "absurd"
        alerts.extend(Alert("absurd", "error", text) for text in [*absurd.values(), *self._spec.absurd])
        self._alerts_common(snap, effective, alerts, window_s)
        if self.metrics_state == "error" and self.metrics_error:
            severity = "error" if snap["state"] == "unreadable" else "warning"  # else the log has the figures
            alerts.append(Alert("metrics", severity, self.metrics_error))
        elif self.metrics_state == "ok" and snap["source"] == "none":
            alerts.append(Alert("metrics", "warning", f"GET /metrics: none of the {PREFIX}* series specmon reads (not "
                                "SGLang's /metrics, or its scheduler has not reported yet)"))
        elif self.metrics_state == "absent" and snap["source"] == "none":
            alerts.append(Alert("metrics", "info", "GET /metrics: HTTP 404 (the server runs without "
                                "--enable-metrics): its figures come from its log's Decode batch lines, none yet"))
        if self.info_error:
            alerts.append(Alert("server_info", "warning", f"/server_info not used: {self.info_error}"))
        _add(alerts, rules.restarted(self.restarts, run.index + 1))
        at = now if now is not None else (scrape.taken_at if scrape is not None else None)
        self._add_point(run, at, snap)
        return LiveSnapshot(
            window_s=window_s,
            effective=effective,
            restarts=self.restarts,
            alerts=tuple(alerts),
            preset=self.preset,
            baseline_accept=self.baseline_accept,
            series=tuple(Series(r.index, r.label, tuple(r.points)) for r in self.runs if r.points),
            last_log_line=self.last_log_line,
            absurd=absurd,
            **snap,
        )

    @property
    def spec(self) -> SpecSettings | None:
        """The server's settings from its last /server_info (None: none read yet)."""
        return self._spec if self.server_info is not None else None

    @property
    def _spec(self) -> SpecSettings:
        """The server's settings from /server_info, each figure checked (`absurd` names those that cannot be)."""
        info = self.server_info
        if info is not self._spec_of:
            self._spec_of, self._spec_cache = info, spec_settings(info or {})
        return self._spec_cache

    def _max_running(self) -> int | None:
        return self._spec.max_running_requests

    def _from_metrics(self, run: Run, latest: Scrape, window_s: float, effective: dict, alerts: list[Alert],
                      now: float | None) -> dict[str, Any]:
        """The snapshot's figures from /metrics; "stale_for" (taken out by `snapshot`) says for how long no token
        was generated while the gauges still count requests from SGLang's last decode window; `latest` is the run's
        newest scrape."""
        g = latest.gauges
        figures = run.window.figures(window_s)
        latencies = tuple(self._latencies(run.window.figures(w), w) for w in WINDOWS_S)
        own = None
        decode = figures.decode_tok_s if figures else None
        if figures is not None and decode is not None:
            between = self._own.reader(finished=figures.decode_at_finish)
            if between is not None:
                own = between(figures.taken_from, latest.taken_at) / figures.elapsed_s
                decode = max(0.0, decode - own)
        # acceptance length and rate over the same span: the window (Δcounters, else SGLang's gauges over its
        # scrapes with traffic), or with no traffic in it both as of SGLang's last decode window
        accept = figures.accept_length if figures else None
        rate = figures.accept_rate if figures else None
        if accept is None and figures is not None:
            accept = figures.accept_gauge
        if accept is None and rate is None:
            if g.get(SPEC_ACCEPT_LENGTH) and effective.get("algorithm"):
                accept = g[SPEC_ACCEPT_LENGTH]
            rate = g.get(SPEC_ACCEPT_RATE)
        kv_total = g.get(MAX_TOTAL_NUM_TOKENS)
        if kv_total is None:
            kv_total = self._spec.max_total_num_tokens
        running = g.get(NUM_RUNNING_REQS)
        queued = g.get(NUM_QUEUE_REQS)
        cache = figures.cache_hit_rate if figures and figures.cache_hit_rate is not None else g.get(
            CACHE_HIT_RATE)
        state = "serving" if rules.serving(running, decode) or own else "idle"
        progress_at = run.progress_at if run.progress_at is not None else latest.taken_at
        stalled_for = latest.taken_at - progress_at
        quiet_for = latest.taken_at - (run.tokens_at if run.tokens_at is not None else latest.taken_at)
        stale_for = None
        stalled = rules.stall(running, stalled_for, self.stall_s, self.last_log_line)
        if stalled is not None:
            state = "stalled"
            alerts.append(stalled)
        elif quiet_for >= QUIET_S:  # no traffic now; the gauges are from SGLang's last decode window
            state, decode = "idle", 0.0
            stale_for = quiet_for if running or queued else None
        per_dp = latest.per_dp.get(NUM_RUNNING_REQS, {})
        _add(alerts, rules.dp_imbalance(per_dp))
        window_latency = next((lat for lat in latencies if lat.window_s == window_s), None)
        if window_latency is None:
            window_latency = self._latencies(figures, window_s)
        return {
            "stale_for": stale_for,
            "state": state,
            "source": self.metrics_source,
            "decode_tok_s": decode,
            "own_tok_s": own,
            "running": running,
            "queued": queued,
            "max_running": self._max_running(),
            "kv_used": g.get(NUM_USED_TOKENS),
            "kv_total": kv_total if isinstance(kv_total, int | float) else None,
            "accept_length": accept if effective.get("algorithm") or figures and figures.accept_length else None,
            "accept_rate": rate if effective.get("algorithm") else None,
            "ttft_ms": window_latency.ttft,
            "itl_ms": window_latency.itl,
            "e2e_ms": window_latency.e2e,
            "cache_hit_rate": cache,
            "latencies": latencies,
            "per_dp_running": dict(per_dp),
            "startup_s": {k.removeprefix("startup."): v for k, v in g.items() if k.startswith("startup.")},
            "window_from": figures.taken_from if figures else None,
            "window_to": latest.taken_at if figures else None,
        }

    @staticmethod
    def _latencies(figures: WindowFigures | None, window_s: float) -> Latencies:
        if figures is None:
            return Latencies(window_s)
        return Latencies(window_s, figures.ttft, figures.itl, figures.e2e)

    def _from_log(self, run: Run, window_s: float, effective: dict, alerts: list[Alert],
                  now: float | None) -> dict[str, Any]:
        newest = run.batches.newest_ts()
        stale = now is not None and newest is not None and now - newest > window_s
        end = newest if now is None or newest is None or stale else max(now, newest)
        fig: LogFigures = run.batches.figures(window_s, end, own=self._own.reader())
        last = self._last_batch_at(run, now)
        quiet_after = max(QUIET_S, 3.0 * run.batches.usual_gap_s())
        quiet_for = now - last if now is not None and last is not None else 0.0
        quiet = quiet_for > quiet_after
        kv_total: float | None = self._spec.max_total_num_tokens
        kv_used = fig.kv_used
        if kv_used is None and fig.kv_usage is not None and isinstance(kv_total, int | float):
            kv_used = fig.kv_usage * kv_total
        if not isinstance(kv_total, int | float) and fig.kv_used is not None and fig.kv_usage:
            kv_total = fig.kv_used / fig.kv_usage
        running, queued, decode, own = fig.running, fig.queued, fig.decode_tok_s, fig.own_tok_s
        state = "serving" if rules.serving(running, decode) or own else "idle"
        if quiet:  # batch lines are traffic only while they arrive
            state, decode, own = "idle", 0.0, None
            text = (f"no batch line for {elapsed(quiet_for)}: no traffic now (SGLang logs one every 40 decode steps);"
                    " acceptance as of the last one")
            alerts.append(Alert("quiet", "info", text))
            if running and quiet_for >= self.stall_s:
                alerts.append(Alert("quiet_running", "warning", (
                    f"the last batch line said {int(running)} running, {elapsed(quiet_for)} ago: they finished, or "
                    "the server is stuck (with --enable-metrics specmon can tell)")))
            running = queued = None
        return {
            "state": state,
            "source": "log",
            "decode_tok_s": decode,
            "own_tok_s": own,
            "running": running,
            "queued": queued,
            "max_running": self._max_running(),
            "kv_used": kv_used,
            "kv_total": kv_total if isinstance(kv_total, int | float) else None,
            "accept_length": fig.accept_length,
            "accept_rate": fig.accept_rate,
            "cache_hit_rate": fig.cache_hit_rate,
        }

    @staticmethod
    def _last_batch_at(run: Run, now: float | None) -> float | None:
        """When the last batch line was written: its timestamp when that is on the wall clock (a log read at
        attach time is old news), else when it arrived."""
        newest = run.batches.newest_ts()
        if newest is not None and now is not None and abs(now - newest) < SAME_CLOCK_S:
            return newest
        return run.batches.last_line_at

    def _effective(self, run: Run) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.server_info is not None:
            spec = self._spec
            out = {"algorithm": spec.algorithm, "num_steps": spec.num_steps, "eagle_topk": spec.eagle_topk,
                   "num_draft_tokens": spec.num_draft_tokens, "draft_model_path": spec.draft_model_path,
                   "version": spec.version}
        latest = run.window.latest
        if latest is not None:
            for key, name in (("metrics_num_steps", SPEC_NUM_STEPS),
                              ("metrics_num_draft_tokens", SPEC_NUM_DRAFT_TOKENS)):
                value = latest.gauges.get(name)
                if value:
                    out[key] = int(value)
        return out

    def _alerts_common(self, snap: dict[str, Any], effective: dict[str, Any], alerts: list[Alert],
                       window_s: float) -> None:
        if self.asked is not None and self.server_info is not None:
            for diff in self._spec.requested_vs_effective(self.asked):
                alerts.append(Alert("spec_mismatch", "warning", f"{diff} (preset {self.preset})"))
        for key, metric_key in (("num_steps", "metrics_num_steps"), ("num_draft_tokens", "metrics_num_draft_tokens")):
            if effective.get(key) and effective.get(metric_key) and effective[key] != effective[metric_key]:
                alerts.append(Alert("spec_mismatch", "warning",
                                    f"{key}: /server_info {effective[key]}, {PREFIX}spec_* {effective[metric_key]}"))
        _add(alerts, rules.acceptance(snap.get("accept_length"), bool(effective.get("algorithm")),
                                      self._generated(snap, window_s), self.baseline_accept))
        _add(alerts, rules.kv_full(snap.get("kv_used"), snap.get("kv_total"), snap.get("queued")))

    def _generated(self, snap: dict[str, Any], window_s: float) -> float | None:
        """Tokens generated over the window (None from the log: its figures count as enough)."""
        if snap.get("source") == "log":
            return None
        figures = self.run.window.figures(window_s)
        return (figures.generated or 0.0) if figures is not None else 0.0

    def _add_point(self, run: Run, at: float | None, snap: dict[str, Any]) -> None:
        if at is None or snap.get("source") == "none":
            return
        if run.points and at - run.points[-1].t < SERIES_EVERY_S:
            return
        used, total = snap.get("kv_used"), snap.get("kv_total")
        run.points.append(SeriesPoint(at, snap.get("decode_tok_s"), snap.get("accept_length"), snap.get("running"),
                                      snap.get("queued"), used / total if used is not None and total else None))


def _add(alerts: list[Alert], alert: Alert | None) -> None:
    if alert is not None:
        alerts.append(alert)


