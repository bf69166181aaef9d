"""A grid's predicted cells: at each concurrency, the longest chain measured there predicts the grid's shorter
chains (topk 1), replayed over its per-step trace as `specmon predict` does (`predict_run`), each acceptance with
its bootstrap CI. A step-cost line at that concurrency turns acceptance into per-request decode tok/s: fitted on
the chains measured there when two lengths are, else through no speculation (one token a step) and the longest
chain (drafting's fixed cost, if any, makes that line optimistic for short chains, so a prediction from it
never skips a configuration it should not). Trees (topk > 1) are never predicted: a tree's shape changes with
its budget. Pure: the runs are given; no I/O."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specmon.bench.predict import CannotPredict, fit_step_cost, predict_run

if TYPE_CHECKING:
    from specmon.bench.model import BenchResult
    from specmon.sweep.plan import SweepPlan

Load = Callable[[str | None], "BenchResult | None"]
Config = tuple[int, int, int]
TREE_NOTE = "a tree (topk > 1) cannot be predicted from a chain's trace (its shape changes with its budget): measured"


@dataclass(frozen=True)
class CellPrediction:
    """One (chain configuration, concurrency) cell as the longest chain measured at that concurrency predicts it."""

    accept_length: float
    accept_ci: tuple[float, float] | None
    decode_tok_s: float | None
    decode_ci: tuple[float, float] | None
    """From the acceptance CI at the fitted step cost."""
    speedup: float | None
    speedup_ci: tuple[float, float] | None
    """Over the baseline's measured decode tok/s at the same concurrency."""
    source: str
    """Which run predicted it, and from what step cost."""

    def to_json(self) -> dict[str, Any]:
        return {"accept_length": self.accept_length, "accept_ci": _pair(self.accept_ci),
                "decode_tok_s": self.decode_tok_s, "decode_ci": _pair(self.decode_ci), "speedup": self.speedup,
                "ci": _pair(self.speedup_ci), "predicted_from": self.source}


def _pair(value: tuple[float, float] | None) -> list[float] | None:
    return list(value) if value else None


def _measured(plan: SweepPlan, load: Load) -> dict[int, dict[Config, BenchResult]]:
    """Per concurrency, each configuration's first measured run there ((0, 1, 1): no speculation)."""
    out: dict[int, dict[Config, BenchResult]] = {}
    for step in plan.steps:
        config: Config = tuple(step.grid_config or (0, 1, 1))  # type: ignore[assignment]
        for cell in step.cells:
            if cell.state != "measured":
                continue
            here = out.setdefault(cell.concurrency, {})
            if config not in here and (run := load(cell.bench_run_id)) is not None:
                here[config] = run
    return out


def predict_cells(plan: SweepPlan, load: Load) -> tuple[dict[tuple[Config, int], CellPrediction], list[str]]:
    """Every chain cell the measured runs predict (the longest chain's own included: the replay reproduces it),
    and, in words, why a concurrency could not predict."""
    chains: list[Config] = sorted({(s.grid_config[0], s.grid_config[1], s.grid_config[2]) for s in plan.steps
                     if s.grid_config and s.grid_config[0] > 0 and s.grid_config[1] == 1})
    out: dict[tuple[Config, int], CellPrediction] = {}
    notes: list[str] = []
    if not chains:
        return out, notes
    for concurrency, runs in sorted(_measured(plan, load).items()):
        measured_chains = sorted((c for c in runs if c[0] > 0 and c[1] == 1), key=lambda c: c[2])
        baseline = runs.get((0, 1, 1))
        if not measured_chains:
            continue
        longest = measured_chains[-1]
        run = runs[longest]
        lengths = [c[2] for c in chains if c[2] <= longest[2]]
        try:
            predicted = predict_run(run, lengths, draft_tokens=None, seed=concurrency)
        except CannotPredict as exc:
            notes.append(f"no prediction at concurrency {concurrency}: {exc}")
            continue
        if predicted.from_draft_tokens != longest[2]:
            notes.append(f"no prediction at concurrency {concurrency}: run {run.run_id}'s server ran "
                         f"{predicted.from_draft_tokens} draft tokens, not {longest[2]}")
            continue
        figures = [(c[2], r.summary.accept_length.token_weighted, r.summary.median_tok_s)
                   for c, r in runs.items() if c in measured_chains]
        points = [(m, float(a), float(t)) for m, a, t in figures if a and t]
        base_tok_s = baseline.summary.median_tok_s if baseline is not None else None
        cost, how = fit_step_cost(points), "the measured chains' step cost"
        if cost is None and base_tok_s:
            cost, how = fit_step_cost([*points, (1, 1.0, base_tok_s)], lowest=1), \
                "a step cost through no speculation and that chain"
        source = f"run {run.run_id} (s{longest[0]} k1 d{longest[2]} at concurrency {concurrency}); {how}"
        for guess in predicted.predictions:
            decode = decode_ci = None
            if cost is not None and cost.step_s(guess.draft_tokens) > 0:
                step_s = cost.step_s(guess.draft_tokens)
                decode = guess.accept_length / step_s
                decode_ci = (guess.ci95[0] / step_s, guess.ci95[1] / step_s) if guess.ci95 else None
            speedup = decode / base_tok_s if decode is not None and base_tok_s else None
            speedup_ci = ((decode_ci[0] / base_tok_s, decode_ci[1] / base_tok_s) if decode_ci and base_tok_s
                          else None)
            for config in chains:
                if config[2] == guess.draft_tokens:
                    out[(config, concurrency)] = CellPrediction(guess.accept_length, guess.ci95, decode, decode_ci,
                                                                speedup, speedup_ci, source)
    return out, notes


def loses_everywhere(plan: SweepPlan, load: Load, config: Config, concurrencies: list[int],
                     predictions: dict[tuple[Config, int], CellPrediction] | None = None) -> str | None:
    """Why a chain configuration is not worth launching: at every asked concurrency its predicted decode tok/s,
    even at its CI's top, is below the baseline's measured CI low end there; None when it may win somewhere (or
    cannot be predicted somewhere)."""
    if config[1] != 1 or config[0] == 0:
        return None
    if predictions is None:
        predictions = predict_cells(plan, load)[0]
    baselines = _measured(plan, load)
    worst: list[str] = []
    for concurrency in concurrencies:
        guess = predictions.get((config, concurrency))
        baseline = baselines.get(concurrency, {}).get((0, 1, 1))
        if guess is None or guess.decode_ci is None or baseline is None:
            return None
        low = (baseline.summary.tok_s_ci95 or [None])[0] or baseline.summary.median_tok_s
        if low is None or guess.decode_ci[1] >= low:
            return None
        worst.append(f"{concurrency}: {guess.decode_tok_s:.0f} tok/s (CI top {guess.decode_ci[1]:.0f}) < "
                     f"{low:.0f}")
    return ("predicted slower than no speculation beyond its CI at every concurrency (" + "; ".join(worst)
            + "): not launched")
