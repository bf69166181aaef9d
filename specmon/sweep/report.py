"""A sweep's result from its benchmark runs: per preset tok/s with its CI, acceptance, speedup against its baseline
run (`baseline_for`: the rule `specmon results` uses too) paired per prompt, the baseline's drift between its first
and last run, and a recommendation. Pure: no I/O."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specmon.bench.compare import baseline_for, compare
from specmon.bench.model import AcceptFigures, BenchResult
from specmon.bench.predict import Drafting
from specmon.bench.report import production_gap, symptoms
from specmon.bench.results import skipped_note

DRIFT_FLAG_PCT = 3.0
WITHIN_BEST_PCT = 1.0
MAD_TO_SIGMA = 1.4826


@dataclass
class PresetOutcome:
    """One step of a sweep: a preset, how it went and what it measured."""

    preset: str
    draft_tokens: int | None
    """The draft tokens SGLang really runs (None without speculation)."""
    state: str = "pending"
    """pending, measured, failed or skipped."""
    run: BenchResult | None = None
    startup_s: float | None = None
    measure_s: float | None = None
    error: str | None = None
    baseline: bool = False
    drafting: Drafting | None = None
    """Its speculative configuration (algorithm, steps, topk, draft tokens; None for the baseline)."""


def conservative_tok_s(run: BenchResult) -> float | None:
    """median − 1.4826·MAD of the run's per-request decode tok/s: a rate the preset keeps on a bad day (0 when
    the requests spread too widely for one: two requests far apart make the difference negative)."""
    rates = [v for r in run.measured if r.ok and (v := r.decode_tok_s) and math.isfinite(v) and v > 0]
    if not rates:
        return None
    median = statistics.median(rates)
    mad = statistics.median(abs(v - median) for v in rates)
    return max(0.0, median - MAD_TO_SIGMA * mad)


def _median_tok_s(run: BenchResult | None) -> float | None:
    return _finite(run.summary.median_tok_s) if run is not None else None


@dataclass
class SweepReport:
    """The table, the drift and the recommendation of a sweep."""

    run_id: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    baseline_drift_pct: float | None = None
    drift_flagged: bool = False
    recommended: str | None = None
    no_recommendation: str | None = None
    """Why nothing is recommended (None when a preset is)."""
    notes: list[str] = field(default_factory=list)
    """What the report left out and why (stored records skipped by the reader)."""
    predicted_from: list[str] = field(default_factory=list)
    """The runs the τ pred column comes from, one per drafter: "run ID (EAGLE3 chain of 16)"."""
    left_serving: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "presets": self.rows,
            "baseline_drift_pct": self.baseline_drift_pct,
            "baseline_drift_flagged": self.drift_flagged,
            "recommended": self.recommended,
            "no_recommendation": self.no_recommendation,
            "notes": self.notes,
            "predicted_from": self.predicted_from,
            "left_serving": self.left_serving,
        }


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def build_report(run_id: str, outcomes: Sequence[PresetOutcome]) -> SweepReport:
    """The report of a sweep's outcomes (baseline runs first and last, speculative ones between)."""
    report = SweepReport(run_id)
    baselines = [o for o in outcomes if o.baseline and o.state == "measured" and o.run is not None]
    measured = [o.run for o in outcomes if o.state == "measured" and o.run is not None]
    if len(baselines) >= 2:
        first, last = _median_tok_s(baselines[0].run), _median_tok_s(baselines[-1].run)
        if first and last:
            report.baseline_drift_pct = (last - first) / first * 100
            report.drift_flagged = abs(report.baseline_drift_pct) > DRIFT_FLAG_PCT
    gaps: dict[str, str] = {}
    for outcome in outcomes:
        run = outcome.run
        speedup = comparison = None
        against = baseline_for(run, measured) if run is not None and not outcome.baseline else None
        if run is not None and against is not None and against is not run:
            comparison = compare(run, against)
            speedup = comparison.speedup
        accept = run.summary.accept_length if run is not None else AcceptFigures()
        report.rows.append(
            {
                "preset": outcome.preset,
                "baseline": outcome.baseline,
                "draft_tokens": outcome.draft_tokens,
                "eagle_topk": outcome.drafting.eagle_topk if outcome.drafting is not None else None,
                "drafting": outcome.drafting.text() if outcome.drafting is not None else None,
                "state": outcome.state,
                "run_id": run.run_id if run is not None else None,
                "decode_tok_s": _median_tok_s(run),
                "ci95": run.summary.tok_s_ci95 if run is not None else None,
                "conservative_tok_s": conservative_tok_s(run) if run is not None else None,
                "accept_length": _finite(accept.token_weighted),
                "accept_profile": accept.profile or None,
                "speedup": _finite((speedup or {}).get("geomean")),
                "speedup_ci95": (speedup or {}).get("ci95"),
                "speedup_baseline_run_id": comparison.baseline_run_id if comparison is not None else None,
                "startup_s": outcome.startup_s,
                "measure_s": outcome.measure_s,
                "error": outcome.error,
                "requests_skipped": len(run.skipped_records) if run is not None else 0,
                "flags": symptoms(run, comparison) if run is not None else {},
            }
        )
        note = skipped_note(run) if run is not None else None
        if note and note not in report.notes:
            report.notes.append(f"{outcome.preset}: {note}")
        if run is not None and (gap := production_gap(run)):
            gaps[outcome.preset] = gap
    report.recommended, report.no_recommendation = recommend(report.rows)
    if report.recommended in gaps:  # the recommendation rests on prompts unlike production's (--against-traffic)
        report.notes.append(f"{report.recommended}: FLAG unrepresentative: {gaps[report.recommended]}")
    return report


def recommend(rows: Sequence[dict[str, Any]]) -> tuple[str | None, str | None]:
    """The preset with the highest conservative tok/s, or the one with the fewest draft tokens within 1% of it
    (fewer draft tokens cost less memory and less work when traffic grows); else None and why not."""
    measured = [r for r in rows if r["state"] == "measured"]
    if not measured:
        return None, "no preset was measured"
    rated = [r for r in measured if r["conservative_tok_s"] is not None]
    if not rated:
        skipped = sum(r.get("requests_skipped") or 0 for r in measured)
        why = f"; {skipped} stored request records were skipped (see the notes)" if skipped else ""
        return None, f"{len(measured)} presets measured, but none has a successful request with decode tok/s{why}"
    best = max(r["conservative_tok_s"] for r in rated)
    if not best > 0:
        return None, (f"{len(rated)} presets measured, but each one's requests spread too widely for a rate it "
                      "keeps (median − 1.4826·MAD of decode tok/s is 0): measure more requests")
    close = [r for r in rated if r["conservative_tok_s"] >= best * (1 - WITHIN_BEST_PCT / 100)]
    return min(close, key=lambda r: (r["draft_tokens"] or 0, -r["conservative_tok_s"]))["preset"], None
