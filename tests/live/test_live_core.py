"""The live core: /metrics parsing and rank merging, bucket-delta percentiles, windows, restarts, stalls,
log-only figures, alerts, hostile input, and finding the last startup of a big log."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from specmon.live.attach import plan_attach, read_range
from specmon.live.quantiles import Quantile, bucket_delta, estimate
from specmon.live.tracker import LiveTracker
from specmon.logs.batchlines import parse_batch_line
from specmon.serving.prom import parse_scrape

API = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "sglang-api"
if not API.is_dir():
    API = Path("/work/shared/corpus/sglang-api")
LIVE = Path(__file__).parents[1] / "fixtures" / "live"
EAGLE3_METRICS = (API / "h200-0.5.16-metrics-eagle3.txt").read_text()
EAGLE3_INFO = json.loads((API / "h200-0.5.16-server-info-eagle3.json").read_text())


def test_real_0516_metrics_parse():
    s = parse_scrape(EAGLE3_METRICS, 1.0)
    assert s.error is None
    assert s.counters["sglang:generation_tokens_total"] == 104
    assert s.counters["sglang:spec_verify_calls_total"] == 101
    assert s.counters["sglang:realtime_tokens_total{mode=decode}"] == 105
    assert s.gauges["sglang:max_total_num_tokens"] == 3221374
    assert s.gauges["sglang:spec_num_draft_tokens"] == 4
    ttft = s.histograms["sglang:time_to_first_token_seconds"]
    assert ttft[-1] == (float("inf"), 3.0) and ttft[0] == (0.1, 2.0)


def test_multi_rank_metrics_merge_right():
    s = parse_scrape((LIVE / "metrics-dp2-tp2.txt").read_text(), 1.0)
    # TP replicas counted once, DP ranks added up
    assert s.counters["sglang:realtime_tokens_total{mode=decode}"] == 1000 + 3000
    assert s.gauges["sglang:num_running_reqs"] == 2 + 12
    assert s.gauges["sglang:max_total_num_tokens"] == 2 * 100000
    assert s.gauges["sglang:token_usage"] == pytest.approx((0.1 + 0.5) / 2)
    assert s.per_dp["sglang:num_running_reqs"] == {"0": 2, "1": 12}
    # histograms of two tokenizer label sets merged bucket by bucket
    assert dict(s.histograms["sglang:time_to_first_token_seconds"])[0.2] == 3 + 5
    tracker = LiveTracker()
    tracker.add_scrape(s)
    alerts = {a.kind for a in tracker.snapshot(60, 1.0).alerts}
    assert "dp_imbalance" in alerts


def test_quantile_from_bucket_deltas_not_cumulative():
    before = ((0.1, 100.0), (0.2, 100.0), (0.4, 100.0), (float("inf"), 100.0))
    after = ((0.1, 100.0), (0.2, 150.0), (0.4, 200.0), (float("inf"), 200.0))
    delta = bucket_delta(before, after)
    assert delta == ((0.1, 0.0), (0.2, 50.0), (0.4, 100.0), (float("inf"), 100.0))
    assert estimate(0.5, delta).value == pytest.approx(0.2)  # all 100 new ones are above 0.1
    assert estimate(0.99, delta).value == pytest.approx(0.2 + 0.2 * 49 / 50)
    assert estimate(0.5, after) == Quantile(below=0.1)  # the cumulative answer would hide the slowdown
    assert bucket_delta(after, before) is None  # went down: a restart, no delta


def _histogram_quantile(q: float, buckets) -> float:
    """Prometheus' bucketQuantile (promql/quantile.go), for classic buckets as they arrive: its own answer."""
    total = buckets[-1][1]
    if len(buckets) < 2 or not total > 0:
        return math.nan
    rank = q * total
    b = next((i for i, (_, count) in enumerate(buckets[:-1]) if count >= rank), len(buckets) - 1)
    if b == len(buckets) - 1:
        return buckets[-2][0]
    start, count = (0.0, buckets[0][1]) if b == 0 else (buckets[b - 1][0], buckets[b][1] - buckets[b - 1][1])
    rank -= 0.0 if b == 0 else buckets[b - 1][1]
    return start + (buckets[b][0] - start) * rank / count


