"""Is speculation paying now? The serving configuration's measured curve (a stored grid sweep's speedup over no
speculation, per concurrency) read at the server's running-request count. Pure: the curve is found elsewhere
(`specmon.sweep.curves` reads the stored sweeps) and given through a `CurveFinder`; only measured concurrencies
are named, never a figure between them."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from specmon.live.model import Alert, LiveSnapshot
from specmon.serving.spec import SpecSettings
from specmon.units import elapsed

NO_CURVE = "no measured curve for this configuration"


@dataclass(frozen=True)
class ServingConfig:
    """What a measured curve is looked up by: the model and the speculative settings the server runs (as its
    /server_info says them)."""

    model_path: str | None
    algorithm: str | None
    steps: int
    topk: int
    draft_tokens: int

    @classmethod
    def from_spec(cls, spec: SpecSettings) -> ServingConfig | None:
        """The configuration of a speculating server; None without speculation or with a setting unknown."""
        if not spec.enabled or None in (spec.num_steps, spec.eagle_topk, spec.num_draft_tokens):
            return None
        return cls(spec.model_path, spec.algorithm, spec.num_steps or 0, spec.eagle_topk or 0,
                   spec.num_draft_tokens or 0)


@dataclass(frozen=True)
class CurvePoint:
    """A configuration's measured speedup over no speculation at one concurrency (the CI: its 95% bootstrap)."""

    concurrency: int
    speedup: float
    ci: tuple[float, float] | None = None

    @property
    def verdict(self) -> str:
        """"pays" or "loses" where the CI (else the figure) lies on one side of 1, "unclear" where it spans 1."""
        low, high = self.ci if self.ci is not None else (self.speedup, self.speedup)
        return "pays" if low > 1 else "loses" if high < 1 else "unclear"

    def text(self) -> str:
        return f"{self.speedup:.2f}× at {self.concurrency}"

    def to_json(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "speedup": round(self.speedup, 3),
                "ci": [round(v, 3) for v in self.ci] if self.ci else None}


@dataclass(frozen=True)
class MeasuredCurve:
    """One configuration's points from the newest stored grid sweep that measured it, with the sweep's id, when
    it was measured, and its crossover (the lowest measured concurrency from which it is slower, None if none)."""

    sweep_id: str
    measured_at: float
    points: tuple[CurvePoint, ...]
    crossover: int | None = None


CurveFinder = Callable[[ServingConfig], "MeasuredCurve | None"]
"""The stored curve of a configuration (None: none measured)."""


def ago_text(seconds: float) -> str:
    """"40 s ago", "12 min ago", "2 h ago", "3 days ago"."""
    return f"{elapsed(seconds)} ago"


