"""One rule, in one place (`compare.baseline_for`), for the run a speedup is against: the sweep, `specmon results`,
`specmon bench` and the app's Benchmark pane give each run the same baseline and the same speedup, whatever
else is stored (a drifted last baseline, a later plain run with other settings, on another server or of another
model: the most alike first, what differs flagged), and the commands say which run it was (issue: 0.98x in the
sweep, 0.77x in `results`)."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from specmon.bench.cli import against_stored_baseline
from specmon.bench.compare import BASELINE_RULE, baseline_for, compare_all
from specmon.bench.model import BenchResult
from specmon.bench.results import ResultStore
from specmon.bench.results_text import format_csv, format_markdown, format_table
from specmon.sweep.report import PresetOutcome, build_report

BENCH = Path(__file__).parents[1] / "fixtures" / "bench"
URL = "http://127.0.0.1:30000"


def fixture_run(preset: str) -> BenchResult:
    store = ResultStore(BENCH)
    return next(r for r in (store.load(i) for i in store.run_ids()) if r.preset == preset)


def copy_of(run: BenchResult, run_id: str, started: float, url: str = URL, slower: float = 1.0,
            **settings) -> BenchResult:
    out = copy.deepcopy(run)
    out.run_id, out.started_at, out.url = run_id, started, url
    out.settings = msgspec.structs.replace(out.settings, **settings)
    for request in out.requests:
        if request.decode_tok_s:
            request.decode_tok_s *= slower
    return out


@pytest.fixture
def runs() -> dict[str, BenchResult]:
    base, spec = fixture_run("baseline"), fixture_run("eagle3-10")
    other_model = copy_of(base, "r7-other-model", 7.0)
    other_model.server.model_path = "another/model"
    return {
        "first": copy_of(base, "r1-first-baseline", 1.0),
        "spec": copy_of(spec, "r2-spec", 2.0),
        "last": copy_of(base, "r3-last-baseline", 3.0, slower=0.75),  # the baseline drifted 25% during the sweep
        "concurrency": copy_of(base, "r4-other-settings", 4.0, slower=0.5, concurrency=1),
        "elsewhere": copy_of(base, "r5-other-server", 5.0, url="http://127.0.0.1:31000", slower=0.6),
        "other_model": other_model,
    }


def test_the_sweep_results_bench_and_the_app_pick_the_same_baseline_and_speedup(runs, tmp_path) -> None:
    first, spec, last = runs["first"], runs["spec"], runs["last"]
    sweep = build_report("s", [PresetOutcome("baseline", None, "measured", first, baseline=True),
                               PresetOutcome("eagle3-10", 10, "measured", spec),
                               PresetOutcome("baseline", None, "measured", last, baseline=True)])
    (row,) = [r for r in sweep.rows if r["preset"] == "eagle3-10"]
    assert row["speedup_baseline_run_id"] == first.run_id

    everything = list(runs.values())
    results = compare_all(everything)[spec.run_id]  # `specmon results` and the app's Benchmark pane
    assert results.baseline_run_id == first.run_id
    assert results.speedup["geomean"] == pytest.approx(row["speedup"])

    store = ResultStore(tmp_path)
    for run in everything:
        store.start_run(run)
        for request in run.requests:
            store.add_request(run.run_id, request)
        store.finish_run(run)
    bench = against_stored_baseline(spec, store)  # `specmon bench` right after its run
    assert bench is not None and bench.baseline_run_id == first.run_id
    assert bench.speedup["geomean"] == pytest.approx(row["speedup"])


def test_the_most_alike_baseline_then_the_latest_before_else_the_earliest_after(runs) -> None:
    spec = runs["spec"]
    everything = list(runs.values())
    assert baseline_for(spec, everything) is runs["first"]
    later = [runs["last"], runs["concurrency"], runs["elsewhere"], runs["other_model"]]
    assert baseline_for(spec, later) is runs["last"], "none before: the earliest after"
    # the same model first, then the same server, then the fewest settings that differ; the rest is flagged
    for pool, expected, unlike, same_server in (
        ([runs["elsewhere"], runs["concurrency"]], "concurrency", ["concurrency"], True),
        ([runs["elsewhere"], runs["other_model"]], "elsewhere", [], False),
        ([runs["other_model"]], "other_model", ["model"], True),
    ):
        chosen = baseline_for(spec, pool)
        assert chosen is runs[expected]
        comparison = compare_all([spec, *pool])[spec.run_id]
        assert (comparison.unlike, comparison.same_server) == (unlike, same_server)
    assert baseline_for(spec, [spec]) is None, "no run without speculation"
    assert baseline_for(runs["first"], everything) is runs["first"], "a baseline run is its own"
    assert baseline_for(runs["first"], everything, preset="eagle3-10") is spec, "a named preset's runs"


def test_every_format_says_which_run_a_speedup_is_against(runs) -> None:
    everything = list(runs.values())
    for text in (format_table(everything), format_markdown(everything)):
        assert f"speedup against run {runs['first'].run_id} (baseline, " in text and "r2-spec" in text, text
        assert BASELINE_RULE in text
    assert f",{runs['first'].run_id}," in format_csv(everything)
    lonely = format_table([runs["spec"]])
    assert "no baseline run for r2-spec" in lonely and "×" not in lonely, lonely


def test_results_json_is_the_format_json_output(runs, tmp_path) -> None:
    store = ResultStore(tmp_path)
    for run in (runs["first"], runs["spec"]):
        store.start_run(run)
        for request in run.requests:
            store.add_request(run.run_id, request)
        store.finish_run(run)

    def results(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "specmon", "results", "--dir", str(tmp_path), *args],
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)

    as_json, as_format = results("--json"), results("--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    assert as_json.stdout == as_format.stdout and '"baseline_run_id": "r1-first-baseline"' in as_json.stdout
