"""What `specmon fleet` shows: one FleetRow per server, in a FleetSnapshot (the `fleet --once --json` shape)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specmon.live.model import Alert
from specmon.live.paying import SpeculationPays
from specmon.live.quantiles import Quantile

SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class FleetRow:
    """One server of the fleet. None wherever Prometheus (or the router, or specmon's records) cannot say.

    `state`: "serving", "idle", "down", "restarted" or "stalled". `accept_source`: "counters"
    (Δgeneration_tokens / Δspec_verify_calls), "gauge" (sglang:spec_accept_length, before 0.5.16) or None.
    """

    server: str
    host: str | None = None
    role: str | None = None
    role_source: str | None = None
    state: str = "idle"
    restarts: int = 0
    nodes_up: int = 0
    nodes_total: int = 0
    last_seen_s: float | None = None
    preset: str | None = None
    algorithm: str | None = None
    draft_tokens: int | None = None
    decode_tok_s: float | None = None
    accept_length: float | None = None
    accept_source: str | None = None
    running: float | None = None
    queued: float | None = None
    kv_used_ratio: float | None = None
    ttft_p99: Quantile = Quantile()
    """TTFT p99 in seconds: a value, or only the bound of the first or the +Inf bucket it fell in."""
    gpu_memory_used_ratio: float | None = None
    gpu_util_min_ratio: float | None = None
    """The lowest GPU utilization of the server's hosts, 0..1 (DCGM says percent)."""
    alerts: tuple[Alert, ...] = ()
    history: tuple[float | None, ...] = ()
    targets: tuple[str, ...] = ()
    """The server's scrape targets (`instance` labels): where it may answer from here."""
    speculation_pays: SpeculationPays | None = None
    """Its configuration's measured curve read at its running count (None: its configuration is not known)."""

    @property
    def worst(self) -> int:
        """The most severe alert's rank (0 error, 1 warning, 2 info, 3 none): rows sort by it."""
        return min((SEVERITY_ORDER.get(a.severity, 2) for a in self.alerts), default=3)

    def to_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "host": self.host,
            "role": self.role,
            "state": self.state,
            "restarts": self.restarts,
            "nodes_up": self.nodes_up,
            "preset": self.preset,
            "algorithm": self.algorithm,
            "draft_tokens": self.draft_tokens,
            "decode_tok_s": _r(self.decode_tok_s),
            "accept_length": _r(self.accept_length, 3),
            "accept_source": self.accept_source,
            "running": _int(self.running),
            "queued": _int(self.queued),
            "kv_used_ratio": _r(self.kv_used_ratio, 4),
            "ttft_p99_s": _r(self.ttft_p99.value, 4),
            "ttft_p99_below_s": _r(self.ttft_p99.below, 4),
            "ttft_p99_above_s": _r(self.ttft_p99.above, 4),
            "gpu_memory_used_ratio": _r(self.gpu_memory_used_ratio, 4),
            "gpu_util_min_ratio": _r(self.gpu_util_min_ratio, 4),
            "alerts": [{"kind": a.kind, "message": a.text} for a in self.alerts],
            "speculation_pays": self.speculation_pays.to_json() if self.speculation_pays is not None else None,
        }


@dataclass(frozen=True)
class FleetSnapshot:
    """The whole fleet at one moment. `error`: why Prometheus could not be read this time (the rows are then
    the last good ones, `stale`). `notes`: what was skipped and why, and what cannot be shown (no DCGM)."""

    prometheus: str
    window_s: float
    rows: tuple[FleetRow, ...] = ()
    taken_at: float | None = None
    scrape_s: float | None = None
    query_s: float | None = None
    notes: tuple[str, ...] = ()
    gpu_note: str | None = None
    error: str | None = None
    error_kind: str | None = None
    stale: bool = False

    @property
    def alerting(self) -> bool:
        return any(row.state == "down" or any(a.severity in ("error", "warning") for a in row.alerts)
                   for row in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {"prometheus": self.prometheus, "window_s": self.window_s,
                "servers": [row.to_json() for row in self.rows]}


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def _int(value: float | None) -> int | None:
    return None if value is None else int(round(value))
