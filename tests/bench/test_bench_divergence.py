"""Greedy outputs against the baseline run's, on the real sweep of the trained pair (real SGLang 0.5.16 on the H200,
tests/fixtures/real-sglang-0.5.16/trained-20261202): speculation changed the text of most prompts at a healthy
acceptance, so that is reported as information; the "diverged" flag is kept for what points at a broken draft."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from specmon.bench.compare import EARLY_SHARE, compare
from specmon.bench.report import run_flags, symptoms
from specmon.bench.results import ResultStore

RESULTS = Path(__file__).parents[1] / "fixtures" / "real-sglang-0.5.16" / "trained-20261202" / "sweep" / "results"


def runs() -> dict[str, list]:
    out: dict[str, list] = {}
    for run in ResultStore(RESULTS).load_all(lambda message: None):
        out.setdefault(run.preset, []).append(run)
    return out


@pytest.mark.parametrize("preset", ["trained-standalone-16", "trained-standalone-10", "trained-standalone-5"])
def test_the_real_speculative_runs_are_not_flagged_and_say_how_far_they_agree(preset):
    real = runs()
    baseline, run = real["trained-plain"][0], real[preset][0]
    comparison = compare(run, baseline)
    assert len(comparison.diverged) >= 20  # the old rule flagged every one of these runs
    assert comparison.alarm is None and "diverged" not in run_flags(run, comparison)
    assert "diverged" not in symptoms(run, comparison)
    agreed = comparison.agreement
    assert agreed["compared"] == 24 and agreed["identical"] <= 3 and agreed["expected"]
    assert 0 < agreed["min_share"] < EARLY_SHARE < agreed["median_share"] < 1  # some part at once, most later
    line = comparison.describe_agreement()
    assert line.startswith(f"outputs: {agreed['identical']} of 24 identical to the baseline run's")
    assert "expected, not an error" in line


def test_the_two_real_plain_runs_agree_word_for_word():
    first, second = runs()["trained-plain"]
    comparison = compare(second, first)
    assert comparison.agreement["identical"] == 24 and comparison.alarm is None


def test_the_results_command_carries_the_agreement_and_no_false_flag():
    done = subprocess.run([sys.executable, "-m", "specmon", "results", "--dir", str(RESULTS), "--format", "json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for run in json.loads(done.stdout):
        assert "diverged" not in run["flags"], (run["preset"], run["flags"])
        if run["preset"].startswith("trained-standalone"):
            assert run["comparison"]["agreement"]["compared"] == 24


def _broken(run, accept: float, texts: str | None = None, repeat: int = 0):
    """The run as a broken draft would have left it: its acceptance, texts that part at once, repetition."""
    broken = copy.deepcopy(run)
    broken.summary.accept_length.token_weighted = accept
    for index, request in enumerate(broken.measured):
        if texts is not None:
            request.output_text = f"{texts} {index} " * 40
        if index < repeat:
            request.flags = [*request.flags, "repetition"]
    return broken


def test_texts_that_part_at_once_while_the_draft_is_never_accepted_are_flagged():
    real = runs()
    baseline, run = real["trained-plain"][0], real["trained-standalone-16"][0]
    comparison = compare(_broken(run, 1.01, texts="zzz"), baseline)
    assert comparison.flags == ["diverged"] and "acceptance is 1.01" in comparison.alarm
    assert "specmon doctor" in comparison.alarm  # what to do
    healthy = compare(_broken(run, 1.78, texts="zzz"), baseline)
    assert healthy.alarm is None  # at a real acceptance, other text is numerics: information
    slow_but_close = compare(_broken(run, 1.01), baseline)
    assert slow_but_close.alarm is None  # the real texts part later than at once: accept-near-1 says the rest


def test_outputs_that_degenerate_where_the_baselines_do_not_are_flagged_at_any_acceptance():
    real = runs()
    baseline, run = real["trained-plain"][0], real["trained-standalone-16"][0]
    comparison = compare(_broken(run, 1.78, repeat=2), baseline)
    assert comparison.flags == ["diverged"] and "degenerate into repetition" in comparison.alarm
    assert symptoms(_broken(run, 1.78, repeat=2), comparison)["diverged"] == comparison.alarm


def test_the_same_settings_that_part_are_flagged():
    first, second = runs()["trained-plain"]
    changed = copy.deepcopy(second)
    changed.measured[3].output_text = changed.measured[3].output_text[:40] + " something else entirely now here"
    comparison = compare(changed, first)
    assert comparison.flags == ["diverged"] and "with the same speculative settings" in comparison.alarm
