"""LiveTracker: scrapes, /server_info and log lines in; a LiveSnapshot out. Pure: no clock, no I/O.

Each run of the server (a restart begins a new one) has its own scrape window, batch-line log and history
series; nothing is mixed across runs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specmon.live.absurd import drop_absurd
from specmon.live.loglines import BatchLog, LogFigures
from specmon.live.model import WINDOWS_S, Alert, Latencies, LiveSnapshot, Series, SeriesPoint
from specmon.live.prom import Scrape
from specmon.live.window import GEN, ScrapeWindow, WindowFigures, counters_went_down
from specmon.serving.client import SpecSettings, spec_settings

MAX_RUNS = 6
SERIES_EVERY_S = 5.0
SERIES_KEEP = 720  # an hour at one point per 5 s
STALL_S = 60.0
"""Requests running and no token progress this long is a stall. SGLang refreshes its gauges only at decode-log
intervals and, idle, every 30 s: a shorter limit would call a just-idle server stalled."""
ACCEPT_LOW_RATIO = 0.6
ACCEPT_NO_DRAFT = 1.1
"""A draft whose weights did not load accepts about one token per step."""
MIN_TOKENS_FOR_ACCEPT = 200
DP_IMBALANCE_MIN_SPREAD = 4.0
KV_FULL = 0.95
_PROGRESS_GAUGES = ("sglang:num_used_tokens", "sglang:gen_throughput", "sglang:token_usage")


@dataclass
class Run:
    """One server run: from a start (or from attaching) to a restart."""

    index: int
    label: str
    window: ScrapeWindow = field(default_factory=ScrapeWindow)
    batches: BatchLog = field(default_factory=BatchLog)
    points: deque[SeriesPoint] = field(default_factory=lambda: deque(maxlen=SERIES_KEEP))
    progress_key: tuple | None = None
    progress_at: float | None = None


@dataclass
class _Own:
    """specmon's own generation (benchmarks, checks): cumulative tokens at a time, to subtract from traffic."""

    samples: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=2048))

    def add(self, at: float, tokens: float) -> None:
        self.samples.append((at, tokens))

    def between(self, start: float, end: float) -> float:
        before = after = 0.0
        for at, tokens in self.samples:
            if at <= start:
                before = tokens
            if at <= end:
                after = tokens
        return max(0.0, after - before)


