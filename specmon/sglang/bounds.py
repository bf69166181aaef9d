"""The values SGLang's numeric launch flags can take: fractions, ratios and counts, with why.

argparse takes any float for `--mem-fraction-static` (1.5, -0.2, nan, inf) and any int for the speculative counts;
SGLang then fails late (a KV pool sized past the free memory, an empty one, a draft tree of nothing) or not at all.
Where SGLang itself checks a bound the reason says so (0.5.16's source); the others follow from what the value
means there. Not SGLang data per version: our own knowledge, like `flags.FLAG_ALIASES`.

    bound_problem("--mem-fraction-static", "1.5")   # "--mem-fraction-static 1.5 is outside (0, 1]: ..."
    FRACTION.contains(0.85)                         # True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["BOUNDS", "FRACTION", "Bound", "bound_problem", "lowered_fraction", "tree_candidates"]


@dataclass(frozen=True)
class Bound:
    """A closed or open interval of the values a flag can take; `why` says what the value is."""

    low: float
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    why: str = ""

    def contains(self, value: float) -> bool:
        """Whether `value` is finite and inside the interval."""
        if not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open or math.isinf(self.high) else value <= self.high
        return above and below

    def __str__(self) -> str:
        high = "inf)" if math.isinf(self.high) else f"{self.high:g}{')' if self.high_open else ']'}"
        return f"{'(' if self.low_open else '['}{self.low:g}, {high}"


FRACTION = Bound(0.0, 1.0, low_open=True, why="the share of each GPU's memory SGLang takes for the weights and the KV "
                 "cache: above 1 it sizes the KV pool past the free memory (CUDA out of memory), at 0 or below it has "
                 "none ('Not enough memory')")
_COUNT = "a count of draft steps or tokens: at least 1"

BOUNDS: dict[str, Bound] = {
    "--mem-fraction-static": FRACTION,
    "--swa-full-tokens-ratio": Bound(0.0, 1.0, low_open=True,
                                     why="SGLang raises '--swa-full-tokens-ratio should be in range (0, 1.0]'"),
    "--speculative-accept-threshold-single": Bound(0.0, 1.0, why="a probability"),
    "--speculative-accept-threshold-acc": Bound(0.0, 1.0, low_open=True,
                                                why="SGLang divides the target's probability by it: p / threshold"),
    "--eplb-min-rebalancing-utilization-threshold": Bound(0.0, 1.0, why="a utilization; SGLang's help says "
                                                          "'Must be in the range [0.0, 1.0]'"),
    "--tbo-token-distribution-threshold": Bound(0.0, 1.0, why="a share of a batch's tokens"),
    "--prefill-delayer-token-usage-low-watermark": Bound(0.0, 1.0, why="a share of the KV cache's tokens"),
    "--prefill-delayer-queue-min-ratio": Bound(0.0, low_open=True, why="a ratio of waiting to running requests"),
    "--hicache-host-memory-fraction": Bound(0.0, 1.0, low_open=True, why="a share of the host's memory (0.5.23+)"),
    "--disaggregation-decode-host-receive-threshold": Bound(0.0, 1.0, why="a share of the GPU's tokens; SGLang "
                                                            "0.5.23's help says 'Range [0, 1]'"),
    "--schedule-conservativeness": Bound(0.0, why="SGLang asserts 'schedule_conservativeness must be non-negative'"),
    "--mamba-full-memory-ratio": Bound(0.0, low_open=True, why="a ratio of memory sizes"),
    "--hicache-ratio": Bound(0.0, low_open=True, why="the host KV pool's size as a multiple of the GPU's"),
    "--speculative-num-steps": Bound(1.0, why=_COUNT),
    "--speculative-eagle-topk": Bound(1.0, why="the branches per draft step: at least 1"),
    "--speculative-num-draft-tokens": Bound(1.0, why=_COUNT),
}
"""Every bounded flag by its option string (the first one SGLang's usage shows)."""


def bound_problem(option: str, text: str, *, float_flag: bool = False) -> str | None:
    """Why `text` is no value `option` can take (outside its bound, or not finite where `float_flag` says the
    flag is a float), or None; `text` must already parse as a number (argparse's own check comes first)."""
    bound = BOUNDS.get(option)
    if bound is None and not float_flag:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    if not math.isfinite(value):
        return f"{option} {text} is not a finite number"
    if bound is None or bound.contains(value):
        return None
    return f"{option} {text} is outside {bound}: {bound.why}"


def lowered_fraction(value: float | None, step: float = 0.05) -> float | None:
    """A `--mem-fraction-static` below `value` and still inside (0, 1]: `step` lower, or half of it when that is
    too little room; None when `value` itself is no such fraction (then no lower one can be advised)."""
    if value is None or not FRACTION.contains(value):
        return None
    lowered = round(value - step, 2) if value - step >= 0.1 else round(value / 2, 3)
    return lowered if 0 < lowered < value else None


def tree_candidates(steps: int, topk: int) -> int:
    """The draft tokens an EAGLE tree of `steps` x `topk` offers besides its root: `topk` at the first step and
    topk x topk at each later one (`select_top_k_tokens` concatenates a (b, 1, topk) score block, then (b, topk,
    topk) ones, in every shipped version; where: the rules' `draft_tree_topk`). `--speculative-num-draft-tokens`
    may be at most this + 1: SGLang's torch.topk picks that many - 1 of them."""
    return topk + (steps - 1) * topk * topk
