"""What shorter draft chains would have accepted, from one run with a longer one (pure; no I/O).

With chain drafting (topk 1) the draft proposes its greedy continuation; where it agrees with the target's
greedy tokens is a property of the text, not of the chain length. So one run with N draft tokens tells, position
by position, where the draft agreed, and a chain of M < N is replayed over those positions: each of its verify
steps accepts the run of agreement ahead, up to M - 1 drafts, and ends with the target's bonus token. The trace
is the run's per-step token counts (one streamed chunk per verify step, `chunk_tokens`), so a step that accepted
all N - 1 drafts is not cut where the long chain cut it, and nothing past `max_new_tokens` is counted. Where a
request has no trace (its chunks do not match its verify steps), the per-step histogram stands in: a step that
accepted k would accept min(k, M - 1), with the drafts SGLang counts past `max_new_tokens` taken off.

No prediction across chain lengths is exact under SGLang: its greedy outputs change with the chain length
(bf16 numerics change with the verify width), so the text itself differs. Each prediction comes with its
bootstrap CI over requests and `GREEDY_NOTE`. Neither holds for trees (topk > 1: the tree's shape changes with
its budget) nor for sampling at temperature > 0 (only the expectation carries over).

With two or more measured presets, a step-cost model (a verify step's time as a line in the draft-token count)
turns predicted acceptance into predicted decode tok/s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, TypeGuard

from specmon.bench.stats import bootstrap_ci

if TYPE_CHECKING:
    from specmon.bench.model import BenchResult

Histogram = Sequence[int]
"""``h[k]``: how many verify steps of a request accepted exactly k drafts."""

GREEDY_NOTE = (
    "SGLang's greedy outputs change with the chain length (its bf16 numerics change with the verify width), so "
    "no prediction across chain lengths is exact: read each with its 95% CI."
)


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
    """Token-weighted acceptance length with ``draft_tokens`` by the histogram formula, as SGLang counts it
    (``completion_tokens / spec_verify_ct``: each request's first token comes from the prefill)."""
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


def agreement_runs(steps: Sequence[int], draft_tokens: int) -> list[int]:
    """For each position a chain's verify steps produced (after the prefill's tokens), how many drafts in a
    row the draft gets right from there, read off the measured steps: a step of c tokens accepted c - 1 drafts
    and was wrong at its bonus position, unless it accepted every draft (c = N), where the bonus position was
    never drafted and counts as agreed (agreement comes in bursts)."""
    agreed: list[bool] = []
    for tokens in steps:
        agreed += [True] * (tokens - 1)
        agreed.append(tokens >= draft_tokens)
    runs = [0] * (len(agreed) + 1)
    for position in range(len(agreed) - 1, -1, -1):
        runs[position] = runs[position + 1] + 1 if agreed[position] else 0
    return runs[:-1]


def replay_steps(runs: Sequence[int], draft_tokens: int) -> int:
    """Verify steps a chain of ``draft_tokens`` (M) needs for the same tokens: each accepts the run of
    agreement ahead, up to M - 1 drafts, plus the bonus token (the last one stops at the last token)."""
    position = steps = 0
    cap = max(0, draft_tokens - 1)
    while position < len(runs):
        position += min(runs[position], cap) + 1
        steps += 1
    return steps


@dataclass(frozen=True)
class RequestChains:
    """One request as the predictor sees it: its tokens and how many verify steps each chain length takes."""

    prompt_id: str
    tokens: int
    steps: dict[int, float]
    method: str
    """"trace" (replayed over its per-step counts) or "histogram" (the formula)."""


def trace_of(request: Any, draft_tokens: int) -> list[int] | None:
    """The request's per-step token counts when they are one chunk per verify step (as many chunks as
    `spec_verify_ct`, each 1..N tokens, no more than the completion), else None."""
    chunks, verify = request.chunk_tokens, request.spec_verify_ct
    if not isinstance(verify, int) or verify < 1 or not isinstance(chunks, list) or len(chunks) != verify:
        return None
    if not all(isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= draft_tokens for c in chunks):
        return None
    return list(chunks) if sum(chunks) <= request.completion_tokens else None


def request_chains(request: Any, measured: int, lengths: Sequence[int]) -> RequestChains | str:
    """How many steps each chain length in ``lengths`` takes for ``request`` of a run with ``measured`` draft
    tokens, or why the request cannot be used."""
    if request.warmup:
        return "a warmup request"
    if not request.ok:
        return "failed"
    trace = trace_of(request, measured)
    if trace is not None:
        runs = agreement_runs(trace, measured)
        first = request.completion_tokens - sum(trace)
        return RequestChains(
            request.prompt_id, first + len(runs), {m: float(replay_steps(runs, m)) for m in lengths}, "trace"
        )
    histogram = request.accept_histogram
    if not histogram or not sum(histogram):
        return "no verify steps (no speculation)" if not request.spec_verify_ct else "no per-step figures"
    counted = 1 + sum(count * (k + 1) for k, count in enumerate(histogram))
    past_the_end = max(0, counted - request.completion_tokens)  # SGLang counts drafts past max_new_tokens
    steps = {}
    for m in lengths:
        tokens, verify = chain_tokens(histogram, m)
        tokens = 1 + tokens - max(0, past_the_end - max(0, measured - m))
        steps[m] = verify * request.completion_tokens / tokens if tokens > 0 else math.inf
    return RequestChains(request.prompt_id, request.completion_tokens, steps, "histogram")


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
            "ci": list(self.ci95) if self.ci95 else None,
            "decode_tok_s": self.decode_tok_s,
        }


