"""MetricsSnapshot parsing (real 0.5.16 answers and 0.5.23-shaped labels) and counter deltas."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specmon.serving.metrics import MetricsSnapshot, delta, parse_metrics
from tests.support.serving_replay import API_FIXTURES

LABELS_0523 = 'engine_type="unified",model_name="m"'


def _sample_value(text: str, name: str) -> float:
    """Sum of every sample of `name` in exposition text, read with a regex (independent of the parser)."""
    return sum(float(v) for v in re.findall(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M))


@pytest.mark.parametrize("name", ["h200-0.5.16-metrics-eagle3.txt", "h200-0.5.16-metrics-plain.txt"])
def test_real_metrics_counters_and_gauges(name: str) -> None:
    text = (API_FIXTURES / name).read_text()
    snap = parse_metrics(text, taken_at=100.0)
    assert snap.taken_at == 100.0
    assert snap.generation_tokens == _sample_value(text, "sglang:generation_tokens_total")
    assert snap.num_requests == _sample_value(text, "sglang:num_requests_total")
    assert snap.prompt_tokens == _sample_value(text, "sglang:prompt_tokens_total")
    assert snap.num_running_reqs == _sample_value(text, "sglang:num_running_reqs")
    assert snap.token_usage == _sample_value(text, "sglang:token_usage")
    assert snap.generation_tokens and snap.generation_tokens > 0
    assert not any(name.endswith("_bucket") for name in snap.totals)


def test_spec_counters_only_with_speculation() -> None:
    eagle = parse_metrics((API_FIXTURES / "h200-0.5.16-metrics-eagle3.txt").read_text())
    plain = parse_metrics((API_FIXTURES / "h200-0.5.16-metrics-plain.txt").read_text())
    assert eagle.spec_verify_calls and eagle.spec_verify_calls > 0
    assert eagle.spec_accept_length is not None
    assert plain.spec_verify_calls is None


def test_counters_sum_over_labels_and_gauges_do_not_double_count_tp_ranks() -> None:
    text = f"""# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{{LABELS_0523},is_streaming="true"}} 300.0
sglang:generation_tokens_total{{{LABELS_0523},is_streaming="false"}} 100.0
# TYPE sglang:spec_verify_calls_total counter
sglang:spec_verify_calls_total{{{LABELS_0523}}} 160.0
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{{LABELS_0523},dp_rank="0",tp_rank="0"}} 3.0
sglang:num_running_reqs{{{LABELS_0523},dp_rank="0",tp_rank="1"}} 3.0
sglang:num_running_reqs{{{LABELS_0523},dp_rank="1",tp_rank="0"}} 5.0
sglang:num_running_reqs{{{LABELS_0523},dp_rank="1",tp_rank="1"}} 5.0
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{{{LABELS_0523},dp_rank="0",tp_rank="0"}} 2.0
sglang:spec_accept_length{{{LABELS_0523},dp_rank="1",tp_rank="0"}} 3.0
"""
    snap = parse_metrics(text)
    assert snap.generation_tokens == 400.0
    assert snap.spec_verify_calls == 160.0
    assert snap.num_running_reqs == 8.0
    assert snap.spec_accept_length == 2.5
    assert snap.num_queue_reqs is None and snap.gen_throughput is None


def _snap(gen: float, verify: float, at: float) -> MetricsSnapshot:
    return MetricsSnapshot(generation_tokens=gen, spec_verify_calls=verify, num_requests=1, taken_at=at)


def test_delta_gives_the_interval_accept_length() -> None:
    d = delta(_snap(104, 101, at=10.0), _snap(104 + 300, 101 + 100, at=12.0))
    assert (d.generation_tokens, d.spec_verify_calls, d.reset) == (300, 100, False)
    assert d.accept_length == 3.0
    assert d.generation_tokens_per_s == 150.0
    assert d.num_requests == 0


def test_delta_across_a_restart_counts_from_zero() -> None:
    d = delta(_snap(5000, 2000, at=0.0), _snap(90, 30, at=5.0))
    assert d.reset
    assert (d.generation_tokens, d.spec_verify_calls) == (90, 30)
    assert d.accept_length == 3.0


def test_delta_without_speculation_has_no_accept_length() -> None:
    before = MetricsSnapshot(generation_tokens=10, taken_at=0.0)
    after = MetricsSnapshot(generation_tokens=50, taken_at=1.0)
    d = delta(before, after)
    assert d.generation_tokens == 40 and d.spec_verify_calls is None and d.accept_length is None


counts = st.floats(min_value=0, max_value=1e12, allow_nan=False)


@given(b_gen=counts, b_ver=counts, a_gen=counts, a_ver=counts)
def test_delta_is_never_negative(b_gen: float, b_ver: float, a_gen: float, a_ver: float) -> None:
    d = delta(_snap(b_gen, b_ver, 0.0), _snap(a_gen, a_ver, 1.0))
    assert d.generation_tokens is not None and d.generation_tokens >= 0
    assert d.spec_verify_calls is not None and d.spec_verify_calls >= 0
    if d.reset:
        assert (d.generation_tokens, d.spec_verify_calls) == (a_gen, a_ver)
    else:
        assert (d.generation_tokens, d.spec_verify_calls) == (a_gen - b_gen, a_ver - b_ver)
