"""What the Live view and `monitor --once --json` show: LiveSnapshot, its alerts and chart series."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specmon.live.quantiles import Percentiles
from specmon.text import printable

if TYPE_CHECKING:
    from specmon.live.paying import SpeculationPays

WINDOWS_S = (60.0, 300.0, 900.0)
"""The latency windows: 1, 5 and 15 minutes."""


@dataclass(frozen=True)
class Alert:
    """Something on-call should look at: `kind` ("stall", "accept_low", "spec_mismatch", "dp_imbalance",
    "kv_full", "restart", "metrics", "server_info", "absurd", "down", "fleet", "spec_loses"), `severity` ("error", "warning",
    "info") and one line of text (its control characters shown as escapes)."""

    kind: str
    severity: str
    text: str

    def __post_init__(self) -> None:
        # An alert quotes what servers and logs said: shown safe wherever it is shown (the app, --once, the fleet).
        object.__setattr__(self, "text", printable(self.text))

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "severity": self.severity, "text": self.text}


@dataclass(frozen=True)
class SeriesPoint:
    """One point of a run's history chart (every few seconds)."""

    t: float
    decode_tok_s: float | None
    accept_length: float | None
    running: float | None
    queued: float | None
    kv_usage: float | None


@dataclass(frozen=True)
class Series:
    """One run's history (a restart begins a new one), labelled with its preset."""

    run: int
    label: str
    points: tuple[SeriesPoint, ...]


@dataclass(frozen=True)
class Latencies:
    """TTFT, ITL and end-to-end percentiles over one window."""

    window_s: float
    ttft: Percentiles = Percentiles()
    itl: Percentiles = Percentiles()
    e2e: Percentiles = Percentiles()


@dataclass(frozen=True)
class LiveSnapshot:
    """The server's live serving state. None wherever the source cannot say.

    `state`: "serving" (requests running), "idle" (no traffic now), "stalled", "unreachable", "exited" (the
    server's process is gone), "starting" (starting up, no figures yet), "waiting" (no figures yet), "unreadable"
    (/metrics answers, but not so that it can be read: an HTTP error, not Prometheus text, too big or too slow; the
    alerts say which, and no log gives the figures) or "absurd" (the running count cannot be true: see `absurd`).
    `source`: "metrics" (/metrics), "log" (`Decode batch` lines) or "none".
    """

    state: str = "waiting"
    source: str = "none"
    window_s: float = 60.0
    window_from: float | None = None
    """When the first /metrics scrape the window's figures come from was taken (Unix time; None: no window)."""
    window_to: float | None = None
    """When the last one was taken."""
    decode_tok_s: float | None = None
    running: float | None = None
    queued: float | None = None
    max_running: int | None = None
    kv_used: float | None = None
    kv_total: float | None = None
    accept_length: float | None = None
    accept_rate: float | None = None
    ttft_ms: Percentiles = Percentiles()
    itl_ms: Percentiles = Percentiles()
    e2e_ms: Percentiles = Percentiles()
    cache_hit_rate: float | None = None
    effective: dict[str, Any] = field(default_factory=dict)
    restarts: int = 0
    alerts: tuple[Alert, ...] = ()
    preset: str | None = None
    baseline_accept: float | None = None
    own_tok_s: float | None = None
    """specmon's own generation (its benchmark) over the window, already left out of `decode_tok_s`."""
    latencies: tuple[Latencies, ...] = ()
    series: tuple[Series, ...] = ()
    per_dp_running: dict[str, float] = field(default_factory=dict)
    last_log_line: str | None = None
    startup_s: dict[str, float] = field(default_factory=dict)
    """SGLang's own startup durations by phase (`sglang:startup_time_seconds{phase}`, 0.5.17+; CUDA-graph
    phases as `cuda_graph.PHASE`); empty when the server does not export them."""
    absurd: dict[str, str] = field(default_factory=dict)
    """Figures that cannot be true (taken out, None above): field -> what it was and why."""
    speculation_pays: SpeculationPays | None = None
    """The serving configuration's measured curve (a stored grid sweep) read at the running count (None: not
    read: no speculation, its settings unknown, or no store to read)."""

    @property
    def kv_usage(self) -> float | None:
        if self.kv_used is None or not self.kv_total:
            return None
        return self.kv_used / self.kv_total

    def to_json(self) -> dict[str, Any]:
        """The `monitor --once --json` object."""
        return {
            "state": self.state,
            "source": self.source,
            "window_s": self.window_s,
            "window_from": _r(self.window_from, 3),
            "window_to": _r(self.window_to, 3),
            "decode_tok_s": _r(self.decode_tok_s),
            "running": _int(self.running),
            "queued": _int(self.queued),
            "max_running": self.max_running,
            "kv_used": _int(self.kv_used),
            "kv_total": _int(self.kv_total),
            "accept_length": _r(self.accept_length, 3),
            "accept_rate": _r(self.accept_rate, 3),
            "ttft_ms": self.ttft_ms.to_json(),
            "itl_ms": self.itl_ms.to_json(),
            "e2e_ms": self.e2e_ms.to_json(),
            "cache_hit_rate": _r(self.cache_hit_rate, 3),
            "effective": self.effective,
            "restarts": self.restarts,
            "alerts": [alert.to_json() for alert in self.alerts],
            "startup_s": {phase: round(seconds, 3) for phase, seconds in self.startup_s.items()} or None,
            "absurd": dict(self.absurd),
            "speculation_pays": self.speculation_pays.to_json() if self.speculation_pays is not None else None,
        }


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def _int(value: float | None) -> int | None:
    return None if value is None else int(round(value))
