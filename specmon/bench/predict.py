"""What shorter draft chains would have accepted, from one run with a longer one (pure; no I/O).

With chain drafting (topk 1) a verify step that accepted k drafts out of N would have accepted min(k, M - 1)
with M draft tokens: the first M - 1 drafts are the same tokens either way. So the per-step acceptance
histogram of an N-token run predicts the acceptance length of every M < N. It does not hold for trees
(topk > 1: the tree's shape changes with the budget) or for sampling at temperature > 0 (the target's
choices differ from run to run, so only the expectation carries over).

With two or more measured presets, a step-cost model (a verify step's time as a line in the draft-token count)
turns predicted acceptance into predicted decode tok/s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specmon.bench.stats import bootstrap_ci

Histogram = Sequence[int]
"""``h[k]``: how many verify steps of a request accepted exactly k drafts."""


def histogram_from_chunks(chunk_tokens: Sequence[int]) -> list[int]:
    """A request's histogram from its per-step token counts (one streamed chunk per verify step: the accepted
    drafts plus the target's bonus token)."""
    histogram: list[int] = []
    for tokens in chunk_tokens:
        if not isinstance(tokens, int) or tokens < 1:
            continue
        accepted = tokens - 1
        if len(histogram) <= accepted:
            histogram.extend([0] * (accepted + 1 - len(histogram)))
        histogram[accepted] += 1
    return histogram


def clean_histogram(value: object, max_len: int = 1024) -> list[int] | None:
    """A histogram from outside (a server's ``spec_accept_histogram``), or None when it is not one."""
    if not isinstance(value, list) or not value or len(value) > max_len:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        return None
    return list(value) if sum(value) > 0 else None


def chain_tokens(histogram: Histogram, draft_tokens: int) -> tuple[int, int]:
    """Tokens and verify steps the same steps give with ``draft_tokens`` (M): each step yields
    min(k, M - 1) drafts plus the bonus token."""
    cap = max(0, draft_tokens - 1)
    steps = sum(histogram)
    tokens = sum(count * (min(k, cap) + 1) for k, count in enumerate(histogram))
    return tokens, steps


def accept_length(histograms: Sequence[Histogram], draft_tokens: int) -> float | None:
    """Token-weighted acceptance length with ``draft_tokens``, as SGLang counts it (``completion_tokens /
    spec_verify_ct``: each request's first token comes from the prefill, not from a verify step)."""
    tokens = steps = 0
    for histogram in histograms:
        t, s = chain_tokens(histogram, draft_tokens)
        tokens, steps = tokens + t + 1, steps + s
    return tokens / steps if steps else None


def position_profile(histograms: Sequence[Histogram]) -> list[float]:
    """The share of verify steps that accepted at least i drafts, for i = 1, 2, ...: where the draft stops
    paying (as vLLM's ``acceptance_rate_per_position`` reports it)."""
    total = [0] * max((len(h) for h in histograms), default=0)
    for histogram in histograms:
        for k, count in enumerate(histogram):
            total[k] += count
    steps = sum(total)
    if not steps:
        return []
    profile, at_least = [], steps
    for k in range(1, len(total)):
        at_least -= total[k - 1]
        profile.append(at_least / steps)
    return profile


@dataclass(frozen=True)
class Prediction:
    """The predicted acceptance (and, with a cost model, decode tok/s) of one draft-token count."""

    draft_tokens: int
    accept_length: float
    ci95: tuple[float, float] | None
    decode_tok_s: float | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "draft_tokens": self.draft_tokens,
            "accept_length": self.accept_length,
            "ci95": list(self.ci95) if self.ci95 else None,
            "decode_tok_s": self.decode_tok_s,
        }


MIN_REQUESTS_FOR_CI = 5


def predict(histograms: Sequence[Histogram], measured_draft_tokens: int, seed: int = 0) -> list[Prediction]:
    """Predicted acceptance for every M from 2 to the measured N, with a bootstrap CI over requests (none for
    fewer than 5 requests). M = N reproduces the measured figure."""
    usable = [list(h) for h in histograms if sum(h) > 0]
    out: list[Prediction] = []
    for m in range(2, measured_draft_tokens + 1):
        value = accept_length(usable, m)
        if value is None:
            continue
        ci = None
        if len(usable) >= MIN_REQUESTS_FOR_CI:
            indices = list(range(len(usable)))
            ci = bootstrap_ci(
                indices, statistic=lambda sample, m=m: accept_length([usable[i] for i in sample], m) or 0.0, seed=seed
            )
        out.append(Prediction(m, value, ci))
    return out


@dataclass(frozen=True)
class StepCostModel:
    """A verify step's time as ``base_s + per_token_s * draft_tokens`` (with topk 1 the draft steps are
    draft_tokens - 1, so one slope covers drafting and verifying), fitted to measured presets."""

    base_s: float
    per_token_s: float
    presets: int

    def step_s(self, draft_tokens: int) -> float:
        return self.base_s + self.per_token_s * draft_tokens

    def decode_tok_s(self, accept_len: float, draft_tokens: int) -> float | None:
        step = self.step_s(draft_tokens)
        return accept_len / step if step > 0 else None


def fit_step_cost(measured: Sequence[tuple[int, float, float]]) -> StepCostModel | None:
    """Least squares over (draft_tokens, accept_length, decode_tok_s) of measured speculative presets; None with
    fewer than two distinct draft-token counts or figures that are not positive and finite."""
    points = [
        (float(m), accept / tok_s)
        for m, accept, tok_s in measured
        if m >= 2 and all(math.isfinite(v) and v > 0 for v in (accept, tok_s))
    ]
    xs = {x for x, _ in points}
    if len(xs) < 2:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    return StepCostModel(base_s=mean_y - slope * mean_x, per_token_s=slope, presets=len(xs))


def with_cost_model(predictions: Sequence[Prediction], model: StepCostModel | None) -> list[Prediction]:
    """The predictions with decode tok/s filled in where a cost model exists."""
    if model is None:
        return list(predictions)
    return [
        Prediction(p.draft_tokens, p.accept_length, p.ci95, model.decode_tok_s(p.accept_length, p.draft_tokens))
        for p in predictions
    ]
