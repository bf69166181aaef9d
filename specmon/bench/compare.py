"""Comparing runs with a baseline: paired speedup per prompt, and how far the greedy outputs agree.

Greedy outputs of the same settings should match; with other speculative settings they legitimately part:
real SGLang 0.5.16 gave the same text with and without speculation on 2-3 of 24 prompts of the trained pair,
some parting within their first words, at a healthy acceptance of 1.78 (bf16 numerics change with the verify
width). So across speculative settings the divergence is information (`agreement`: how many texts are identical,
and how far into the baseline's text the others agree), and the "diverged" flag is raised only where it points at
a broken draft: outputs that degenerate into repetition where the baseline's do not, or texts that part at once
while the draft is almost never accepted."""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from msgspec import UNSET

from specmon.bench.model import BenchResult
from specmon.bench.stats import paired_speedup
from specmon.serving.check import MIN_USEFUL_ACCEPT_LENGTH

DIVERGENCE_TOLERANCE_WORDS = 4
EARLY_SHARE = 0.1
"""Texts that part within the first tenth of the baseline's text part "at once"."""


@dataclass
class Comparison:
    """One run against the baseline run: `speedup` (paired_speedup's dict or None) and diverged prompts."""

    run_id: str
    baseline_run_id: str
    speedup: dict[str, Any] | None
    prompts_compared: int = 0
    diverged: list[str] = field(default_factory=list)
    """The prompts whose outputs differ from the baseline's beyond the last few words (temperature 0 only)."""
    unlike: list[str] = field(default_factory=list)
    """What differs from the baseline run's settings ("concurrency", "prompts", "model", ...): a speedup across
    those compares more than speculation."""
    same_server: bool = True
    """Whether the baseline ran against the same server (URL): another's may run on other hardware."""
    agreement: dict[str, Any] | None = None
    """How far the outputs agree (`agreement_of`), None where they are not compared (temperature above 0)."""
    alarm: str | None = None
    """Why the divergence points at a broken draft (then the run is flagged "diverged"), else None."""

    @property
    def flags(self) -> list[str]:
        flags = ["diverged"] if self.alarm else []
        if self.unlike:
            flags.append("unlike-baseline:" + ",".join(self.unlike))
        return flags

    def describe_agreement(self) -> str | None:
        """One line on how far the outputs agree with the baseline's, None where not compared."""
        agreed = self.agreement
        if not agreed or not agreed.get("compared"):
            return None
        text = f"outputs: {agreed['identical']} of {agreed['compared']} identical to the baseline run's"
        if agreed.get("median_share") is not None and agreed["identical"] < agreed["compared"]:
            text += (f"; the others agree for a median {agreed['median_share']:.0%} of its text (least "
                     f"{agreed['min_share']:.0%}) before they part")
        if agreed.get("expected"):
            text += " (other speculative settings change greedy numerics: expected, not an error)"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "baseline_run_id": self.baseline_run_id,
            "speedup": self.speedup,
            "prompts_compared": self.prompts_compared,
            "diverged": self.diverged,
            "agreement": self.agreement,
            "alarm": self.alarm,
            "unlike": self.unlike,
            "same_server": self.same_server,
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
           if UNSET not in (ours := getattr(result.settings, key), theirs := getattr(baseline.settings, key))
           and ours != theirs]
    ours, theirs = result.server.model_path, baseline.server.model_path
    if ours and theirs and ours != theirs:
        out.append("model")
    return out


def is_speculative(result: BenchResult) -> bool:
    return bool(result.server.speculative.algorithm)


BASELINE_RULE = ("each run's speedup is against its baseline run: of the runs without speculation (or of the "
                 "preset --baseline names), those most like it (the same model, then the same server, then the same "
                 "benchmark settings), the latest that started before it, else the earliest after it; settings that "
                 "still differ are flagged unlike-baseline")
"""The one rule for which run a speedup is against (`baseline_for`), as the commands say it."""


def is_baseline_run(result: BenchResult, preset: str | None = None) -> bool:
    """A run a speedup can be against: of the preset named, else one without speculation."""
    return result.preset == preset if preset else not is_speculative(result)


def baseline_for(result: BenchResult, runs: Sequence[BenchResult], preset: str | None = None) -> BenchResult | None:
    """The run ``result``'s speedup is against (`BASELINE_RULE`), the same for the sweep, `specmon results`,
    `specmon bench` and the app: among the finished runs of ``runs`` without speculation (of ``preset`` when
    named), those most like it (the same model, then the same server, then the fewest benchmark settings that
    differ), the latest that started before ``result``, else the earliest after it. A baseline run is its own;
    None without one."""
    if is_baseline_run(result, preset):
        return result
    candidates = [r for r in runs if r.status == "finished" and r.measured and is_baseline_run(r, preset)]
    if not candidates:
        return None

    def unlikeness(run: BenchResult) -> tuple[bool, bool, int]:
        unlike = unlike_settings(result, run)
        return "model" in unlike, run.url != result.url, len(unlike)

    closest = min(unlikeness(r) for r in candidates)
    candidates = [r for r in candidates if unlikeness(r) == closest]
    before = [r for r in candidates if r.started_at <= result.started_at]
    if before:
        return max(before, key=lambda r: r.started_at)
    return min(candidates, key=lambda r: r.started_at)


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


def common_share(text: str, baseline: str) -> float:
    """The share of `baseline` (characters) that `text` repeats before the first difference: 1.0 when identical."""
    if text == baseline:
        return 1.0
    common = 0
    for a, b in zip(text, baseline, strict=False):
        if a != b:
            break
        common += 1
    return common / max(1, len(baseline))


