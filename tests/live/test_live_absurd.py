"""Figures a server sends that cannot be true: shown as absurd and alerted in the Live view, `monitor --once`,
`check` and the Server pane, never as data; 200,000 series refused unparsed; memory bounded."""

from __future__ import annotations

import json
import time
import tracemalloc

import pytest

from specmon.live.text import figure_rows, latency_rows, snapshot_lines
from specmon.live.tracker import LiveTracker
from specmon.serving.prom import parse_scrape
from specmon.serving.spec import spec_settings
from specmon.view.state import spec_rows
from tests.support.hostile_http import SGLANG_INFO, Answer, HostileServer, info_with, routes_of

ABSURD = "absurd (see alerts)"
INFO = json.loads(SGLANG_INFO)  # max_running_requests 48, EAGLE3 steps 3 topk 1 draft 4


def _metrics(running: float = 1, queued: float = 0, used: float = 100, total: float = 3221374,
             gen: float = 1000, verify: float = 400, accept_rate: float = 0.7, hit: float = 0.1,
             le: str = "0.2", dp: dict[str, float] | None = None, steps: float = 3) -> str:
    running_lines = (
        "\n".join(f'sglang:num_running_reqs{{dp_rank="{rank}"}} {value}' for rank, value in dp.items())
        if dp else f'sglang:num_running_reqs{{tp_rank="0"}} {running}')
    return f"""# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{tp_rank="0"}} {gen}
# TYPE sglang:spec_verify_calls_total counter
sglang:spec_verify_calls_total{{tp_rank="0"}} {verify}
# TYPE sglang:num_running_reqs gauge
{running_lines}
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{{tp_rank="0"}} {queued}
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{{tp_rank="0"}} {used}
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{{tp_rank="0"}} {total}
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{{tp_rank="0"}} {accept_rate}
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{{tp_rank="0"}} {hit}
# TYPE sglang:spec_num_steps gauge
sglang:spec_num_steps{{tp_rank="0"}} {steps}
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{{le="{le}"}} {gen / 100}
sglang:time_to_first_token_seconds_bucket{{le="+Inf"}} {gen / 100}
"""


def _snapshot(first: str, second: str | None = None, info: dict | None = None):
    tracker = LiveTracker()
    tracker.set_server_info(INFO if info is None else info)
    tracker.add_scrape(parse_scrape(first, 100.0))
    tracker.add_scrape(parse_scrape(second or first, 110.0))
    return tracker.snapshot(60.0, now=110.0)


def test_sane_figures_are_shown_as_data_so_the_cases_below_can_fail():
    snap = _snapshot(_metrics(gen=1000), _metrics(gen=5000, verify=1600))
    assert not getattr(snap, "absurd", {}) and not [a for a in snap.alerts if a.kind == "absurd"]
    rows = dict(figure_rows(snap))
    assert rows["Running"] == "1 / 48 (2%)" and rows["Accept len"].startswith("3.33")
    assert ABSURD not in " ".join(rows.values())


# case -> (the second scrape, the field shown as absurd, what the alert says)
ABSURD_CASES = {
    "running over max_running_requests": (
        _metrics(running=9_080_022), "running", "running requests 9,080,022 cannot be true (more than the "
                                               "server's max_running_requests 48)"),
    "running negative": (_metrics(running=-3), "running", "running requests -3 cannot be true (below 0)"),
    "running fractional": (_metrics(running=2.5), "running", "not a whole number"),
    "queued 1e12": (_metrics(queued=1e12), "queued", "queued requests 1,000,000,000,000 cannot be true"),
    "KV used over the cache": (_metrics(used=9e9, total=1000), "kv_used", "more than the KV cache's 1,000 tokens"),
    "KV cache of 1e30 tokens": (_metrics(total=1e30), "kv_total", "KV cache tokens 1e+30 cannot be true"),
    "acceptance over the chain": (_metrics(gen=1000 + 400 * 50, verify=800), "accept_length",
                                  "more than the 4 tokens a verify step can accept"),
    "acceptance rate 7": (_metrics(accept_rate=7), "accept_rate", "acceptance rate 7 cannot be true (over 1)"),
    "cache hit 250 %": (_metrics(hit=2.5), "cache_hit_rate", "cache hit rate 2.5 cannot be true (over 1)"),
    "decode of 1e15 tok/s": (_metrics(gen=1e16, verify=1e16), "decode_tok_s", "decode tok/s"),
    "TTFT bucket of 1e30 s": (_metrics(gen=5000, le="1e30"), "latency", "TTFT bucket bound (ms)"),
    "DP rank over max": (_metrics(dp={"0": 5, "1": 70}), "running", "DP rank 1"),
    "spec_num_steps 1e9": (_metrics(steps=1e9), "metrics_num_steps", "sglang:spec_num_steps 1,000,000,000"),
}


