"""What the app shows of on-call work, as pure functions: a switch's steps as they happen and its before →
after, each preset's last benchmark result, and which found server is the followed one after a restart."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from specmon.units import format_seconds

Note = tuple[str, str]
STEP_MARKS = {"running": "…", "done": "✓", "failed": "✗"}
HISTORY_RUNS = 200
"""At most this many stored benchmark runs (the newest) are read for the app's history and preset picker."""


@dataclass
class SwitchProgress:
    """A switch the app runs: each step (name, status, seconds) as it is reported, then the outcome."""

    to: str
    steps: list[tuple[str, str, float | None]] = field(default_factory=list)
    outcome: list[Note] = field(default_factory=list)
    finished: bool = False

    def step(self, name: str, status: str, took_s: float | None) -> None:
        """A step started ("running") or ended ("done", "failed"): replaces the step's running entry."""
        for i, (known, known_status, _) in enumerate(self.steps):
            if known == name and known_status == "running":
                self.steps[i] = (name, status, took_s)
                return
        self.steps.append((name, status, took_s))

    def finish(self, report: Any) -> None:
        """The switch report (`SwitchReport`) arrived: its state, before → after and alerts become notes."""
        self.finished = True
        self.outcome = outcome_notes(report)

    def notes(self) -> list[Note]:
        """One line of steps (the running one last, with an ellipsis), then the outcome's lines."""
        parts = []
        for name, status, took_s in self.steps:
            took = f" {format_seconds(took_s)}" if took_s is not None else ""
            parts.append(f"{name}{took} {STEP_MARKS.get(status, status)}")
        style = "bold red" if any(s == "failed" for _, s, _ in self.steps) else "bold cyan"
        head = f"switch → {self.to}: " + (" · ".join(parts) if parts else "starting…")
        return [(head, style), *self.outcome]