def test_one_quantile_rule_for_bucket_counts_and_for_histogram_quantile_s_answer():
    """The Live view reads quantiles from bucket counts (`estimate`), the fleet from PromQL's histogram_quantile
    and the histogram's first and highest bounds (`Quantile.of_interpolated`): the same answers, bounds and all,
    for any histogram."""
    import random

    rng = random.Random(11)
    bounds = (0.1, 0.2, 0.4, 0.8, 2.0, float("inf"))
    for _ in range(3000):
        counts, total = [], 0.0
        for _ in bounds:
            total += rng.choice((0.0, 0.0, rng.uniform(0, 5)))
            counts.append(total)
        if not total:
            continue
        buckets = tuple(zip(bounds, counts, strict=True))
        for q in (0.5, 0.9, 0.99):
            expected = estimate(q, buckets)
            assert Quantile.of_interpolated(_histogram_quantile(q, buckets), 0.1, 2.0) == expected, (q, buckets)


def _scrape_text(gen: float, verify: float, running: float = 1, decode: float | None = None,
                 ttft: tuple[float, float, float] = (0, 0, 0)) -> str:
    decode = gen if decode is None else decode
    return f"""# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{model_name="m"}} {gen}
# TYPE sglang:spec_verify_calls_total counter
sglang:spec_verify_calls_total{{model_name="m"}} {verify}
# TYPE sglang:realtime_tokens_total counter
sglang:realtime_tokens_total{{mode="decode",tp_rank="0"}} {decode}
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{tp_rank="0"}} {running}
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{{tp_rank="0"}} {decode % 1000}
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{{le="0.1"}} {ttft[0]}
sglang:time_to_first_token_seconds_bucket{{le="0.2"}} {ttft[1]}
sglang:time_to_first_token_seconds_bucket{{le="+Inf"}} {ttft[2]}
sglang:time_to_first_token_seconds_count {ttft[2]}
sglang:time_to_first_token_seconds_sum 1.0
"""


def _tracker(**kwargs) -> LiveTracker:
    tracker = LiveTracker(**kwargs)
    tracker.set_server_info(EAGLE3_INFO)
    return tracker


def test_windows_from_counter_deltas():
    tracker = _tracker()
    for t in range(0, 61):
        tracker.add_scrape(parse_scrape(_scrape_text(1000 + 300 * t, 500 + 100 * t, ttft=(t, 4 * t, 4 * t)), t))
    snap = tracker.snapshot(60, 60)
    assert snap.source == "metrics" and snap.state == "serving"
    assert snap.decode_tok_s == pytest.approx(300)
    assert snap.accept_length == pytest.approx(3.0)  # Δgen / Δverify, not the lifetime 1000+/500+
    assert snap.ttft_ms.p50.value == pytest.approx(100.0 + 100.0 * (120 - 60) / 180)  # Δbuckets (60, 240, 240)
    assert snap.max_running == 48 and snap.effective["algorithm"] == "EAGLE3"
    assert (snap.window_from, snap.window_to) == (0, 60)  # the scrapes the deltas are taken between
    short = tracker.snapshot(10, 60)
    assert short.decode_tok_s == pytest.approx(300)
    assert (short.window_from, short.window_to) == (50, 60)
    assert short.to_json()["window_from"] == 50 and short.to_json()["window_to"] == 60


def test_no_answer_while_starting_is_starting_and_once_started_unreachable():
    tracker = LiveTracker()
    tracker.set_reachable(False)
    assert tracker.snapshot(60, 0).state == "unreachable"
    tracker.set_starting(True)
    assert tracker.snapshot(60, 0).state == "starting"
    tracker.set_reachable(True)
    assert tracker.snapshot(60, 0).state == "starting"  # it answers (warming up), no figures yet
    tracker.set_process_alive(False)
    assert tracker.snapshot(60, 0).state == "exited"
    tracker.set_process_alive(None)
    for t in range(0, 11):  # figures: the state they say
        tracker.add_scrape(parse_scrape(_scrape_text(1000 + 300 * t, 500 + 100 * t, ttft=(t, 2 * t, 2 * t)), t))
    assert tracker.snapshot(60, 10).state == "serving"


def test_restart_begins_a_new_series():
    tracker = _tracker(preset="eagle3-5")
    for t in range(0, 20):
        tracker.add_scrape(parse_scrape(_scrape_text(5000 + 300 * t, 2000 + 100 * t), t))
        tracker.snapshot(60, t)
    for t in range(20, 40):  # counters from zero again
        tracker.add_scrape(parse_scrape(_scrape_text(200 * (t - 20), 100 * (t - 20)), t))
        snap = tracker.snapshot(60, t)
    assert snap.restarts == 1
    assert snap.accept_length == pytest.approx(2.0)  # nothing of the first run mixed in
    assert snap.decode_tok_s == pytest.approx(200)
    assert [series.run for series in snap.series] == [0, 1]
    assert all(series.label == "eagle3-5" for series in snap.series)
    assert any(a.kind == "restart" for a in snap.alerts)
    assert snap.to_json()["restarts"] == 1


