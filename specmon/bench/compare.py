"""Comparing runs with a baseline: paired speedup per prompt and output divergence (greedy outputs must match)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specmon.bench.model import BenchResult
from specmon.bench.stats import paired_speedup

DIVERGENCE_TOLERANCE_WORDS = 4


@dataclass
class Comparison:
    """One run against the baseline run: `speedup` (paired_speedup's dict or None) and diverged prompts."""

    run_id: str
    baseline_run_id: str
    speedup: dict[str, Any] | None
    prompts_compared: int = 0
    diverged: list[str] = field(default_factory=list)
    unlike: list[str] = field(default_factory=list)
    """What differs from the baseline run's settings ("concurrency", "prompts", "model", ...): a speedup across
    those compares more than speculation."""

    @property
    def flags(self) -> list[str]:
        flags = ["diverged"] if self.diverged else []
        if self.unlike:
            flags.append("unlike-baseline:" + ",".join(self.unlike))
        return flags

    def to_json(self) -> dict[str, Any]:
        return {
            "baseline_run_id": self.baseline_run_id,
            "speedup": self.speedup,
            "prompts_compared": self.prompts_compared,
            "diverged": self.diverged,
            "unlike": self.unlike,
            "flags": self.flags,
        }


COMPARED_SETTINGS = (("concurrency", "concurrency"), ("max_new_tokens", "max-new-tokens"),
                     ("temperature", "temperature"), ("ignore_eos", "eos"), ("prompt_set_hash", "prompts"))
"""The benchmark settings two runs must share for their speedup to be speculation's alone (key, name)."""


def unlike_settings(result: BenchResult, baseline: BenchResult) -> list[str]:
    """The names of the settings (and the served model) in which `result` differs from `baseline`."""
    if result.run_id == baseline.run_id:
        return []
    out = [name for key, name in COMPARED_SETTINGS
           if key in result.settings and key in baseline.settings and result.settings[key] != baseline.settings[key]]
    ours, theirs = (result.server or {}).get("model_path"), (baseline.server or {}).get("model_path")
    if ours and theirs and ours != theirs:
        out.append("model")
    return out


def is_speculative(result: BenchResult) -> bool:
    spec = (result.server or {}).get("speculative") or {}
    return bool(spec.get("algorithm"))


def pick_baseline(results: Sequence[BenchResult], name: str | None = None) -> BenchResult | None:
    """The baseline: the latest run of preset `name`, else the latest run without speculation, else None."""
    if name:
        named = [r for r in results if r.preset == name]
        return named[-1] if named else None
    plain = [r for r in results if not is_speculative(r) and r.measured]
    return plain[-1] if plain else None


def _per_prompt(result: BenchResult) -> tuple[dict[str, float], dict[str, str]]:
    speeds: dict[str, list[float]] = defaultdict(list)
    outputs: dict[str, str] = {}
    for request in result.measured:
        if request.ok and request.decode_tok_s:
            speeds[request.prompt_id].append(request.decode_tok_s)
            outputs.setdefault(request.prompt_id, request.output_text)
    return {p: statistics.median(v) for p, v in speeds.items()}, outputs


def words_after_common_prefix(a: str, b: str) -> int:
    """How many words of the longer text follow the longest common word prefix of the two."""
    wa, wb = a.split(), b.split()
    common = 0
    for x, y in zip(wa, wb, strict=False):
        if x != y:
            break
        common += 1
    return max(len(wa), len(wb)) - common


def compare(result: BenchResult, baseline: BenchResult, seed: int = 0) -> Comparison:
    """`result` against `baseline`, paired over the prompts both ran (none when the prompt sets differ)."""
    ours, theirs = result.settings.get("prompt_set_hash"), baseline.settings.get("prompt_set_hash")
    if ours and theirs and ours != theirs:
        return Comparison(run_id=result.run_id, baseline_run_id=baseline.run_id, speedup=None,
                          unlike=unlike_settings(result, baseline))
    speeds, outputs = _per_prompt(result)
    base_speeds, base_outputs = _per_prompt(baseline)
    shared = [p for p in speeds if p in base_speeds]
    diverged = [
        p
        for p in shared
        if words_after_common_prefix(outputs[p], base_outputs[p]) > DIVERGENCE_TOLERANCE_WORDS
    ]
    same_settings = (
        result.settings.get("temperature", 0) == 0 and baseline.settings.get("temperature", 0) == 0
        and result.settings.get("max_new_tokens") == baseline.settings.get("max_new_tokens")
    )
    return Comparison(
        run_id=result.run_id,
        baseline_run_id=baseline.run_id,
        speedup=paired_speedup([(speeds[p], base_speeds[p]) for p in shared], seed=seed),
        prompts_compared=len(shared),
        diverged=diverged if same_settings and result.run_id != baseline.run_id else [],
        unlike=unlike_settings(result, baseline),
    )


def compare_all(results: Sequence[BenchResult], baseline_name: str | None = None) -> dict[str, Comparison]:
    """A Comparison for every run (keyed by run id) against the picked baseline; empty without one."""
    baseline = pick_baseline(results, baseline_name)
    if baseline is None:
        return {}
    return {r.run_id: compare(r, baseline) for r in results if r.measured}