MIN_REQUESTS_FOR_CI = 5


def _accept(chains: Sequence[RequestChains], m: int) -> float:
    steps = sum(c.steps[m] for c in chains)
    return sum(c.tokens for c in chains) / steps if steps else 0.0


def _sampled_accept(chains: Sequence[RequestChains], m: int, sample: Sequence[float]) -> float:
    """``_accept`` over the chains a bootstrap sample of their indexes picks."""
    return _accept([chains[int(i)] for i in sample], m)


@dataclass(frozen=True)
class Drafting:
    """A speculative configuration, as runs and predictions are matched by: the algorithm, its draft model, the
    steps, the top-k and the draft tokens SGLang really runs. Two configurations with the same draft-token count
    but another algorithm, draft model or shape (a tree: topk > 1) are different, and only a chain (topk 1) is
    predicted from another chain of the same drafter."""

    algorithm: str
    draft_tokens: int
    num_steps: int | None = None
    eagle_topk: int | None = None
    draft_model: str | None = None

    @property
    def chain(self) -> bool:
        """Chain drafting (topk 1, or none given): one draft token a step."""
        return self.eagle_topk is None or self.eagle_topk <= 1

    @property
    def drafter(self) -> tuple[str, str | None]:
        """What proposes the drafts: the algorithm and its draft model."""
        return self.algorithm.upper(), self.draft_model

    def text(self) -> str:
        if self.chain:
            return f"{self.algorithm} chain of {self.draft_tokens}"
        return f"{self.algorithm} tree (topk {self.eagle_topk}, steps {self.num_steps}, {self.draft_tokens} draft tokens)"

    @classmethod
    def of_flags(cls, flags: Any, draft_model: Any = None) -> Drafting | None:
        """A preset's configuration (its `SpeculativeFlags`: the draft tokens SGLang will really run); None
        without speculation."""
        tokens = flags.effective_draft_tokens if flags.enabled else None
        if not _count(tokens):
            return None
        return cls(str(flags.algorithm), tokens, flags.num_steps, flags.eagle_topk,
                   draft_model if isinstance(draft_model, str) else None)


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


