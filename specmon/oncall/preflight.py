"""The preflight before an on-call launch, through one function: `specmon.preflight`'s report as an
outcome the commands print (errors stop the launch; warnings are said)."""

from __future__ import annotations

from collections.abc import Collection
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


def preflight(preset: Any, *, port: int | None = None, replacing: Collection[int] = ()) -> PreflightOutcome:
    """Run `specmon.preflight.run_preflight` on the preset (``replacing``: the pids of the server it replaces)."""
    from specmon.preflight import run_preflight

    try:
        report = run_preflight(preset, port=port, replacing=replacing)
    except Exception as exc:  # the preflight is another part: its failure must not become a traceback here
        return PreflightOutcome(False, [f"the preflight itself failed: {type(exc).__name__}: {exc}"])
    problems = [p.one_line() for p in report.problems]
    return PreflightOutcome(report.ok, problems, report=report.to_json())