@dataclass(frozen=True)
class SpeculationPays:
    """The curve read at the running count: the measured point there, or the measured neighbours around it
    (`below`, `above`; one of them alone outside the measured range), and a verdict: "pays", "loses",
    "unclear" (the points disagree or their CI spans 1), "unknown" (no running count) or "no curve"."""

    verdict: str
    running: int | None = None
    below: CurvePoint | None = None
    above: CurvePoint | None = None
    sweep_id: str | None = None
    age_s: float | None = None
    crossover: int | None = None

    @property
    def measured(self) -> tuple[CurvePoint, ...]:
        """The points read: one at a measured concurrency, two around the running count, one beyond the range."""
        if self.below is not None and self.above is not None and self.below == self.above:
            return (self.below,)
        return tuple(p for p in (self.below, self.above) if p is not None)

    def figures_text(self) -> str:
        points = self.measured
        if self.verdict == "unknown":
            return "at a running count not known now"
        if not points:
            return NO_CURVE
        if len(points) == 1 and self.running == points[0].concurrency:
            return f"{points[0].speedup:.2f}× at {self.running} running"
        where = ("lowest" if self.below is None else "highest") if len(points) == 1 else ""
        measured = ", ".join(p.text() for p in points) + (f" ({where} measured)" if where else " (measured)")
        running = "running unknown" if self.running is None else f"{self.running} running"
        return f"{measured}; {running}"

    def line(self, width: int | None = None) -> str:
        """One line: "speculation 1.40× at 6 running (sweep ID, 2 h ago)"; within ``width`` columns the sweep's
        id is left out where it does not fit ("(sweep 2 h ago)")."""
        if self.verdict == "no curve":
            return f"speculation: {NO_CURVE}"
        age = ago_text(self.age_s) if self.age_s is not None else None
        full = f"speculation {self.figures_text()} (sweep {self.sweep_id}{f', {age}' if age else ''})"
        if width is None or len(full) <= width or age is None:
            return full
        return f"speculation {self.figures_text()} (sweep {age})"

    def alert(self) -> Alert | None:
        """A warning once the running count has reached the configuration's measured crossover."""
        if self.crossover is None or self.running is None or self.running < self.crossover:
            return None
        return Alert("spec_loses", "warning", f"speculation loses from {self.crossover} running (measured, sweep "
                                              f"{self.sweep_id}); now {self.running}")

    def to_json(self) -> dict[str, Any]:
        """The `speculation_pays` object of `monitor --once --json`."""
        one = self.measured[0] if len(self.measured) == 1 else None
        return {
            "verdict": self.verdict,
            "running": self.running,
            "speedup": round(one.speedup, 3) if one is not None else None,
            "ci": one.to_json()["ci"] if one is not None else None,
            "concurrency_measured": one.concurrency if one is not None else None,
            "measured": [p.to_json() for p in self.measured],
            "sweep_id": self.sweep_id,
            "age_s": round(self.age_s, 1) if self.age_s is not None else None,
            "crossover": self.crossover,
            "text": self.line(),
        }


def read_curve(curve: MeasuredCurve | None, running: float | None, now: float) -> SpeculationPays:
    """``curve`` at ``running`` requests: the measured point there, else its measured neighbours (never a figure
    interpolated between them)."""
    if curve is None or not curve.points:
        return SpeculationPays("no curve")
    count = int(round(running)) if running is not None and math.isfinite(running) and running >= 0 else None
    facts: dict[str, Any] = {"sweep_id": curve.sweep_id, "age_s": now - curve.measured_at,
                             "crossover": curve.crossover, "running": count}
    points = sorted(curve.points, key=lambda p: p.concurrency)
    if count is None:
        return SpeculationPays("unknown", **facts)
    below = next((p for p in reversed(points) if p.concurrency <= count), None)
    above = next((p for p in points if p.concurrency >= count), None)
    verdicts = {p.verdict for p in (below, above) if p is not None}
    return SpeculationPays(verdicts.pop() if len(verdicts) == 1 else "unclear", below=below, above=above, **facts)


def fleet_reading(curves: CurveFinder | None, config: ServingConfig | None, algorithm: str | None,
                  draft_tokens: int | None, running: float | None, now: float) -> SpeculationPays | None:
    """A fleet row's reading: ``config`` is what the server's last benchmark ran (specmon's records); read only
    where what Prometheus or the target's labels say it runs now (``algorithm``, ``draft_tokens``) agrees."""
    if curves is None or config is None:
        return None
    if draft_tokens and draft_tokens != config.draft_tokens:
        return None
    if algorithm and algorithm.upper() != (config.algorithm or "").upper():
        return None
    return read_curve(curves(config), running, now)


NOT_READ = ("exited", "unreachable", "starting", "waiting", "unreadable")
"""Snapshot states whose running count is not the server's now: no curve is read."""


def with_speculation_pays(snapshot: LiveSnapshot, spec: SpecSettings | None, curves: CurveFinder,
                          now: float) -> LiveSnapshot:
    """``snapshot`` with the serving configuration's curve read at its running count (and the crossover's alert);
    as it was for a server without speculation, whose settings are not known, or that is not serving now."""
    config = ServingConfig.from_spec(spec) if spec is not None else None
    if config is None or snapshot.state in NOT_READ:
        return snapshot
    reading = read_curve(curves(config), snapshot.running, now)
    alert = reading.alert()
    return replace(snapshot, speculation_pays=reading,
                   alerts=snapshot.alerts + ((alert,) if alert is not None else ()))
