"""A fleet of eight servers as one FleetSnapshot (every state, alert and source the screen shows), and the
fleet app fed with it (no Prometheus): for the snapshot tests and screenshots/."""

from __future__ import annotations

import math

from specmon.cli import build_parser
from specmon.fleet.cli import options_from
from specmon.fleet.model import FleetRow, FleetSnapshot
from specmon.fleet.promql import HISTORY_STEPS
from specmon.live.model import Alert
from specmon.live.quantiles import Quantile
from specmon.tui.cli import fleet_argv

PROMETHEUS = "http://prometheus.internal:9090"


def _history(base: float, dip_at: int | None = None) -> tuple[float | None, ...]:
    """15 minutes of tok/s, as the fleet reads them (a point per sparkline step, both ends)."""
    count = HISTORY_STEPS + 1
    points = [base * (1 + 0.08 * math.sin(i * 1.2)) for i in range(count)]
    if dip_at is not None:
        points[dip_at:] = [0.0] * (count - dip_at)
    return tuple(points)


def fleet_rows() -> tuple[FleetRow, ...]:
    gpu = {"gpu_memory_used_ratio": 0.93, "gpu_util_min_ratio": 0.71}
    return (
        FleetRow("node-c:30000", "node-c", "decode", "router", "down", 0, 0, 1, 312.0, "eagle3-16", "EAGLE3", 16,
                 alerts=(Alert("down", "error", "down, last seen 5 min ago: no target answers Prometheus' scrapes"),),
                 history=_history(2400, 9), targets=("node-c:30000",)),
        FleetRow("node-e:30000", "node-e", "regular", "router", "serving", 0, 1, 1, None, "eagle3-10", "EAGLE3", 10,
                 1510.0, 1.03, "counters", 22, 0, 0.41, Quantile(0.38), 0.91, 0.64,
                 alerts=(Alert("accept_low", "error", "acceptance 1.03 ≈ 1 token per step: did the draft's "
                                                    "weights load?"),),
                 history=_history(1500), targets=("node-e:30000",)),
        FleetRow("node-b:30000", "node-b", "regular", "router", "serving", 0, 1, 1, None, "eagle3-16", "EAGLE3", 16,
                 3620.0, 3.41, "counters", 44, 17, 0.97, Quantile(2.9), alerts=(
                     Alert("kv_full", "warning", "KV cache 97% full, 17 queued"),), history=_history(3600),
                 targets=("node-b:30000",), **gpu),
        FleetRow("dp-a", "node-d", "unified", "engine_type", "serving", 0, 2, 2, None, None, None, 4, 5210.0, 2.71,
                 "counters", 61, 3, 0.62, Quantile(0.21), 0.88, 0.93, alerts=(
                     Alert("dp_imbalance", "warning", "DP ranks unbalanced: running DP0 52, DP1 9"),),
                 history=_history(5200), targets=("node-d0:30000", "node-d1:30000")),
        FleetRow("node-f:30000", "node-f", "prefill", "router", "restarted", 1, 1, 1, None, "plain", None, None,
                 880.0, None, None, 6, 0, 0.12, Quantile(below=0.1), 0.35, 0.40,
                 alerts=(Alert("restart", "info", "1 restart(s) seen"),), history=_history(900, None)[6:],
                 targets=("node-f:30000",)),
        FleetRow("legacy:30000", "legacy", "unified", "engine_type", "serving", 0, 1, 1, None, "eagle-5", "EAGLE", 5,
                 1930.0, 2.35, "gauge", 12, 0, 0.33, Quantile(0.18), None, None, history=_history(1900),
                 targets=("legacy:30000",)),
        FleetRow("node-a:30000", "node-a", "regular", "router", "serving", 0, 1, 1, None, "eagle3-10", "EAGLE3", 10,
                 4120.0, 3.62, "counters", 38, 1, 0.55, Quantile(0.24), 0.86, 0.88, history=_history(4100),
                 targets=("node-a:30000",)),
        FleetRow("node-g:30000", "node-g", "regular", "router", "idle", 0, 1, 1, None, "eagle3-10", "EAGLE3", 10,
                 0.0, None, None, 0, 0, 0.0, Quantile(), 0.81, 0.0, history=_history(0), targets=("node-g:30000",)),
    )


def fleet_snapshot(stale: bool = False) -> FleetSnapshot:
    error = f"Prometheus at {PROMETHEUS} answered HTTP 401 (check the credentials)" if stale else None
    return FleetSnapshot(PROMETHEUS, 60.0, fleet_rows(), 1_800_000_000.0, 15.0, 0.021,
                         error=error,
                         error_kind="unauthorized" if stale else None, stale=stale)


def fleet_app(read_only: bool = False):
    """The fleet app with no poller (show a snapshot with `app.show(...)`)."""
    from specmon.tui.fleet import FleetApp

    args = build_parser().parse_args(["fleet", "--prometheus", PROMETHEUS])
    return FleetApp(options_from(args), fleet_argv(args), read_only=read_only, poll=False)
