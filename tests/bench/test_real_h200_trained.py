"""What real SGLang did with the trained target/draft pair (real, bursty acceptance) on the H200, replayed here:
0.5.16 swept STANDALONE at 16, 10 and 5 draft tokens and none with the preflight on, and 0.5.17 served the pair
for real (scripts/h200-trained.sh, 2026-12-02; tests/fixtures/real-sglang-0.5.1{6,7}/trained-20261202)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parents[1] / "fixtures"
RUN16 = FIXTURES / "real-sglang-0.5.16" / "trained-20261202"
RUN17 = FIXTURES / "real-sglang-0.5.17" / "trained-20261202"
RESULTS = RUN16 / "sweep" / "results"
FROM_16 = "20261202-062846-7f88"  # the 16-token run of the sweep


def specmon(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specmon", *args], capture_output=True, text=True, timeout=120)


def stored_runs() -> list[dict]:
    done = specmon("results", "--dir", str(RESULTS), "--format", "json")
    assert done.returncode == 0, done.stderr
    assert "skip" not in done.stderr.lower(), done.stderr  # every real record is read: none dropped
    return json.loads(done.stdout)


def test_every_stored_request_of_the_real_sweep_is_read():
    runs = stored_runs()
    assert [r["preset"] for r in runs] == [
        "trained-plain", "trained-standalone-16", "trained-standalone-10", "trained-standalone-5", "trained-plain",
    ]
    for run in runs:
        measured = [r for r in run["requests"] if not r.get("warmup")]
        assert len(measured) == 24, run["preset"]
        assert not run["skipped_records"], run["skipped_records"]
    prompts = [r["prompt_tokens"] for r in runs[1]["requests"] if not r.get("warmup")]
    assert max(prompts) > 320  # the prompts the results reader used to drop (max_new_tokens + 64) are here


def test_the_prediction_from_the_16_token_run_lands_within_2_percent_of_what_sglang_measured():
    measured = {}
    for run in stored_runs():
        tokens = (run["server"].get("speculative") or {}).get("num_draft_tokens")
        if tokens:
            measured[tokens] = run["summary"]["accept_length"]["token_weighted"]
    assert set(measured) == {16, 10, 5}
    done = specmon("predict", FROM_16, "--dir", str(RESULTS), "--draft-tokens", "10,5", "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert (answer["from_draft_tokens"], answer["requests_used"], answer["requests_skipped"]) == (16, 24, 0)
    for prediction in answer["predictions"]:
        tokens = prediction["draft_tokens"]
        error = prediction["accept_length"] / measured[tokens] - 1
        assert abs(error) < 0.02, (tokens, prediction["accept_length"], measured[tokens])
        low, high = prediction["ci"]
        assert low < measured[tokens] < high


def test_the_sweep_on_the_h200_measured_every_preset_and_its_prediction_agrees():
    sweep = json.loads((RUN16 / "sweep" / "sweep.out").read_text())
    states = {p["preset"]: p["state"] for p in sweep["presets"]}
    assert set(states.values()) == {"measured"}
    by_tokens = {p["draft_tokens"]: p for p in sweep["presets"] if p["draft_tokens"]}
    for tokens in (10, 5):
        predicted, accepted = by_tokens[tokens]["predicted_accept_length"], by_tokens[tokens]["accept_length"]
        assert abs(predicted / accepted - 1) < 0.02, tokens
    assert sweep["recommended"] == "trained-plain"  # this tiny target decodes faster than any draft helps


@pytest.mark.parametrize("preset", ["trained-standalone-16", "trained-standalone-10", "trained-standalone-5"])
def test_the_standalone_presets_passed_the_preflight_against_the_real_sglang(preset):
    for run in (RUN16, RUN17):
        check = json.loads((run / "preflight" / f"check-{preset}.out").read_text())
        assert check["ok"] and not [p for p in check["problems"] if p["severity"] == "error"], check["problems"]
        assert check["effective"]["speculative-algorithm"] == "STANDALONE"


@pytest.mark.parametrize(("run", "version"), [(RUN16, "0.5.16"), (RUN17, "0.5.17")])
def test_the_real_startup_logs_are_read_with_every_phase_and_capture(run, version):
    done = specmon("log-summary", "--json", str(run / "api" / "server.log"))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["state"] == "ready" and summary["speculative_algorithm"] == "STANDALONE"
    assert all(phase["status"] == "done" for phase in summary["phases"])
    assert {c["graph"] for c in summary["captures"]} >= {"target", "draft", "draft_extend"}
    assert all(c["done"] == c["total"] == 8 for c in summary["captures"])
    low, _, high = summary["sglang_versions"].partition("-")
    assert low <= version <= (high or low)
    info = json.loads((run / "api" / "server-info.json").read_text())
    assert info["version"] == version


def test_0_5_17_reports_its_own_startup_timings():
    summary = json.loads(specmon("log-summary", "--json", str(RUN17 / "api" / "server.log")).stdout)
    timings = summary["sglang_timings"]
    assert timings and timings["scheduler_e2e"] == pytest.approx(78.45)