@pytest.mark.parametrize("name", list(ABSURD_CASES))
def test_an_absurd_figure_is_shown_as_absurd_and_alerted_never_as_data(name):
    second, field, says = ABSURD_CASES[name]
    snap = _snapshot(_metrics(le="1e30") if field == "latency" else _metrics(), second)
    assert field in snap.absurd, snap.absurd
    assert says in snap.absurd[field], snap.absurd[field]
    alerts = [a for a in snap.alerts if a.kind == "absurd"]
    assert alerts and all(a.severity == "error" for a in alerts) and any(says in a.text for a in alerts)
    shown = "\n".join(snapshot_lines(snap))
    assert ABSURD in shown or field.startswith("metrics_"), shown
    for value in ("9,080,022 / 48", "14187534%", "1e+30", "1,000,000,000"):
        assert value not in "\n".join(f"{label} {text}" for label, text in figure_rows(snap))
    data = snap.to_json()
    if field in data:
        assert data[field] is None
    assert (snap.state == "absurd") == (field == "running"), snap.state
    assert data["absurd"][field] == snap.absurd[field]
    json.dumps(data, allow_nan=False)  # strict JSON all the same
    if field == "latency":
        assert latency_rows(snap)[0][1] == ABSURD
    if field == "metrics_num_steps":
        assert "metrics_num_steps" not in snap.effective


# /server_info figures -> (key, value, what is said)
INFO_CASES = {
    "steps 10**400": ("speculative_num_steps", 10**400, "speculative_num_steps about 1e400 cannot be true"),
    "steps 1e308": ("speculative_num_steps", 1e308, "speculative_num_steps 1e+308 cannot be true"),
    "topk -1": ("speculative_eagle_topk", -1, "speculative_eagle_topk -1 cannot be true (below 0)"),
    "draft tokens 2.5": ("speculative_num_draft_tokens", 2.5, "not a whole number"),
    "draft tokens 'ten'": ("speculative_num_draft_tokens", "ten", "'ten' cannot be true (not a number)"),
    "draft tokens true": ("speculative_num_draft_tokens", True, "True cannot be true (not a number)"),
    "max tokens 0": ("max_total_num_tokens", 0, "max_total_num_tokens 0 cannot be true (below 1)"),
    "max running 1e12": ("max_running_requests", 10**12, "max_running_requests 1,000,000,000,000 cannot be"),
    "algorithm a list": ("speculative_algorithm", ["EAGLE3"], "speculative_algorithm ['EAGLE3'] cannot be true"),
    "version 1 MB": ("version", "9" * 1_000_000, "version '99999"),
    "accept length 1e9": ("internal_states", [{"avg_spec_accept_length": 1e9}],
                          "avg_spec_accept_length 1,000,000,000 cannot be true"),
}


@pytest.mark.parametrize("name", list(INFO_CASES))
def test_an_absurd_server_info_figure_is_left_out_and_named(name):
    key, value, says = INFO_CASES[name]
    info = INFO | {key: value}
    spec = spec_settings(info)
    assert any(says in text for text in spec.absurd), spec.absurd
    snap = _snapshot(_metrics(), info=info)
    assert any(a.kind == "absurd" and says in a.text for a in snap.alerts), snap.alerts
    _, notes = spec_rows(spec, None)
    assert any(says in text for text, _ in notes)
    assert all(len(text) < 400 for text in spec.absurd)


