"""Benchmark statistics against known data."""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specmon.bench.model import RequestResult, Summary
from specmon.bench.stats import (
    BOOTSTRAP_RESAMPLES,
    bootstrap_ci,
    is_degenerate,
    paired_speedup,
    percentile,
    relative_mad,
)
from specmon.bench.summary import summarize

FIXTURES = Path(__file__).parents[1] / "fixtures" / "api"


def test_percentile_matches_linear_interpolation():
    values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]
    assert percentile(values, 50) == pytest.approx(5.5)
    assert percentile(values, 10) == pytest.approx(1.9)
    assert percentile(values, 90) == pytest.approx(9.1)
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 10.0
    assert percentile([7.0], 90) == 7.0
    assert percentile([3.0, 1.0, 2.0], 25) == pytest.approx(1.5)


@given(st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=50), st.floats(0, 100))
def test_percentile_stays_within_the_data_and_is_monotone(values, q):
    p = percentile(values, q)
    assert min(values) - 1e-6 <= p <= max(values) + 1e-6
    assert percentile(values, min(100.0, q + 5)) >= p - 1e-6


def test_relative_mad_known_values():
    assert relative_mad([10, 10, 10, 10]) == 0.0
    # median 10, absolute deviations 2, 1, 0, 1, 8 -> MAD 1 -> 10 %
    assert relative_mad([8, 9, 10, 11, 18]) == pytest.approx(0.1)
    assert relative_mad([5.0]) == 0.0


def test_bootstrap_ci_brackets_the_median_is_seeded_and_narrows_with_more_data():
    small = [100.0 + (i % 7) * 3 for i in range(10)]
    large = small * 20
    lo, hi = bootstrap_ci(small)
    assert lo <= statistics.median(small) <= hi
    assert bootstrap_ci(small) == (lo, hi)
    assert bootstrap_ci(small, seed=1) != (lo, hi) or lo == hi
    lo_l, hi_l = bootstrap_ci(large)
    assert hi_l - lo_l < hi - lo
    assert bootstrap_ci([42.0]) == (42.0, 42.0)
    assert bootstrap_ci([5.0] * 30) == (5.0, 5.0)


def _drawn_with_choices(values, statistic, seed, resamples=BOOTSTRAP_RESAMPLES):
    """The bootstrap as first written: each resample drawn by `random.Random(seed).choices`."""
    rng = random.Random(seed)
    stats = sorted(statistic(rng.choices(values, k=len(values))) for _ in range(resamples))
    alpha = (1.0 - 0.95) / 2.0
    return (percentile(stats, 100 * alpha), percentile(stats, 100 * (1 - alpha)))


@given(st.lists(st.floats(min_value=0.01, max_value=1e6), min_size=2, max_size=300), st.integers(0, 3),
       st.sampled_from(["median", "geometric_mean", "mean", "max"]))
def test_a_bootstrap_ci_is_the_one_choices_draws_whatever_the_size_seed_and_statistic(values, seed, name):
    """The resamples are kept per size and seed (a cell bootstraps several figures over the same requests) and the
    geometric mean is taken from the values' logs: the CI stays exactly the one `choices` resampling gives."""
    statistic = {"mean": lambda v: sum(v) / len(v), "max": max}.get(name) or getattr(statistics, name)
    for _ in range(2):  # the second time from the kept resamples
        assert bootstrap_ci(values, statistic, seed=seed, resamples=200) == _drawn_with_choices(
            values, statistic, seed, resamples=200)


def test_paired_speedup_known_ratios():
    pairs = [(200.0, 100.0), (300.0, 150.0), (120.0, 60.0)]
    s = paired_speedup(pairs)
    assert s["geomean"] == pytest.approx(2.0)
    assert s["median"] == pytest.approx(2.0)
    assert s["ci95"] is None  # fewer than 5 pairs: no CI
    assert s["pairs"] == 3
    assert paired_speedup(pairs + pairs[:2])["ci95"] == pytest.approx([2.0, 2.0])
    mixed = paired_speedup([(150.0, 100.0), (300.0, 100.0)] * 3)
    assert mixed["geomean"] == pytest.approx((1.5 * 3.0) ** 0.5)
    assert mixed["ratio_of_medians"] == pytest.approx(225.0 / 100.0)
    assert mixed["ci95"][0] <= mixed["geomean"] <= mixed["ci95"][1]
    assert paired_speedup([(0.0, 100.0)]) is None


