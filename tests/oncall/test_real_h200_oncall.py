"""What a real SGLang 0.5.16 on the H200 did under specmon's preflight, on-call commands, live view and sweep
(scripts/h200-oncall.sh, 2026-12-01; tests/fixtures/real-sglang-0.5.16/oncall-20261201), replayed here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

RUN = Path(__file__).parents[1] / "fixtures" / "real-sglang-0.5.16" / "oncall-20261201"
LOGS = RUN / "logs"


def load(name: str):
    return json.loads((RUN / name).read_text())


def step_seconds(name: str) -> float:
    """A step's wall time from the run's own record (`[15:18:58] preflight-h200-typo: exit 1 in 1.10 s`)."""
    for line in (RUN / "calls-steps.txt").read_text().splitlines():
        match = re.search(rf"\] {re.escape(name)}: exit \d+ in ([\d.]+) s", line)
        if match:
            return float(match.group(1))
    raise AssertionError(f"no step {name}")


def log_summary(log: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "specmon", "log-summary", "--json", str(log)], capture_output=True, text=True
    )
    return json.loads(done.stdout)


@pytest.mark.parametrize(
    ("preset", "code", "log", "kind"),
    [
        ("h200-typo", "unknown-flag", "20261201-151900-h200-typo.log", "unrecognized_arguments"),
        ("h200-nosteps", "spec-args-incomplete", "20261201-151917-h200-nosteps.log", "invalid_server_args"),
    ],
)
def test_the_preflight_predicted_each_real_failure_in_a_second(preset, code, log, kind) -> None:
    report = load(f"preflight-{preset}.json")
    assert report["sglang"]["source"] == "package source" and report["sglang"]["version"] == "0.5.16"
    assert not report["ok"] and code in {p["code"] for p in report["problems"] if p["severity"] == "error"}
    real = load(f"real-{preset}.json")
    assert real["state"] == "failed"
    assert log_summary(LOGS / log)["error"]["kind"] == kind
    assert step_seconds(f"preflight-{preset}") < 2.0 < step_seconds(f"real-{preset}")


def test_the_eagle_algorithm_with_an_eagle3_draft_serves_and_only_the_preflight_says_so() -> None:
    report = load("preflight-h200-eagle-mismatch.json")
    assert [p["code"] for p in report["problems"] if p["severity"] == "error"] == ["algorithm-draft-mismatch"]
    assert load("mismatch-start.json")["state"] == "ready"
    summary = log_summary(LOGS / "20261201-152848-h200-eagle-mismatch.log")
    assert summary["speculative_algorithm"] == "EAGLE" and summary["error"] is None
    checks = {c["name"]: c for c in load("mismatch-check.json")["checks"]}
    assert checks["speculation"]["detail"].startswith("EAGLE,") and checks["generation"]["level"] == "ok"
    for preset in ("h200-plain", "h200-eagle3"):
        assert load(f"preflight-{preset}.json")["ok"]


def _counter(text: str, name: str) -> float:
    """A counter summed over its series, read with prometheus_client alone (an independent check)."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name + "_total"
    )


def test_monitor_once_under_a_concurrent_benchmark_agrees_with_the_servers_metrics() -> None:
    live = load("monitor-once.json")
    assert (live["state"], live["source"], live["running"]) == ("serving", "metrics", 4)
    before = (RUN / "metrics-under-load-before.txt").read_text()
    after = (RUN / "metrics-under-load-after.txt").read_text()
    generated = _counter(after, "sglang:generation_tokens") - _counter(before, "sglang:generation_tokens")
    verified = _counter(after, "sglang:spec_verify_calls") - _counter(before, "sglang:spec_verify_calls")
    assert live["accept_length"] == pytest.approx(generated / verified, rel=0.01)
    assert live["effective"]["num_draft_tokens"] == live["effective"]["metrics_num_draft_tokens"] == 4
    assert any(alert["kind"] == "accept_low" for alert in live["alerts"])  # the random draft accepts ~1 token


def test_switching_a_real_server_reports_each_step_and_compares_with_the_last_result() -> None:
    names = ["stopping", "gpus free", "port free", "preflight", "launching", "startup", "sanity"]
    to_eagle, to_plain = load("switch-eagle3.json"), load("switch-plain.json")
    for report in (to_eagle, to_plain):
        assert report["state"] == "ready" and [s["name"] for s in report["steps"]] == names
        assert all(s["took_s"] is not None and s["took_s"] >= 0 for s in report["steps"])
    assert to_eagle["effective"]["algorithm"] == "EAGLE3" and to_eagle["effective"]["num_draft_tokens"] == 4
    assert to_plain["previous"] is not None and to_plain["change_pct"]["decode_tok_s"] is not None
    assert load("stop.json")["port_free"] and not load("stop.json")["leftovers"]
    servers = load("ps-plain.json")["servers"]
    assert [s["preset"] for s in servers if s["alive"] and s["launched_by_specmon"]] == ["h200-plain"]


def test_a_real_sweep_measures_predicts_and_flags_the_drift() -> None:
    report = load("sweep.json")
    rows = report["presets"]
    assert [r["preset"] for r in rows] == ["h200-plain", "h200-eagle3", "h200-eagle3-t2", "h200-plain"]
    assert all(r["state"] == "measured" and r["startup_s"] > r["measure_s"] for r in rows)
    t2 = rows[2]
    assert t2["predicted_accept_length"] == pytest.approx(t2["accept_length"], rel=0.05)
    assert report["baseline_drift_pct"] is not None
    assert report["recommended"] == "h200-plain"  # a random draft only slows the tiny model down
    assert report["left_serving"] is None
