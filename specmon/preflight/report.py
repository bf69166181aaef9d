"""What a preflight found: problems (errors stop a launch, warnings do not) and the effective settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Problem:
    """One finding: `code` is stable (for scripts), `message` says what is wrong, `hint` what to do."""

    severity: Severity
    code: str
    message: str
    hint: str | None = None
    flag: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"severity": self.severity, "code": self.code, "message": self.message, "hint": self.hint,
                "flag": self.flag}

    def one_line(self) -> str:
        """The problem on one line, what to do first: a long message (a list of checkpoint keys) never hides
        the fix at its end."""
        return f"{self.severity} {self.code}: " + (f"{self.hint} — " if self.hint else "") + self.message


@dataclass
class SGLangInfo:
    """Which SGLang the launcher runs, and where its facts came from."""

    version: str | None
    python: str | None
    source: str  # "package source" or "shipped table"
    package_dir: str | None = None
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "python": self.python, "source": self.source,
                "package_dir": self.package_dir, "note": self.note}


@dataclass
class PreflightReport:
    """Everything one preflight of a preset found; `ok` is False when any problem is an error."""

    preset: str
    sglang: SGLangInfo
    effective: dict[str, Any] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was checked, in words (text output only)
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.errors

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    def add(self, severity: Severity, code: str, message: str, hint: str | None = None,
            flag: str | None = None) -> None:
        self.problems.append(Problem(severity, code, message, hint, flag))

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "preset": self.preset, "sglang": self.sglang.to_json(),
                "effective": self.effective, "problems": [p.to_json() for p in self.problems],
                "elapsed_s": round(self.elapsed_s, 3)}

    def format_text(self) -> str:
        """The report for a person: the SGLang used, the effective settings, then each problem."""
        info = self.sglang
        lines = [f"preflight of preset {self.preset}: {'OK' if self.ok else 'FAILED'}",
                 f"  SGLang {info.version or '?'} ({info.source}) run by {info.python or '?'}"]
        if info.note:
            lines.append(f"  note: {info.note}")
        if self.effective:
            shown = ", ".join(f"{k} {v}" for k, v in self.effective.items())
            lines.append(f"  effective: {shown}")
        lines.extend(f"  checked: {note}" for note in self.notes)
        for problem in self.problems:
            where = f" [{problem.flag}]" if problem.flag else ""
            lines.append(f"{problem.severity.upper()} {problem.code}{where}: {problem.message}")
            if problem.hint:
                lines.append(f"    hint: {problem.hint}")
        if not self.problems:
            lines.append("no problems found")
        lines.append(f"({self.elapsed_s:.2f} s)")
        return "\n".join(lines)
