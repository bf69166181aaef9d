"""The preflight before a launch, through one function: `specmon.tui.preflight` is imported lazily, and
skipped with a note while that package does not exist (it lands separately)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class PreflightOutcome:
    """What the preflight said: ok, the problems in words, its JSON, or why it did not run."""

    ok: bool
    problems: list[str] = field(default_factory=list)
    skipped: str | None = None
    report: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "problems": self.problems, "skipped": self.skipped, "report": self.report}


def preflight(preset: Any, *, port: int | None = None) -> PreflightOutcome:
    """Run `specmon.tui.preflight.run_preflight` on the preset, or skip with a note when it is not installed."""
    try:
        from specmon.tui.preflight import run_preflight
    except ImportError:
        return PreflightOutcome(True, skipped="the preflight is not available in this specmon (skipped)")
    try:
        report = run_preflight(preset, port=port)
    except Exception as exc:  # the preflight is another part: its failure must not become a traceback here
        return PreflightOutcome(False, [f"the preflight itself failed: {type(exc).__name__}: {exc}"])
    problems = [str(p) for p in getattr(report, "problems", [])]
    to_json = getattr(report, "to_json", None)
    return PreflightOutcome(
        bool(getattr(report, "ok", not problems)), problems, report=to_json() if to_json else None
    )