def _number(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _pct(value: float | None) -> str:
    return "" if value is None else f" ({value:+.1f}%)"


def outcome_notes(report: Any) -> list[Note]:
    """A finished switch: failed with why, or the sanity run against the preset's last result, and alerts."""
    if report.state != "ready":
        return [(f"switch failed: {report.error or 'unknown error'}", "bold red")]
    notes: list[Note] = []
    sanity = report.sanity
    if sanity is not None:
        before = report.before or {}
        change = report.change_pct or {}
        decode = (f"decode tok/s {_number(before.get('decode_tok_s'), '.1f')} → "
                  f"{_number(sanity.get('decode_tok_s'), '.1f')}{_pct(change.get('decode_tok_s'))}")
        accept = (f"acceptance {_number(before.get('accept_length'), '.2f')} → "
                  f"{_number(sanity.get('accept_length'), '.2f')}{_pct(change.get('accept_length'))}")
        if not before:
            since = "nothing served before"
        elif before.get("run_id"):
            since = f"{before.get('preset')} run {before['run_id']}"
        else:
            since = f"{before.get('preset') or 'old server'}: live figures"
        style = "bold red" if report.alerts else "bold green"
        notes.append((f"before → after: {decode} · {accept} · {since} → {report.to}", style))  # figures first
    notes.extend((f"alert: {alert}", "bold red") for alert in report.alerts)
    return notes


def last_results(results: Iterable[Any]) -> dict[str, Any]:
    """Each preset's last finished benchmark run (results in any order)."""
    last: dict[str, Any] = {}
    for result in results:
        if result.status != "finished" or not result.preset:
            continue
        if result.preset not in last or result.started_at > last[result.preset].started_at:
            last[result.preset] = result
    return last


def merged_runs(shown: Sequence[Any], more: Iterable[Any]) -> list[Any]:
    """The runs shown with ``more`` added, each run once (a run read again replaces its earlier reading: a run
    another process was writing, read once it finished), oldest first."""
    by_id = {run.run_id: run for run in shown}
    by_id.update((run.run_id, run) for run in more)
    return sorted(by_id.values(), key=lambda run: run.started_at)


def skipped_summary(results: Sequence[Any], unreadable: int = 0) -> str | None:
    """What reading the stored runs left out, in one line: unreadable runs, and records skipped in the others
    (with the reasons of the first run that lost some); None when nothing was."""
    from specmon.bench.results import skipped_note

    losing = [r for r in results if r.skipped_records]
    parts = []
    if unreadable:
        parts.append(f"{unreadable} stored run{'s' if unreadable > 1 else ''} unreadable")
    if len(losing) == 1:
        parts.append(str(skipped_note(losing[0])))
    elif losing:
        records = sum(len(r.skipped_records) for r in losing)
        parts.append(f"{records} stored records skipped in {len(losing)} runs, e.g. {skipped_note(losing[0])}")
    return "; ".join(parts) or None


def result_line(result: Any, now: float | None = None) -> str:
    """A preset's last result in one line: "312.4 tok/s · accept 3.21 · 2 h ago"."""
    decode, accept = result.summary.median_tok_s, result.summary.accept_length.token_weighted
    return f"{_number(decode, '.1f')} tok/s · accept {_number(accept, '.2f')} · {ago(result.started_at, now)}"


def ago(when: float, now: float | None = None) -> str:
    """How long ago ``when`` (epoch seconds) was, coarsely."""
    seconds = max(0.0, (time.time() if now is None else now) - when)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return "just now"


def history_for(results: Sequence[Any], preset: str | None, url: str | None, model: str | None = None) -> list[Any]:
    """The runs against this server's URL or of its preset, oldest first as given, and, when none of them is one,
    the latest finished run without speculation of the same model: the baseline their speedups need."""
    from specmon.bench.compare import is_speculative

    chosen = [r for r in results if (url is not None and r.url == url) or (preset and r.preset == preset)]
    model = model or next((m for r in reversed(chosen) if (m := r.server.model_path)), None)
    if model is None or any(not is_speculative(r) for r in chosen if r.status == "finished"):
        return chosen
    plain = [r for r in results if r.status == "finished" and r.measured and not is_speculative(r)
             and r.server.model_path == model]
    if plain:
        chosen.append(plain[-1])
        chosen.sort(key=lambda r: r.started_at)
    return chosen


def successor(servers: Sequence[Any], followed: Any) -> Any | None:
    """The alive server that took over from ``followed`` (same port, another process), or None yet. One specmon
    did not launch never takes over from one it did: nobody named it (a server the user named by pid may be
    followed across its own restarts)."""
    for server in servers:
        if server.alive and server.port == followed.port and (
            server.pid != followed.pid or server.create_time != followed.create_time
        ) and (server.launched_by_specmon or not followed.launched_by_specmon):
            return server
    return None


def sweep_candidates(presets: dict[str, Any], current: Any) -> list[Any]:
    """The presets a sweep from the app compares: those running the current preset's launcher and model."""
    if current is None:
        return []
    model = current.args.get("model-path")
    return [p for p in presets.values() if p.launcher == current.launcher and p.args.get("model-path") == model]


def sweep_choices(candidates: Sequence[Any], last: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """The sweep picker's rows: name, its last result then what it is (baseline or draft tokens: the numbers
    needed to choose come first, so a narrow screen cuts only the words after them), selected at first (every
    speculative preset and the first baseline, so the plan is valid as offered)."""
    choices = []
    baseline_taken = False
    for preset in candidates:
        spec = preset.speculative
        if spec.enabled:
            tree = f" · tree, topk {spec.eagle_topk}" if (spec.eagle_topk or 0) > 1 else ""
            about, selected = f"{spec.algorithm} · draft tokens {spec.effective_draft_tokens}{tree}", True
        else:
            about, selected, baseline_taken = "baseline (no speculation)", not baseline_taken, True
        result = result_line(last[preset.name]) if preset.name in last else "no result yet"
        about = f"{result} · {about}"
        choices.append((preset.name, about, selected))
    return choices