def test_check_fails_on_absurd_settings_and_says_which(capsys):
    from specmon.cli import main

    routes = routes_of(info=info_with(speculative_num_steps=10**400, max_total_num_tokens=-5),
                       generate=Answer.json({"text": "ok", "meta_info": {"completion_tokens": 64,
                                                                          "spec_verify_ct": 20}}))
    with HostileServer(routes) as server:
        assert main(["check", "--url", server.url]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] server_info" in out and "speculative_num_steps about 1e400 cannot be true" in out
    assert "max_total_num_tokens -5 cannot be true" in out


def test_200000_series_are_refused_unparsed_and_memory_stays_flat():
    lines = ["# TYPE sglang:time_to_first_token_seconds histogram"]
    lines += [f'sglang:time_to_first_token_seconds_bucket{{le="{i / 1000:.4f}"}} {i}' for i in range(200_000)]
    text = "\n".join(lines) + "\n"
    tracker = LiveTracker()
    tracemalloc.start()
    started = time.monotonic()
    for k in range(30):
        tracker.add_scrape(parse_scrape(text, 100.0 + k))
        tracker.snapshot(60.0, now=100.0 + k)
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert time.monotonic() - started < 60
    assert current < 5_000_000, current
    snap = tracker.snapshot(60.0, now=130.0)
    assert any("more than 20,000" in a.text for a in snap.alerts if a.kind == "metrics"), snap.alerts


@pytest.mark.parametrize(("label", "count", "says"), [
    ("le", 1000, "1,000 bucket bounds, more than 256"),
    ("dp_rank", 1000, "1,000 dp_rank values, more than 256"),
])
def test_too_many_buckets_or_ranks_are_refused(label, count, says):
    if label == "le":
        body = "\n".join(f'sglang:time_to_first_token_seconds_bucket{{le="{i}"}} {i}' for i in range(count))
        text = f"# TYPE sglang:time_to_first_token_seconds histogram\n{body}\n"
    else:
        body = "\n".join(f'sglang:num_running_reqs{{dp_rank="{i}"}} 1' for i in range(count))
        text = f"# TYPE sglang:num_running_reqs gauge\n{body}\n"
    scrape = parse_scrape(text, 1.0)
    assert scrape.error is not None and says in scrape.error


def test_only_sglangs_own_modes_are_kept_per_mode():
    body = "\n".join(f'sglang:realtime_tokens_total{{mode="m{i}"}} 1' for i in range(5000))
    scrape = parse_scrape(f"# TYPE sglang:realtime_tokens_total counter\n{body}\n"
                          'sglang:realtime_tokens_total{mode="decode"} 7\n', 1.0)
    assert scrape.counters["sglang:realtime_tokens_total{mode=decode}"] == 7
    assert len(scrape.counters) <= 4


def test_a_nan_or_infinite_sample_is_left_out_of_the_benchmarks_metrics_reading():
    from specmon.serving.metrics import delta, parse_metrics

    before = parse_metrics('sglang:generation_tokens_total{tp_rank="0"} 100\n'
                           'sglang:spec_verify_calls_total{tp_rank="0"} 50\n', 1.0)
    after = parse_metrics('sglang:generation_tokens_total{tp_rank="0"} 400\n'
                          'sglang:generation_tokens_total{tp_rank="1"} NaN\n'
                          'sglang:spec_verify_calls_total{tp_rank="0"} +Inf\n', 2.0)
    d = delta(before, after)
    assert d.generation_tokens == 300 and d.spec_verify_calls is None and d.accept_length is None


def test_a_server_scraped_between_requests_reads_serving_while_it_generated_in_the_window():
    """Running is an instant gauge: 0 between two requests of a steady client, while tokens flowed all window."""
    snap = _snapshot(_metrics(running=0, gen=1000), _metrics(running=0, gen=5000, verify=1600))
    assert (snap.state, snap.running) == ("serving", 0) and snap.decode_tok_s and snap.decode_tok_s > 0
    assert _snapshot(_metrics(running=0), _metrics(running=0)).state == "idle"
