"""Which scheduler processes an SGLang 0.5.16 launch runs on this node, and which of them report metrics.

SGLang 0.5.16's own rules (read from its source, never imported):
- the TP and PP ranks a node runs: `_calculate_rank_ranges` (srt/entrypoints/engine.py:1401);
- with `--dp-size` > 1 the data-parallel controller launches them once per DP rank, each with a `dp_rank`
  label, or, with `--enable-dp-attention`, once, a rank's DP group being `tp_rank // attn_tp_size`
  (srt/managers/data_parallel_controller.py:362 and 544, srt/layers/dp_attention.py:293);
- `moe_ep_rank` from `_compute_parallelism_ranks` (engine.py:1436);
- every scheduler sets its constant gauges (`emit_constants`, srt/managers/scheduler.py:938); the rest of the
  scheduler metrics come only from ranks with `attn_tp_rank == 0`, or from every rank with
  `--enable-metrics-for-all-schedulers` (srt/observability/metrics_collector.py:1055);
- `engine_type` is "prefill", "decode" or "unified" from `--disaggregation-mode`
  (srt/disaggregation/utils.py:74).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SchedulerRank:
    """One scheduler process: its rank labels, the DP group whose batch it runs, and whether it reports."""

    tp_rank: int
    pp_rank: int
    moe_ep_rank: int
    dp_rank: int | None  # the `dp_rank` label; None: the launch has no DP ranks and the label is absent
    group: int  # the DP group (its own batch and KV pool); 0 without data parallelism
    reports_stats: bool  # sets the per-batch gauges and counters, not only the constants


@dataclass(frozen=True)
class RankLayout:
    """The scheduler ranks of one node of a launch."""

    ranks: tuple[SchedulerRank, ...]
    dp_groups: int
    node_rank: int
    nnodes: int
    gpus: int  # GPUs this node uses

    @property
    def tp_ranks(self) -> list[int]:
        """The TP ranks on this node, in order (the `TPn` tags of its log lines)."""
        return sorted({rank.tp_rank for rank in self.ranks})

    def groups_here(self) -> list[int]:
        """The DP groups that have a rank on this node."""
        return sorted({rank.group for rank in self.ranks})


def _size(args: dict[str, Any], key: str) -> int:
    try:
        return max(1, int(args.get(key) or 1))
    except (TypeError, ValueError):
        return 1


def engine_type(disaggregation_mode: str | None) -> str:
    """The `engine_type` label SGLang gives a launch's metrics."""
    return disaggregation_mode if disaggregation_mode in ("prefill", "decode") else "unified"


def rank_ranges(nnodes: int, pp_size: int, tp_size: int, node_rank: int) -> tuple[range, range]:
    """The PP and TP ranks one node runs (SGLang's `_calculate_rank_ranges`)."""
    pp_size_per_node = max(pp_size // nnodes, 1)
    nnodes_per_pp_rank = max(nnodes // pp_size, 1)
    pp_first = pp_size_per_node * (node_rank // nnodes_per_pp_rank)
    tp_size_per_node = max(tp_size // nnodes_per_pp_rank, 1)
    tp_first = tp_size_per_node * (node_rank % nnodes_per_pp_rank)
    return range(pp_first, pp_first + pp_size_per_node), range(tp_first, tp_first + tp_size_per_node)


def rank_layout(args: dict[str, Any]) -> RankLayout:
    """The scheduler ranks that `args` (SGLang's server args) start on this node."""
    tp, pp, dp = _size(args, "tp_size"), _size(args, "pp_size"), _size(args, "dp_size")
    ep, moe_dp, attn_cp = _size(args, "ep_size"), _size(args, "moe_dp_size"), _size(args, "attn_cp_size")
    nnodes = _size(args, "nnodes")
    node_rank = min(max(0, int(args.get("node_rank") or 0)), nnodes - 1)
    dp_attention = bool(args.get("enable_dp_attention")) and dp > 1
    all_report = bool(args.get("enable_metrics_for_all_schedulers"))
    attn_tp = max(1, tp // (dp if dp_attention else 1) // attn_cp)
    pp_range, tp_range = rank_ranges(nnodes, pp, tp, node_rank)
    moe_tp = max(1, tp // moe_dp)
    ranks: list[SchedulerRank] = []
    dp_loop: list[int | None] = list(range(dp)) if dp > 1 and not dp_attention else [None]
    for outer_dp in dp_loop:
        for pp_rank in pp_range:
            for tp_rank in tp_range:
                if dp_attention:
                    dp_rank: int | None = tp_rank // (attn_tp * attn_cp)
                else:
                    dp_rank = outer_dp
                ranks.append(SchedulerRank(
                    tp_rank=tp_rank,
                    pp_rank=pp_rank,
                    moe_ep_rank=tp_rank % moe_tp // max(1, moe_tp // ep),
                    dp_rank=dp_rank,
                    group=dp_rank or 0,
                    reports_stats=all_report or tp_rank % attn_tp == 0,
                ))
    return RankLayout(tuple(ranks), dp if dp > 1 else 1, node_rank, nnodes, gpus=len(ranks))