class LiveTracker:
    """Joins /metrics scrapes (or, without them, `Decode batch` lines) and /server_info into LiveSnapshots.

    Feed it with `add_scrape`, `metrics_unavailable`, `set_server_info`, `feed_line`, `note_own_tokens`,
    `set_reachable`; read `snapshot(window_s, now)`. `now` is wall-clock seconds (time.time()).
    """

    def __init__(self, preset: str | None = None, asked: Mapping[str, Any] | Sequence[str] | None = None,
                 baseline_accept: float | None = None, stall_s: float = STALL_S) -> None:
        self.preset = preset
        self.asked = asked
        self.baseline_accept = baseline_accept
        self.stall_s = stall_s
        self.runs: deque[Run] = deque([Run(0, preset or "no preset")], maxlen=MAX_RUNS)
        self.restarts = 0
        self.metrics_state: str = "unknown"  # "ok", "absent" (404: the log is the source), "error"
        self.metrics_error: str | None = None
        self.server_info: dict[str, Any] | None = None
        self.info_error: str | None = None  # why the last /server_info could not be used
        self.identity: Any = None
        self.reachable = True
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
        """The preset now running (after a switch); the next run is labelled with it."""
        self.preset, self.asked, self.baseline_accept = preset, asked, baseline_accept
        if preset and self.run.label == "no preset":
            self.run.label = preset

    def new_run(self, reason: str = "restart") -> None:
        """The server restarted: a new series begins (a counter went down, a new start time, a new startup)."""
        if self.run.window.latest is None and not self.run.batches.lines:
            self.run.label = self.preset or self.run.label
            return
        self.restarts += 1
        self.runs.append(Run(self.run.index + 1, self.preset or "no preset"))

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
        key = (scrape.counters.get(GEN), scrape.counters.get("sglang:realtime_tokens_total{mode=decode}"),
               scrape.counters.get("sglang:cuda_graph_passes_total"),
               *(scrape.gauges.get(name) for name in _PROGRESS_GAUGES))
        if key != run.progress_key:
            run.progress_key, run.progress_at = key, scrape.taken_at

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

    def server_info_unreadable(self, reason: str) -> None:
        """A /server_info answer that could not be used (too big, too slow, not strict JSON, too deep)."""
        self.info_error = reason

    def scrape_failed(self, reason: str) -> None:
        """A scrape that failed in a way nobody foresaw: said, and the next one tried."""
        self.metrics_state, self.metrics_error = "error", f"a scrape failed: {reason}"[:300]

    def set_identity(self, identity: Any) -> None:
        """A server's pid or start time: a new one begins a new run."""
        if self.identity is not None and identity != self.identity:
            self.new_run()
        self.identity = identity

    def set_reachable(self, reachable: bool) -> None:
        self.reachable = reachable

    def feed_line(self, line: str, arrived_at: float | None = None) -> None:
        """A server log line (only `Decode batch` / `Prefill batch` lines are kept)."""
        if "server_args=" in line and self.run.batches.lines and self.metrics_state != "ok":
            self.new_run()  # a new startup in the log (with /metrics, counters tell)
        self.run.batches.feed(line, arrived_at)
        if line.strip():
            self.last_log_line = line[:400]

    def note_own_tokens(self, at: float, cumulative_tokens: float) -> None:
        """specmon's own generated tokens so far (its benchmark's finished requests), at wall time `at`."""
        self._own.add(at, cumulative_tokens)

    # ----- output

    def snapshot(self, window_s: float = 60.0, now: float | None = None) -> LiveSnapshot:
        run = self.run
        use_metrics = self.metrics_state == "ok" and run.window.latest is not None
        effective = self._effective(run)
        alerts: list[Alert] = []
        if use_metrics:
            snap = self._from_metrics(run, window_s, effective, alerts, now)
        elif run.batches.lines:
            snap = self._from_log(run, window_s, effective, alerts, now)
        else:
            snap = {"state": "waiting", "source": "none"}
        if not self.reachable:
            snap["state"] = "unreachable"
        absurd = drop_absurd(snap, effective, self._max_running())
        if "running" in absurd:
            # serving, stalled or unbalanced would be read from a count that cannot be true
            alerts[:] = [alert for alert in alerts if alert.kind not in ("stall", "dp_imbalance")]
            if snap["state"] in ("serving", "idle", "stalled"):
                snap["state"] = "absurd"
        alerts.extend(Alert("absurd", "error", text) for text in [*absurd.values(), *self._spec.absurd])
        self._alerts_common(snap, effective, alerts, window_s)
        if self.metrics_state == "error" and self.metrics_error:
            alerts.append(Alert("metrics", "warning", self.metrics_error))
        if self.info_error:
            alerts.append(Alert("server_info", "warning", f"/server_info not used: {self.info_error}"))
        if self.restarts:
            alerts.append(Alert("restart", "info", f"{self.restarts} restart(s) seen; series {run.index + 1}"))
        at = now if now is not None else (run.window.latest.taken_at if use_metrics else None)
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
    def _spec(self) -> SpecSettings:
        """The server's settings from /server_info, each figure checked (`absurd` names those that cannot be)."""
        info = self.server_info
        if info is not self._spec_of:
            self._spec_of, self._spec_cache = info, spec_settings(info or {})
        return self._spec_cache

    def _max_running(self) -> int | None:
        return self._spec.max_running_requests

    def _from_metrics(self, run: Run, window_s: float, effective: dict, alerts: list[Alert],
                      now: float | None) -> dict[str, Any]:
        latest = run.window.latest
        g = latest.gauges
        figures = run.window.figures(window_s)
        latencies = tuple(self._latencies(run.window.figures(w), w) for w in WINDOWS_S)
        own = None
        decode = figures.decode_tok_s if figures else None
        if figures is not None and decode is not None:
            own_tokens = self._own.between(latest.taken_at - figures.elapsed_s, latest.taken_at)
            own = own_tokens / figures.elapsed_s
            decode = max(0.0, decode - own)
        accept = figures.accept_length if figures else None
        if accept is None and g.get("sglang:spec_accept_length") and effective.get("algorithm"):
            accept = g["sglang:spec_accept_length"]
        kv_total = g.get("sglang:max_total_num_tokens")
        if kv_total is None:
            kv_total = self._spec.max_total_num_tokens
        running = g.get("sglang:num_running_reqs")
        cache = figures.cache_hit_rate if figures and figures.cache_hit_rate is not None else g.get(
            "sglang:cache_hit_rate")
        state = "serving" if running else "idle"
        progress_at = run.progress_at if run.progress_at is not None else latest.taken_at
        stalled_for = latest.taken_at - progress_at
        if running and stalled_for >= self.stall_s:
            state = "stalled"
            alerts.append(Alert("stall", "error", self._stall_text(running, stalled_for, run)))
        per_dp = latest.per_dp.get("sglang:num_running_reqs", {})
        if len(per_dp) > 1:
            values = list(per_dp.values())
            if max(values) - min(values) >= DP_IMBALANCE_MIN_SPREAD and max(values) >= 2 * max(min(values), 1):
                shown = ", ".join(f"DP{k} {int(v)}" for k, v in sorted(per_dp.items()))
                alerts.append(Alert("dp_imbalance", "warning", f"DP ranks unbalanced: running {shown}"))
        window_latency = next((lat for lat in latencies if lat.window_s == window_s), None)
        if window_latency is None:
            window_latency = self._latencies(figures, window_s)
        return {
            "state": state,
            "source": "metrics",
            "decode_tok_s": decode,
            "own_tok_s": own,
            "running": running,
            "queued": g.get("sglang:num_queue_reqs"),
            "max_running": self._max_running(),
            "kv_used": g.get("sglang:num_used_tokens"),
            "kv_total": kv_total if isinstance(kv_total, int | float) else None,
            "accept_length": accept if effective.get("algorithm") or figures and figures.accept_length else None,
            "accept_rate": g.get("sglang:spec_accept_rate") if effective.get("algorithm") else None,
            "ttft_ms": window_latency.ttft,
            "itl_ms": window_latency.itl,
            "e2e_ms": window_latency.e2e,
            "cache_hit_rate": cache,
            "latencies": latencies,
            "per_dp_running": dict(per_dp),
        }

    @staticmethod
    def _latencies(figures: WindowFigures | None, window_s: float) -> Latencies:
        if figures is None:
            return Latencies(window_s)
        return Latencies(window_s, figures.ttft, figures.itl, figures.e2e)

    def _stall_text(self, running: float, seconds: float, run: Run) -> str:
        text = f"{int(running)} request(s) running, no token progress for {int(seconds)} s"
        if self.last_log_line:
            text += f"; log: {self.last_log_line}"
        return text

    def _from_log(self, run: Run, window_s: float, effective: dict, alerts: list[Alert],
                  now: float | None) -> dict[str, Any]:
        newest = run.batches.newest_ts()
        stale = now is not None and newest is not None and now - newest > window_s
        end = newest if now is None or newest is None or stale else max(now, newest)
        fig: LogFigures = run.batches.figures(window_s, end)
        if stale:  # nothing logged lately: the last figures the log has, said to be old
            alerts.append(Alert("log_stale", "info", f"last batch line {_ago(now - newest)} ago: figures as of then"))
        kv_total = self._spec.max_total_num_tokens
        kv_used = fig.kv_used
        if kv_used is None and fig.kv_usage is not None and isinstance(kv_total, int | float):
            kv_used = fig.kv_usage * kv_total
        if not isinstance(kv_total, int | float) and fig.kv_used is not None and fig.kv_usage:
            kv_total = fig.kv_used / fig.kv_usage
        state = "serving" if fig.running and not stale else "idle"
        last = run.batches.last_line_at
        if fig.running and last is not None and now is not None and now - last >= self.stall_s:
            state = "stalled"
            alerts.append(Alert("stall", "error", self._stall_text(fig.running, now - last, run)))
        if fig.running and not fig.lines:
            state = "stalled" if state == "stalled" else "serving"
        return {
            "state": state,
            "source": "log",
            "decode_tok_s": 0.0 if stale else fig.decode_tok_s,
            "running": fig.running,
            "queued": fig.queued,
            "max_running": self._max_running(),
            "kv_used": kv_used,
            "kv_total": kv_total if isinstance(kv_total, int | float) else None,
            "accept_length": fig.accept_length,
            "accept_rate": fig.accept_rate,
            "cache_hit_rate": fig.cache_hit_rate,
        }

    def _effective(self, run: Run) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.server_info is not None:
            spec = self._spec
            out = {"algorithm": spec.algorithm, "num_steps": spec.num_steps, "eagle_topk": spec.eagle_topk,
                   "num_draft_tokens": spec.num_draft_tokens, "draft_model_path": spec.draft_model_path,
                   "version": spec.version}
        latest = run.window.latest
        if latest is not None:
            for key, name in (("metrics_num_steps", "sglang:spec_num_steps"),
                              ("metrics_num_draft_tokens", "sglang:spec_num_draft_tokens")):
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
                                    f"{key}: /server_info {effective[key]}, sglang:spec_* {effective[metric_key]}"))
        accept = snap.get("accept_length")
        if accept is not None and effective.get("algorithm") and self._enough_tokens(snap, window_s):
            if self.baseline_accept and accept < ACCEPT_LOW_RATIO * self.baseline_accept:
                alerts.append(Alert("accept_low", "error",
                                    f"acceptance {accept:.2f}, far below the preset's last benchmark "
                                    f"{self.baseline_accept:.2f}"))
            elif accept < ACCEPT_NO_DRAFT:
                alerts.append(Alert("accept_low", "error",
                                    f"acceptance {accept:.2f} ≈ 1 token per step: did the draft's weights load?"))
        used, total, queued = snap.get("kv_used"), snap.get("kv_total"), snap.get("queued")
        if used is not None and total and used / total >= KV_FULL and queued:
            alerts.append(Alert("kv_full", "warning", f"KV cache {used / total:.0%} full, {int(queued)} queued"))

    def _enough_tokens(self, snap: dict[str, Any], window_s: float) -> bool:
        if snap.get("source") == "log":
            return True
        figures = self.run.window.figures(window_s)
        return figures is not None and (figures.generated or 0) >= MIN_TOKENS_FOR_ACCEPT

    def _add_point(self, run: Run, at: float | None, snap: dict[str, Any]) -> None:
        if at is None or snap.get("source") == "none":
            return
        if run.points and at - run.points[-1].t < SERIES_EVERY_S:
            return
        used, total = snap.get("kv_used"), snap.get("kv_total")
        run.points.append(SeriesPoint(at, snap.get("decode_tok_s"), snap.get("accept_length"), snap.get("running"),
                                      snap.get("queued"), used / total if used is not None and total else None))


def _ago(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} days"