def _request(index, tps, tokens, verify, warmup=False, ok=True):
    return RequestResult(
        index=index, prompt_id=f"p{index}", warmup=warmup, ok=ok, decode_tok_s=tps, ttft_s=0.05,
        completion_tokens=tokens, spec_verify_ct=verify, chunk_gaps_ms=[30.0, 10.0], chunk_tokens=[3, 1],
        error=None if ok else "HTTP 500: boom",
    )


def test_summarize_counts_measured_requests_and_weights_acceptance_by_tokens():
    requests = [
        _request(0, 999.0, 100, 10, warmup=True),
        _request(1, 100.0, 100, 50),  # tau 2
        _request(2, 110.0, 300, 75),  # tau 4
        _request(3, 120.0, 100, 25),  # tau 4
        _request(4, None, 0, None, ok=False),
    ]
    s = summarize(requests, max_new_tokens=None).to_json()
    assert s["requests_ok"] == 3 and s["requests_failed"] == 1
    assert s["errors"] == {"HTTP 500: boom": 1}
    assert s["decode_tok_s"]["median"] == 110.0
    assert s["decode_tok_s"]["mean"] == pytest.approx(110.0)
    assert s["accept_length"]["token_weighted"] == pytest.approx(500 / 150)
    assert s["accept_length"]["median"] == pytest.approx(4.0)
    assert s["accept_length"]["ci95"] is None and s["decode_tok_s"]["ci95"] is None  # 3 requests: no CI
    # per-token ITL spreads a 30 ms gap over 3 tokens: 10 ms each
    assert s["itl_ms"]["median"] == pytest.approx(10.0)
    assert s["chunk_gap_ms"]["median"] == pytest.approx(20.0)
    assert s["tokens_per_chunk"] == pytest.approx(2.0)
    assert "failed" in s["flags"]
    assert "unstable" not in s["flags"]


def test_summarize_flags_unstable_runs_and_wrong_lengths():
    requests = [_request(i, tps, 64, 20) for i, tps in enumerate([100.0, 150.0, 60.0, 140.0, 70.0])]
    s = summarize(requests, max_new_tokens=128, ignore_eos=True).to_json()
    assert "unstable" in s["flags"] and "relative MAD" in s["flag_details"]["unstable"]
    assert "length" in s["flags"]
    assert "length" not in summarize(requests, max_new_tokens=64).flags


def test_degenerate_repetition_is_detected_in_the_real_eagle3_stream():
    events = [e for e in (FIXTURES / "h200-0.5.16-generate-eagle3.txt").read_text().split("\n\n") if e.strip()]
    assert events[-1] == "data: [DONE]"
    final = json.loads(events[-2].removeprefix("data: "))
    assert is_degenerate(final["text"])
    prose = (Path(__file__).parents[2] / "docs" / "CONTRACTS.md").read_text()[:2000]
    assert not is_degenerate(prose)
    assert not is_degenerate("short")


def test_a_failed_run_says_failed_once_in_its_flags():
    from specmon.bench.model import BenchResult
    from specmon.bench.report import run_flags

    failed = BenchResult("r1", "p", "http://127.0.0.1:1", 0.0, status="failed",
                         summary=Summary(flags=["failed", "no-flush", "aborted"]))
    cancelled = BenchResult("r2", "p", "http://127.0.0.1:1", 0.0, status="cancelled",
                          summary=Summary(flags=["unstable"]))
    assert run_flags(failed) == ["failed", "no-flush", "aborted"]
    assert run_flags(cancelled) == ["cancelled", "unstable"]


@pytest.mark.parametrize(("requests", "has_ci"), [(1, False), (4, False), (5, True), (20, True)])
def test_no_confidence_interval_for_fewer_than_5_requests(requests, has_ci):
    s = summarize([_request(i, 100.0 + i, 100, 40 + i) for i in range(requests)], max_new_tokens=None).to_json()
    for figure in (s["decode_tok_s"], s["accept_length"]):
        assert (figure["ci95"] is not None) is has_ci
        if has_ci:
            assert figure["ci95"][0] <= figure["median"] <= figure["ci95"][1]
