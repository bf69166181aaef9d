"""The Live view's alert rules on plain figures: one server's stall, acceptance, KV, DP balance and restarts.

The Live view (LiveTracker) and the fleet (FleetTracker) both call these, so a rule is written once; the
fleet's Prometheus rules file takes its thresholds from here too.
"""

from __future__ import annotations

from collections.abc import Mapping

from specmon.acceptance import MIN_TOKENS_FOR_ACCEPT as MIN_TOKENS_FOR_ACCEPT
from specmon.acceptance import MIN_USEFUL_ACCEPT_LENGTH, low_acceptance
from specmon.live.model import Alert

STALL_S = 60.0
"""Requests running and no token progress this long is a stall. SGLang refreshes its gauges only at decode-log
intervals and, idle, every 30 s: a shorter limit would call a just-idle server stalled."""
ACCEPT_NO_DRAFT = MIN_USEFUL_ACCEPT_LENGTH
"""A draft whose weights did not load accepts about one token per step (`specmon.acceptance`: the rule and its
thresholds, shared with `specmon check` and `log-summary`)."""
DP_IMBALANCE_MIN_SPREAD = 4.0
KV_FULL = 0.95


def serving(running: float | None, decode_tok_s: float | None) -> bool:
    """Serving while requests run or tokens were generated in the window: the running gauge is an instant, so a
    steady client's server sampled between two requests still serves."""
    return bool(running) or (decode_tok_s or 0) > 0


def stall(running: float | None, stalled_for_s: float, stall_s: float = STALL_S,
          last_log_line: str | None = None) -> Alert | None:
    """Requests running and no token progress for `stall_s` or longer."""
    if not running or stalled_for_s < stall_s:
        return None
    text = f"{int(running)} request(s) running, no token progress for {int(stalled_for_s)} s"
    if last_log_line:
        text += f"; log: {last_log_line}"
    return Alert("stall", "error", text)


def acceptance(accept: float | None, speculative: bool, generated: float | None,
               baseline: float | None) -> Alert | None:
    """Acceptance far below the preset's last benchmark, or ≈ 1 (a draft that did not load): the rule of
    ``specmon.acceptance.low_acceptance``, as an alert."""
    text = low_acceptance(accept, speculative, generated, baseline)
    return Alert("accept_low", "error", text) if text is not None else None


def kv_full(used: float | None, total: float | None, queued: float | None) -> Alert | None:
    """The KV cache nearly full while requests wait."""
    if used is None or not total or not queued or used / total < KV_FULL:
        return None
    return Alert("kv_full", "warning", f"KV cache {used / total:.0%} full, {int(queued)} queued")


DP_RANKS_NAMED = 8
"""Data-parallel ranks named in the imbalance alert: the busiest and the idlest half each."""
DP_RANK_CHARS = 12


def dp_imbalance(running_per_dp: Mapping[str, float]) -> Alert | None:
    """Data-parallel ranks with very different numbers of running requests."""
    if len(running_per_dp) < 2:
        return None
    values = list(running_per_dp.values())
    if max(values) - min(values) < DP_IMBALANCE_MIN_SPREAD or max(values) < 2 * max(min(values), 1):
        return None
    ranks = list(running_per_dp.items())
    if len(ranks) > DP_RANKS_NAMED:  # the busiest and the idlest named, the rest counted: one line, any number of ranks
        ranks = (sorted(ranks, key=lambda rank: rank[1])[:DP_RANKS_NAMED // 2]
                 + sorted(ranks, key=lambda rank: -rank[1])[:DP_RANKS_NAMED // 2])
    ranks.sort(key=lambda rank: (len(rank[0]), rank[0]))  # DP2 before DP10
    shown = ", ".join(f"DP{k[:DP_RANK_CHARS]} {int(v)}" for k, v in ranks)
    more = f" (of {len(running_per_dp)} ranks)" if len(running_per_dp) > len(ranks) else ""
    return Alert("dp_imbalance", "warning", f"DP ranks unbalanced: running {shown}{more}")


def restarted(restarts: int, series: int | None = None) -> Alert | None:
    """The server restarted (counters went down, or a new start time)."""
    if restarts <= 0:
        return None
    text = f"{restarts} restart(s) seen" + (f"; series {series}" if series is not None else "")
    return Alert("restart", "info", text)