def test_new_start_time_is_a_restart():
    tracker = LiveTracker()
    tracker.set_server_info({**EAGLE3_INFO, "startup_time": 100.0})
    tracker.add_scrape(parse_scrape(_scrape_text(10, 5), 1))
    tracker.set_server_info({**EAGLE3_INFO, "startup_time": 200.0})
    assert tracker.restarts == 1


def test_stall_alert_carries_the_last_log_line():
    tracker = _tracker(stall_s=30)
    tracker.feed_line("[2026-01-01 10:00:00] Decode batch, #running-req: 3, #token: 10, token usage: 0.00, "
                      "cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 0")
    tracker.feed_line("[2026-01-01 10:00:01] NCCL watchdog: collective operation timed out")
    for t in range(0, 45):
        tracker.add_scrape(parse_scrape(_scrape_text(1000, 500, running=3), t))
    snap = tracker.snapshot(60, 44)
    assert snap.state == "stalled"
    stall = [a for a in snap.alerts if a.kind == "stall"]
    assert stall and "no token progress for 44 s" in stall[0].text and "NCCL watchdog" in stall[0].text
    fresh = _tracker(stall_s=30)
    for t in range(0, 45):
        fresh.add_scrape(parse_scrape(_scrape_text(1000 + t, 500 + t, running=3), t))
    assert fresh.snapshot(60, 44).state == "serving"


DECODE_04 = ("[2025-03-08 12:30:{s:02d} TP0] Decode batch. #running-req: 4, #token: 4000, token usage: 0.10, "
             "accept len: 2.50, cuda graph: True, gen throughput (token/s): 400.00, #queue-req: 1, ")
DECODE_05 = ("[2026-08-02 00:02:{s:02d}] Decode batch, #running-req: 2, #full token: 181, full token usage: 0.00, "
             "#swa token: 181, swa token usage: 0.00, accept len: 3.00, accept rate: 0.40, cuda graph: True, "
             "gen throughput (token/s): 200.00, #queue-req: 0")
PREFILL_05 = ("[2026-08-02 00:02:{s:02d}] Prefill batch, #new-seq: 1, #new-token: 30, #cached-token: 70, "
              "token usage: 0.00, #running-req: 1, #queue-req: 0, #pending-token: 0, cuda graph: True, "
              "input throughput (token/s): 1.81")


def test_log_only_figures_both_shapes():
    old = LiveTracker()
    old.metrics_unavailable()
    for s in range(0, 30):
        old.feed_line(DECODE_04.format(s=s))
    old.feed_line(DECODE_04.format(s=0).replace("TP0", "TP1"))  # TP1 repeats TP0: ignored
    snap = old.snapshot(60)
    assert snap.source == "log" and snap.state == "serving"
    assert snap.decode_tok_s == pytest.approx(400) and snap.accept_length == pytest.approx(2.5)
    assert snap.running == 4 and snap.queued == 1 and snap.kv_used == 4000
    assert snap.kv_total == pytest.approx(40000)
    new = LiveTracker()
    new.set_server_info(EAGLE3_INFO)
    new.feed_line(PREFILL_05.format(s=1))
    for s in range(2, 10):
        new.feed_line(DECODE_05.format(s=s))
    snap = new.snapshot(60)
    assert snap.accept_length == pytest.approx(3.0) and snap.accept_rate == pytest.approx(0.4)
    assert snap.cache_hit_rate == pytest.approx(0.7) and snap.kv_total == 3221374
    assert parse_batch_line("[DP1 TP0] Decode batch, accept len: 1.52, accept rate: 0.51, cuda graph: True").dp == 1


def test_accept_far_below_the_benchmark_is_an_alert():
    tracker = _tracker(preset="eagle3-5", baseline_accept=2.8)
    for t in range(0, 30):
        tracker.add_scrape(parse_scrape(_scrape_text(1000 + 105 * t, 1000 + 100 * t), t))
    alerts = [a for a in tracker.snapshot(60, 29).alerts if a.kind == "accept_low"]
    assert alerts and "2.80" in alerts[0].text