@dataclass
class PredictionSet:
    """What one run predicts for other chain lengths: the requests used and skipped (with why), and one
    prediction per draft-token count."""

    run_id: str
    from_draft_tokens: int
    predictions: list[Prediction] = field(default_factory=list)
    requests_used: int = 0
    skipped: list[str] = field(default_factory=list)
    """Why each request (or stored record) left out was left out."""
    methods: dict[str, int] = field(default_factory=dict)
    """Requests replayed over their trace, and those read by the histogram formula."""
    note: str = GREEDY_NOTE
    drafting: Drafting | None = None
    """The chain it was measured with: it predicts only shorter chains of the same drafter (`prediction_for`)."""

    def to_json(self) -> dict[str, object]:
        """The `specmon predict --json` shape."""
        return {
            "run_id": self.run_id,
            "from_draft_tokens": self.from_draft_tokens,
            "requests_used": self.requests_used,
            "requests_skipped": len(self.skipped),
            "predictions": [p.to_json() for p in self.predictions],
        }

    def skipped_text(self) -> str | None:
        """How many requests were left out and why, in one line (None when none was)."""
        if not self.skipped:
            return None
        reasons: dict[str, int] = {}
        for reason in self.skipped:
            reasons[reason] = reasons.get(reason, 0) + 1
        why = "; ".join(f"{n}× {r}" if n > 1 else r for r, n in sorted(reasons.items(), key=lambda kv: -kv[1]))
        return f"{len(self.skipped)} request(s) skipped: {why}"


def predict_requests(
    requests: Sequence[Any], measured_draft_tokens: int, lengths: Sequence[int] | None = None, seed: int = 0
) -> tuple[list[Prediction], list[RequestChains], list[str]]:
    """Predicted acceptance for each chain length in ``lengths`` (default every M from 2 to the measured N;
    longer ones are not predicted) from a run's requests, with a bootstrap CI over requests (none for fewer
    than 5). M = N reproduces the measured figure. Returns the predictions, the requests used and why the
    others were skipped."""
    wanted = sorted({m for m in (lengths or range(2, measured_draft_tokens + 1)) if 2 <= m <= measured_draft_tokens})
    chains: list[RequestChains] = []
    skipped: list[str] = []
    for request in requests:
        got = request_chains(request, measured_draft_tokens, wanted)
        if isinstance(got, str):
            if got != "a warmup request":
                skipped.append(f"{got}")
        else:
            chains.append(got)
    out: list[Prediction] = []
    for m in wanted if chains else ():
        ci = None
        if len(chains) >= MIN_REQUESTS_FOR_CI:
            ci = bootstrap_ci(list(range(len(chains))), statistic=partial(_sampled_accept, chains, m), seed=seed)
        out.append(Prediction(m, _accept(chains, m), ci))
    return out, chains, skipped


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


