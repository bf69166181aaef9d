"""A grid's predicted cells: at each concurrency, the longest chain measured there predicts the grid's shorter
chains (topk 1), replayed over its per-step trace as `specmon predict` does (`predict_run`), each acceptance with
its bootstrap CI. A step-cost line at that concurrency turns acceptance into per-request decode tok/s: fitted on
the chains measured there when two lengths are, else through no speculation (one token a step) and the longest
chain (drafting's fixed cost, if any, makes that line optimistic for short chains, so a prediction from it
never skips a configuration it should not). A chain shorter than every measured one is an extrapolation of the
measured chains' line: its decode CI also spans the line through no speculation. Trees (topk > 1) are never
predicted: a tree's shape changes with its budget. Pure: the runs are given; no I/O."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from specmon.bench.predict import CannotPredict, fit_step_cost, predict_run, through_no_speculation
from specmon.sweep.grid import GridConfig
from specmon.sweep.plan import CellPrediction, PredictionsAt, ReplayedLength

if TYPE_CHECKING:
    from specmon.bench.model import BenchResult
    from specmon.sweep.plan import SweepCell, SweepPlan

Load = Callable[[str | None], "BenchResult | None"]
Config = tuple[int, int, int]
__all__ = ["CellPrediction", "loses_everywhere", "predict_cells"]
TREE_NOTE = "a tree (topk > 1) cannot be predicted from a chain's trace (its shape changes with its budget): measured"


def _first_measured(plan: SweepPlan, concurrency: int) -> dict[Config, SweepCell]:
    """Each configuration's first measured cell at `concurrency` ((0, 1, 1): no speculation)."""
    out: dict[Config, SweepCell] = {}
    for step in plan.steps:
        config: Config = tuple(step.grid_config or (0, 1, 1))  # type: ignore[assignment]
        for cell in step.cells:
            if cell.state == "measured" and cell.concurrency == concurrency and cell.bench_run_id:
                out.setdefault(config, cell)
    return out


def _summary_of(cell: SweepCell, load: Load) -> tuple[float | None, float | None] | None:
    """A measured cell's (τ, decode tok/s): from its kept figures, else from its stored run (None: unreadable)."""
    figures = cell.figures
    if figures is not None and figures.run_id == cell.bench_run_id:
        return figures.accept_length, figures.decode_tok_s
    run = load(cell.bench_run_id)
    return (run.summary.accept_length.token_weighted, run.summary.median_tok_s) if run is not None else None


def predict_cells(plan: SweepPlan, load: Load) -> tuple[dict[tuple[Config, int], CellPrediction], list[str]]:
    """Every chain cell the measured runs predict (the longest chain's own included: the replay reproduces it),
    and, in words, why a concurrency could not predict. Each concurrency's replay is kept in the plan with the run
    it replayed, and done again only when that run changes."""
    chains: list[Config] = sorted({(s.grid_config[0], s.grid_config[1], s.grid_config[2]) for s in plan.steps
                     if s.grid_config and s.grid_config[0] > 0 and s.grid_config[1] == 1})
    out: dict[tuple[Config, int], CellPrediction] = {}
    notes: list[str] = []
    if not chains:
        return out, notes
    kept = {at.concurrency: at for at in plan.grid.predictions} if plan.grid is not None else {}
    fresh = []
    concurrencies = sorted({cell.concurrency for step in plan.steps for cell in step.cells})
    for concurrency in concurrencies:
        cells = _first_measured(plan, concurrency)
        measured_chains = sorted((c for c in cells if c[0] > 0 and c[1] == 1), key=lambda c: c[2])
        if not measured_chains:
            continue
        longest = measured_chains[-1]
        lengths = [c[2] for c in chains if c[2] <= longest[2]]
        at = kept.get(concurrency)
        if at is None or at.from_run != cells[longest].bench_run_id or at.lengths != lengths:
            at = _replay(load, cells[longest].bench_run_id or "", longest, lengths, concurrency)
        fresh.append(at)
        if at.note:
            notes.append(at.note)
            continue
        figures = [(c[2], *summary) for c in measured_chains if (summary := _summary_of(cells[c], load))]
        points = [(m, float(a), float(t)) for m, a, t in figures if a and t]
        baseline = _summary_of(cells[(0, 1, 1)], load) if (0, 1, 1) in cells else None
        base_tok_s = baseline[1] if baseline else None
        cost, how = fit_step_cost(points), "the measured chains' step cost"
        if cost is None and base_tok_s:
            cost, how = fit_step_cost([*points, (1, 1.0, base_tok_s)], lowest=1), \
                "a step cost through no speculation and that chain"
        source = f"run {at.from_run} ({GridConfig(*longest).label()} at concurrency {concurrency}); {how}"
        for guess in at.replayed:
            decode = decode_ci = None
            if cost is not None and cost.step_s(guess.draft_tokens) > 0:
                step_s = cost.step_s(guess.draft_tokens)
                decode = guess.accept_length / step_s
                decode_ci = (guess.accept_ci[0] / step_s, guess.accept_ci[1] / step_s) if guess.accept_ci else None
                if decode_ci and len(points) > 1:  # the chains' own line, maybe extrapolated
                    decode_ci = _widened(decode_ci, guess, points, base_tok_s)
            speedup = decode / base_tok_s if decode is not None and base_tok_s else None
            speedup_ci = ((decode_ci[0] / base_tok_s, decode_ci[1] / base_tok_s) if decode_ci and base_tok_s
                          else None)
            for config in chains:
                if config[2] == guess.draft_tokens:
                    out[(config, concurrency)] = CellPrediction(guess.accept_length, guess.accept_ci, decode,
                                                                decode_ci, speedup, speedup_ci, source)
    if plan.grid is not None:
        plan.grid.predictions = fresh
    return out, notes