def _speculation(result: BenchResult) -> tuple:
    spec = result.server.speculative
    return (spec.algorithm, spec.draft_model_path, spec.num_steps, spec.eagle_topk, spec.num_draft_tokens)


def _repeating(result: BenchResult) -> set[str]:
    return {r.prompt_id for r in result.measured if r.ok and "repetition" in (r.flags or [])}


def agreement_of(result: BenchResult, baseline: BenchResult, outputs: dict[str, str],
                 base_outputs: dict[str, str], diverged: list[str]) -> tuple[dict[str, Any], str | None]:
    """How far `result`'s outputs agree with `baseline`'s over the prompts both ran, and the alarm (None when
    the divergence is no sign of a broken draft; see the module doc). `diverged` are the prompts that differ
    beyond the last few words."""
    shared = [p for p in outputs if p in base_outputs]
    shares = [common_share(outputs[p], base_outputs[p]) for p in shared]
    parted = sorted(share for share in shares if share < 1.0)
    expected = _speculation(result) != _speculation(baseline)
    agreement = {"compared": len(shares), "identical": len(shares) - len(parted),
                 "median_share": statistics.median(parted) if parted else None,
                 "min_share": parted[0] if parted else None, "expected": expected and bool(parted)}
    if not parted:
        return agreement, None
    garbage = sorted((_repeating(result) - _repeating(baseline)) & set(shared))
    if garbage:
        return agreement, (f"{len(garbage)} output(s) degenerate into repetition where the baseline run's do not "
                           f"({', '.join(garbage[:5])}): a broken draft or verify step, not numerics; check the "
                           "draft checkpoint (specmon doctor) and serve without speculation until it is fixed")
    accept = result.summary.accept_length.token_weighted
    at_once = statistics.median(shares) < EARLY_SHARE
    if expected and at_once and isinstance(accept, int | float) and accept < MIN_USEFUL_ACCEPT_LENGTH:
        return agreement, (f"the outputs part from the baseline's at once (median {statistics.median(shares):.0%} "
                           f"of its text agrees) while acceptance is {accept:.2f}: the draft is almost never right "
                           "and the text changed; check the draft against the target (specmon doctor --preset)")
    if not expected and diverged:
        return agreement, (f"{len(diverged)} of {len(shares)} outputs differ from the baseline run's with the same "
                           "speculative settings at temperature 0: the server's numerics changed between the runs "
                           "(another batch size, concurrency, or build)")
    return agreement, None


def compare(result: BenchResult, baseline: BenchResult, seed: int = 0) -> Comparison:
    """`result` against `baseline`, paired over the prompts both ran (none when the prompt sets differ)."""
    ours, theirs = result.settings.prompt_set_hash, baseline.settings.prompt_set_hash
    if ours and theirs and ours != theirs:
        return Comparison(run_id=result.run_id, baseline_run_id=baseline.run_id, speedup=None,
                          unlike=unlike_settings(result, baseline), same_server=result.url == baseline.url)
    speeds, outputs = _per_prompt(result)
    base_speeds, base_outputs = _per_prompt(baseline)
    shared = [p for p in speeds if p in base_speeds]
    diverged = [
        p
        for p in shared
        if words_after_common_prefix(outputs[p], base_outputs[p]) > DIVERGENCE_TOLERANCE_WORDS
    ]
    same_settings = (
        result.settings.temperature == 0 and baseline.settings.temperature == 0
        and result.settings.max_new_tokens == baseline.settings.max_new_tokens
    )
    compared = same_settings and result.run_id != baseline.run_id
    agreement, alarm = agreement_of(result, baseline, outputs, base_outputs, diverged) if compared else (None, None)
    return Comparison(
        run_id=result.run_id,
        baseline_run_id=baseline.run_id,
        speedup=paired_speedup([(speeds[p], base_speeds[p]) for p in shared], seed=seed),
        prompts_compared=len(shared),
        diverged=diverged if compared else [],
        unlike=unlike_settings(result, baseline),
        same_server=result.url == baseline.url,
        agreement=agreement,
        alarm=alarm,
    )


def compare_all(results: Sequence[BenchResult], baseline_name: str | None = None) -> dict[str, Comparison]:
    """A Comparison for every measured run (keyed by run id) against its baseline run (`baseline_for`, among
    ``results``); a run without one is left out."""
    out = {}
    for result in results:
        if result.measured and (baseline := baseline_for(result, results, baseline_name)) is not None:
            out[result.run_id] = compare(result, baseline)
    return out


def baselines_text(results: Sequence[BenchResult], comparisons: dict[str, Comparison]) -> list[str]:
    """Which baseline run each speedup shown is against, in a few lines: one per baseline with the runs against
    it, the speculative runs without one, then the rule."""
    by_id = {r.run_id: r for r in results}
    against: dict[str, list[str]] = {}
    for run_id, comparison in comparisons.items():
        if comparison.baseline_run_id != run_id:
            against.setdefault(comparison.baseline_run_id, []).append(run_id)
    lines = []
    for baseline_id, run_ids in against.items():
        base = by_id.get(baseline_id)
        who = f" ({base.preset}, {time.strftime('%Y-%m-%d %H:%M', time.localtime(base.started_at))})" if base else ""
        lines.append(f"speedup against run {baseline_id}{who}: " + ", ".join(run_ids))
    alone = [r.run_id for r in results if r.measured and is_speculative(r) and r.run_id not in comparisons]
    if alone:
        lines.append("no baseline run for " + ", ".join(alone))
    if lines:
        lines.append(f"({BASELINE_RULE})")
    return lines