def test_spec_mismatch_against_the_preset():
    tracker = _tracker(preset="eagle3-16", asked={"speculative-num-draft-tokens": 16})
    tracker.add_scrape(parse_scrape(EAGLE3_METRICS, 1))
    alerts = [a.text for a in tracker.snapshot(60, 1).alerts if a.kind == "spec_mismatch"]
    assert alerts and "16 asked, 4 effective" in alerts[0]


@pytest.mark.parametrize("text", [
    "", "garbage{{{ 1\n", "sglang:num_running_reqs NaN\n", "sglang:num_running_reqs{tp_rank=\"0\"} +Inf\n",
    "# TYPE sglang:time_to_first_token_seconds histogram\nsglang:time_to_first_token_seconds_bucket{le=\"x\"} 1\n",
    "\x00\xff" * 1000, "sglang:generation_tokens_total " + "9" * 5000 + "\n",
])
def test_hostile_metrics_never_raise(text):
    tracker = _tracker()
    tracker.add_scrape(parse_scrape(text, 1.0))
    json.dumps(tracker.snapshot(60, 1.0).to_json())


def test_hostile_log_lines_never_raise():
    tracker = LiveTracker()
    for line in ["Decode batch", "x Decode batch, #running-req: nan, accept len: inf", "Prefill batch. : : :",
                 "[9999-99-99 99:99:99] Decode batch, #running-req: 1", "Decode batch, " + "a: 1, " * 10_000]:
        tracker.feed_line(line)
    json.dumps(tracker.snapshot(60, 1.0).to_json())
    assert len(tracker.run.batches.lines) <= 4096


def test_attach_finds_the_last_startup_from_the_end(tmp_path):
    startup = (LIVE.parent / "logs").glob("03-*ready.log")
    startup_text = next(iter(startup)).read_bytes()
    serving = b"".join(DECODE_05.format(s=i % 60).encode() + b"\n" for i in range(60_000))
    log = tmp_path / "week.log"
    log.write_bytes(startup_text + serving + startup_text + serving)
    plan = plan_attach(str(log))
    second = len(startup_text) + len(serving)
    assert second - 32 * 1024 <= plan.startup_start <= second + startup_text.find(b"server_args=")
    assert b"server_args=" in read_range(str(log), plan.startup_start, plan.startup_end)
    assert read_range(str(log), plan.startup_end - 200, plan.startup_end).rstrip().endswith(b"ready to roll!") \
        or b"ready to roll" in read_range(str(log), plan.startup_start, plan.startup_end)
    assert plan.size - plan.tail_start <= 1024 * 1024 and plan.skipped > 5 * 1024 * 1024


STARTUP_METRICS = """# HELP sglang:startup_time_seconds Engine startup duration by phase in seconds.
# TYPE sglang:startup_time_seconds gauge
sglang:startup_time_seconds{model_name="m",phase="load_weight",tp_rank="0"} 41.5
sglang:startup_time_seconds{model_name="m",phase="load_weight",tp_rank="1"} 43.25
sglang:startup_time_seconds{model_name="m",phase="kv_cache_allocation",tp_rank="0"} 2.0
# HELP sglang:startup_cuda_graph_time_seconds CUDA graph capture duration by phase in seconds.
# TYPE sglang:startup_cuda_graph_time_seconds gauge
sglang:startup_cuda_graph_time_seconds{model_name="m",phase="target_decode",tp_rank="0"} 18.0
"""
"""Made from SGLang 0.5.17's metrics_collector.py (its gauge names, labels and help text), not a real scrape."""


def test_sglangs_own_startup_timings_are_read_per_phase_slowest_rank_first():
    tracker = _tracker()
    tracker.add_scrape(parse_scrape(_scrape_text(1000, 500) + STARTUP_METRICS, 1))
    snap = tracker.snapshot(60, 1)
    assert snap.startup_s == {"load_weight": 43.25, "kv_cache_allocation": 2.0, "cuda_graph.target_decode": 18.0}
    assert snap.to_json()["startup_s"]["load_weight"] == 43.25
    from specmon.live.text import snapshot_lines

    assert any("SGLang's own timings: load_weight 43.2 s" in line for line in snapshot_lines(snap))
    plain = _tracker()
    plain.add_scrape(parse_scrape(_scrape_text(1000, 500), 1))
    assert plain.snapshot(60, 1).to_json()["startup_s"] is None