def _replay(load: Load, run_id: str, longest: Config, lengths: list[int], concurrency: int) -> PredictionsAt:
    """The longest chain's run at one concurrency replayed at `lengths` (`predict_run`)."""
    at = PredictionsAt(concurrency, run_id, lengths)
    run = load(run_id)
    if run is None:
        at.note = f"no prediction at concurrency {concurrency}: run {run_id} cannot be read"
        return at
    try:
        predicted = predict_run(run, lengths, draft_tokens=None, seed=concurrency)
    except CannotPredict as exc:
        at.note = f"no prediction at concurrency {concurrency}: {exc}"
        return at
    if predicted.from_draft_tokens != longest[2]:
        at.note = (f"no prediction at concurrency {concurrency}: run {run.run_id}'s server ran "
                   f"{predicted.from_draft_tokens} draft tokens, not {longest[2]}")
        return at
    at.replayed = [ReplayedLength(g.draft_tokens, g.accept_length, _bounds(g.ci95)) for g in predicted.predictions]
    return at


def _widened(decode_ci: tuple[float, float], guess: ReplayedLength, points: list[tuple[int, float, float]],
             base_tok_s: float | None) -> tuple[float, float]:
    """A chain shorter than every measured one: the measured chains' line is extrapolated there, so its decode CI
    also spans the line through no speculation (`through_no_speculation`), and a noisy pair of long chains cannot
    predict a short one slower than it is."""
    if guess.accept_ci is None:
        return decode_ci
    low = through_no_speculation(guess.draft_tokens, guess.accept_ci[0], points, base_tok_s)
    high = through_no_speculation(guess.draft_tokens, guess.accept_ci[1], points, base_tok_s)
    if low is None or high is None:
        return decode_ci
    return min(decode_ci[0], low), max(decode_ci[1], high)


def _bounds(ci: Any) -> tuple[float, float] | None:
    return (float(ci[0]), float(ci[1])) if ci else None


def loses_everywhere(plan: SweepPlan, load: Load, config: Config, concurrencies: list[int],
                     predictions: dict[tuple[Config, int], CellPrediction] | None = None) -> str | None:
    """Why a chain configuration is not worth launching: at every asked concurrency its predicted decode tok/s,
    even at its CI's top, is below the baseline's measured CI low end there; None when it may win somewhere (or
    cannot be predicted somewhere)."""
    if config[1] != 1 or config[0] == 0:
        return None
    if predictions is None:
        predictions = predict_cells(plan, load)[0]
    baselines: dict[int, BenchResult] = {}
    for cell in (cell for step in plan.steps if step.baseline for cell in step.cells):
        if cell.state == "measured" and cell.concurrency not in baselines and (run := load(cell.bench_run_id)):
            baselines[cell.concurrency] = run
    worst: list[str] = []
    for concurrency in concurrencies:
        guess = predictions.get((config, concurrency))
        baseline = baselines.get(concurrency)
        if guess is None or guess.decode_ci is None or baseline is None:
            return None
        low = (baseline.summary.tok_s_ci95 or [None])[0] or baseline.summary.median_tok_s
        if low is None or guess.decode_ci[1] >= low:
            return None
        worst.append(f"{concurrency}: {guess.decode_tok_s:.0f} tok/s (CI top {guess.decode_ci[1]:.0f}) < "
                     f"{low:.0f}")
    return ("predicted slower than no speculation beyond its CI at every concurrency (" + "; ".join(worst)
            + "): not launched")