def fit_step_cost(measured: Sequence[tuple[int, float, float]], lowest: int = 2) -> StepCostModel | None:
    """Least squares over (draft_tokens, accept_length, decode_tok_s) of measured speculative presets; None with
    fewer than two distinct draft-token counts or figures that are not positive and finite. ``lowest`` 1 admits
    no speculation as the point (1, 1.0, its tok/s): one token verified a step, no draft step."""
    points = [
        (float(m), accept / tok_s)
        for m, accept, tok_s in measured
        if m >= lowest and all(math.isfinite(v) and v > 0 for v in (accept, tok_s))
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


def through_no_speculation(draft_tokens: int, accept_len: float, chains: Sequence[tuple[int, float, float]],
                           baseline_tok_s: float | None) -> float | None:
    """Decode tok/s at ``accept_len`` for a chain shorter than every measured one, on the step-cost line through
    no speculation (1, 1.0, its tok/s) and the measured ``chains`` (draft_tokens, τ, tok/s). There the chains'
    own line is extrapolated, and this one is optimistic (drafting's fixed cost, if any, is left out), so a skip
    decided on it cannot come from a tilted line. None when the chain is not shorter than them all, or no line."""
    if not baseline_tok_s or not chains or draft_tokens >= min(m for m, _, _ in chains):
        return None
    cost = fit_step_cost([*chains, (1, 1.0, baseline_tok_s)], lowest=1)
    return cost.decode_tok_s(accept_len, draft_tokens) if cost is not None else None


def with_cost_model(predictions: Sequence[Prediction], model: StepCostModel | None) -> list[Prediction]:
    """The predictions with decode tok/s filled in where a cost model exists."""
    if model is None:
        return list(predictions)
    return [
        Prediction(p.draft_tokens, p.accept_length, p.ci95, model.decode_tok_s(p.accept_length, p.draft_tokens))
        for p in predictions
    ]


class CannotPredict(ValueError):
    """The run cannot predict other chain lengths: no speculation, a tree (topk > 1), or no usable request."""


def chain_length_of(run: BenchResult) -> int:
    """The draft tokens a stored run's server really ran as a chain (topk 1), from its effective settings."""
    spec = run.server.speculative
    tokens, topk = spec.num_draft_tokens, spec.eagle_topk
    if not spec.algorithm or tokens is None or tokens < 2:
        raise CannotPredict(f"run {run.run_id} ran no speculative decoding (no draft-token count in its settings)")
    if isinstance(topk, int) and topk > 1:
        raise CannotPredict(
            f"run {run.run_id} drafted a tree (topk {topk}): a tree's shape changes with its budget, so its "
            "steps do not predict other draft-token counts"
        )
    return tokens


def predict_run(
    run: BenchResult,
    lengths: Sequence[int] | None = None,
    *,
    draft_tokens: int | None = None,
    cost_model: StepCostModel | None = None,
    seed: int = 0,
) -> PredictionSet:
    """What a stored run (a BenchResult) predicts for the chain lengths in ``lengths`` (default 2..N): replayed
    over each request's trace, the histogram formula where there is none. ``draft_tokens`` overrides the N read
    from the run's settings. The stored records the reader skipped count as skipped requests, with why."""
    measured = draft_tokens if draft_tokens is not None else chain_length_of(run)
    predictions, chains, skipped = predict_requests(run.requests, measured, lengths, seed)
    skipped += [f"stored record unreadable ({s.get('reason', '?')})" for s in run.skipped_records]
    methods: dict[str, int] = {}
    for chain in chains:
        methods[chain.method] = methods.get(chain.method, 0) + 1
    return PredictionSet(
        run.run_id, measured, with_cost_model(predictions, cost_model), len(chains), skipped, methods
    )


def predict_measured(measured: Sequence[tuple[Drafting, BenchResult]]) -> tuple[list[PredictionSet], list[str]]:
    """What measured presets predict, each given with its configuration and run: for each drafter, its longest
    measured chain predicts its shorter chains, with decode tok/s from a step-cost model fitted on that drafter's
    measured chains alone (a tree, or another drafter, says nothing of a chain's steps). Returns the prediction
    sets and, in words, the runs that could not predict (a run whose server ran another configuration than its
    preset, a run without usable requests)."""
    drafters: dict[tuple[str, str | None], list[tuple[Drafting, Any]]] = {}
    for drafting, run in measured:
        if drafting.chain:
            drafters.setdefault(drafting.drafter, []).append((drafting, run))
    sets: list[PredictionSet] = []
    notes: list[str] = []
    for chains in drafters.values():
        points = chain_figures(chains)
        drafting, run = max(chains, key=lambda pair: (pair[0].draft_tokens, pair[1].started_at))
        try:
            ran = chain_length_of(run)
            if ran != drafting.draft_tokens:
                raise CannotPredict(f"run {run.run_id}'s server ran {ran} draft tokens, not its preset's "
                                    f"{drafting.draft_tokens}")
            predicted = predict_run(run, cost_model=fit_step_cost(points))
        except CannotPredict as exc:
            notes.append(f"no prediction from {drafting.text()}: {exc}")
            continue
        predicted.drafting = drafting
        sets.append(predicted)
    return sets, notes


def chain_figures(measured: Sequence[tuple[Drafting, BenchResult]]) -> list[tuple[int, float, float]]:
    """(draft_tokens, τ, median decode tok/s) of each measured run that has both figures: the points a step-cost
    line is fitted on (`fit_step_cost`)."""
    return [(drafting.draft_tokens, accept, decode) for drafting, run in measured
            if (accept := run.summary.accept_length.token_weighted) and (decode := run.summary.median_tok_s)]


def prediction_for(sets: Sequence[PredictionSet], drafting: Drafting | None) -> Prediction | None:
    """The prediction for one configuration: a chain, from the set of its drafter, at most as long as the chain
    that set was measured with; None for a tree, another drafter, or a longer chain."""
    if drafting is None or not drafting.chain:
        return None
    for predicted in sets:
        if predicted.drafting is not None and predicted.drafting.drafter == drafting.drafter:
            return next((p for p in predicted.predictions if p.draft_tokens == drafting.draft_tokens), None)
    return None
