"""What the Live view and the Server pane say is what the server serves now: a switch compares the new server
with the preset it goes to (issue 22 item 8), runs are labelled with what they serve (item 2), traffic that
stopped is not shown as current and a dead process reads as exited (item 3), and percentiles inside one
histogram bucket are a bound, not a figure (item 14)."""

from __future__ import annotations

import pytest

from specmon.launch.presets import load_presets
from specmon.logs.model import StartupState
from specmon.serving.poller import ServerStatus
from specmon.serving.spec import SpecSettings
from specmon.view.state import MonitorState, live_rows

READY = StartupState(state="ready")


def http(state: str, spec: SpecSettings | None = None) -> ServerStatus:
    return ServerStatus(state, since=0.0, last_error=None, spec=spec, version=None, url="http://h:1", latency_s=0.01)


def eagle(steps: int, draft_tokens: int) -> SpecSettings:
    return SpecSettings("EAGLE3", "/models/kimi-k25-eagle3", steps, 1, draft_tokens, 2.5, None, "0.5.16", 1000)


def asked_vs_effective(watch: MonitorState) -> list[str]:
    _, notes = live_rows(watch.view(READY, True, True, None))
    return [text for text, _ in notes if "asked" in text]


def test_during_a_switch_the_new_server_is_compared_with_the_preset_it_goes_to() -> None:
    presets = load_presets([])
    watch = MonitorState(preset=presets.get("eagle3-10"))
    watch.http_changed(http("ready", eagle(9, 10)))
    assert asked_vs_effective(watch) == []
    watch.begin_switch("eagle3-16", presets.get("eagle3-16"))
    watch.http_changed(http("ready", eagle(15, 16)))  # the new server is up; the switch's sanity run goes on
    assert asked_vs_effective(watch) == [], "eagle3-16's server is not eagle3-10's"
    assert watch.serving_preset.name == "eagle3-16"
    watch.end_switch(None)  # it failed after all: the running preset is compared again
    assert watch.serving_preset.name == "eagle3-10"


BASELINE_INFO = {"startup_time": 100.0, "speculative_algorithm": None, "max_running_requests": 48}
EAGLE5_INFO = {"startup_time": 200.0, "speculative_algorithm": "EAGLE3", "speculative_num_steps": 4,
               "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 5, "max_running_requests": 48,
               "speculative_draft_model_path": "demo/kimi-k25-eagle3"}
DECODE = ("[2026-08-02 00:{m:02d}:{s:02d}] Decode batch, #running-req: 1, #full token: 181, full token usage: 0.00, "
          "accept len: {accept}, cuda graph: True, gen throughput (token/s): {tok}, #queue-req: 0")


def feed_traffic(tracker, minute: int, tok: float, accept: float, start_s: float) -> None:
    for s in range(0, 20, 5):
        tracker.feed_line(DECODE.format(m=minute, s=s, accept=accept, tok=tok), start_s + s)
        tracker.snapshot(60, start_s + s)


def test_each_run_is_labelled_with_what_it_serves_not_the_preset_before_it() -> None:
    from specmon.live.tracker import LiveTracker

    presets = load_presets([])
    baseline, eagle5 = presets.get("demo-baseline"), presets.get("demo-eagle3-5")
    tracker = LiveTracker(preset=baseline.name, asked=dict(baseline.args))
    tracker.metrics_unavailable()
    tracker.set_server_info(BASELINE_INFO)
    feed_traffic(tracker, 1, 88.0, 1.0, 1000.0)
    # The switch: the new log's startup, then its /server_info; the app learns the preset a little later.
    tracker.feed_line("[2026-08-02 00:02:00] server_args=ServerArgs(model_path='demo/Kimi-K2.5', ...)", 1100.0)
    tracker.set_server_info(EAGLE5_INFO)
    feed_traffic(tracker, 3, 240.0, 2.8, 1200.0)
    labels = [series.label for series in tracker.snapshot(60, 1220.0).series]
    assert labels == ["demo-baseline", "EAGLE3 · 5 draft"], "the baseline's 88 tok/s is not eagle3-5's"
    tracker.set_preset(eagle5.name, dict(eagle5.args))
    snap = tracker.snapshot(60, 1221.0)
    assert [(s.label, s.points[-1].decode_tok_s) for s in snap.series] == [("demo-baseline", 88.0),
                                                                          ("demo-eagle3-5", 240.0)]
    assert snap.restarts == 1, "one switch, one new run (the log and /server_info both saw it)"


def test_a_run_whose_preset_is_stale_says_what_it_serves() -> None:
    from specmon.live.tracker import LiveTracker

    eagle5 = load_presets([]).get("demo-eagle3-5")
    tracker = LiveTracker(preset=eagle5.name, asked=dict(eagle5.args))  # believed, but a sweep put back the baseline
    tracker.metrics_unavailable()
    tracker.set_server_info(BASELINE_INFO)
    feed_traffic(tracker, 1, 88.0, 1.0, 1000.0)
    assert [s.label for s in tracker.snapshot(60, 1020.0).series] == ["no speculation"]


def test_log_lines_are_traffic_only_while_they_arrive() -> None:
    from specmon.live.tracker import QUIET_S, LiveTracker

    tracker = LiveTracker()
    tracker.metrics_unavailable()
    start = 1_800_000_000.0
    for s in range(0, 20, 2):
        tracker.feed_line(DECODE.format(m=0, s=s, accept=2.5, tok=131.8), start + s)
    stamp = tracker.run.batches.newest_ts()
    busy = tracker.snapshot(60, stamp + 1)
    assert busy.state == "serving" and round(busy.decode_tok_s, 1) == 131.8 and busy.running == 1
    quiet = tracker.snapshot(60, stamp + QUIET_S + 3)  # 13 s after the last line: nothing arrives
    assert quiet.state == "idle" and quiet.decode_tok_s == 0.0 and quiet.running is None, quiet
    assert round(quiet.accept_length, 2) == 2.5, "the acceptance of the last traffic is still said"
    assert any(a.kind == "quiet" for a in quiet.alerts)
    long_after = tracker.snapshot(60, stamp + 75)
    assert long_after.state == "idle" and any(a.kind == "quiet_running" and a.severity == "warning"
                                              for a in long_after.alerts), long_after.alerts  # fmt: skip


def test_a_log_read_at_attach_is_old_news() -> None:
    import time

    from specmon.live.tracker import LiveTracker

    tracker = LiveTracker()
    tracker.metrics_unavailable()
    now = time.time()
    for s in range(0, 20, 2):  # written ten minutes ago, read now
        tracker.feed_line(time.strftime("[%Y-%m-%d %H:%M:%S] ", time.localtime(now - 600 + s)) +
                          DECODE.format(m=0, s=0, accept=2.5, tok=108.0).split("] ", 1)[1], now)  # fmt: skip
    snap = tracker.snapshot(60, now)
    assert snap.state == "idle" and snap.decode_tok_s == 0.0, snap


def test_metrics_gauges_are_not_current_once_tokens_stop() -> None:
    from specmon.live.tracker import LiveTracker
    from specmon.serving.prom import parse_scrape

    def scrape(gen: float, running: float, t: float):
        text = (f"# TYPE sglang:generation_tokens_total counter\nsglang:generation_tokens_total {gen}\n"
                f"# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs {running}\n"
                "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs 0\n")
        return parse_scrape(text, t)

    tracker = LiveTracker()
    for t in range(0, 30):
        tracker.add_scrape(scrape(100.0 * t, 1, t))
    assert tracker.snapshot(60, 29).state == "serving"
    for t in range(30, 50):  # the request finished: no tokens; the gauge keeps its last decode window's 1
        tracker.add_scrape(scrape(2900.0, 1, t))
    snap = tracker.snapshot(60, 49)
    assert snap.state == "idle" and snap.running is None and snap.decode_tok_s == 0.0, snap


async def test_a_killed_server_reads_as_exited_within_one_poll_and_quitting_does_not_ask(tmp_path) -> None:
    import os
    import signal
    import time

    from specmon.oncall.discovery import find_servers
    from specmon.ports import free_port_pair
    from specmon.tui.app import AppConfig, SpecmonApp
    from tests.support.app_harness import screen_text, wait_for
    from tests.support.oncall import Oncall

    oc = Oncall(tmp_path)
    os.environ["SPECMON_STATE_DIR"] = oc.env["SPECMON_STATE_DIR"]
    try:
        first = oc.json("start", "fast-a", "--port", str(free_port_pair()), "--wait")
        found = find_servers(with_gpus=False).find(first["id"])
        app = SpecmonApp(AppConfig(url=found.url, log_path=found.log, attached=found, emulator=True,
                                   sanity_check=False))  # fmt: skip
        async with app.run_test(size=(200, 50)) as pilot:
            assert await wait_for(pilot, lambda: app.current_state() == "ready", 30)
            os.kill(first["pid"], signal.SIGKILL)
            killed = time.monotonic()
            assert await wait_for(pilot, lambda: app.current_state() == "exited", 10), app.current_state()
            took = time.monotonic() - killed
            assert took < app.config.poll_interval_s + 2.0, took  # one poll, and its 1.5 s health timeout
            assert await wait_for(pilot, lambda: app.live.monitor.snapshot().state == "exited", 5)
            assert await wait_for(pilot, lambda: "exited ·" in screen_text(app), 5), screen_text(app)
            await pilot.press("q")
            assert await wait_for(pilot, lambda: app.return_code is not None or not app.is_running, 5), \
                "quit at once: a server that exited serves no traffic"
    finally:
        os.environ.pop("SPECMON_STATE_DIR", None)
        oc.cleanup()


def test_percentiles_inside_one_bucket_are_a_bound_not_a_figure() -> None:
    from specmon.live.quantiles import percentiles_ms
    from specmon.live.text import percentiles_text

    first = percentiles_ms(((0.1, 40.0), (0.25, 40.0), (float("inf"), 40.0)))  # every TTFT below 100 ms
    assert not any(q.known for _, q in first.quantiles) and first.within_ms == (0.0, 100.0)
    assert percentiles_text(first) == "< 100 ms"
    assert first.to_json() == {"p50": None, "p90": None, "p99": None, "within_ms": [0.0, 100.0]}
    middle = percentiles_ms(((0.1, 0.0), (0.25, 12.0), (float("inf"), 12.0)))
    assert percentiles_text(middle) == "100–250 ms"
    spread = percentiles_ms(((0.1, 10.0), (0.25, 40.0), (float("inf"), 40.0)))  # two buckets: interpolated
    assert spread.within_ms is None and spread.p90.value is not None and "/" in percentiles_text(spread)


def test_a_quantile_in_the_first_or_the_inf_bucket_is_a_bound_not_a_figure() -> None:
    """Not only when every observation is in one bucket: any quantile that falls in the first bucket is only
    below its bound, one in +Inf only above the highest finite bound (histogram_quantile would say 99 ms and
    0.25 s), in the text and in --once's JSON."""
    from specmon.live.quantiles import Quantile, percentiles_ms
    from specmon.live.text import percentiles_text

    fast = percentiles_ms(((0.1, 95.0), (0.25, 100.0), (float("inf"), 100.0)))  # p50, p90 under 100 ms; p99 not
    assert (fast.p50, fast.p90) == (Quantile(below=100.0), Quantile(below=100.0)) and fast.p99.value is not None
    assert percentiles_text(fast) == "< 100 / < 100 / 220 ms"
    assert fast.to_json() == {"p50": None, "p50_below": 100.0, "p90": None, "p90_below": 100.0, "p99": 220.0}
    slow = percentiles_ms(((0.1, 10.0), (0.25, 90.0), (float("inf"), 100.0)))  # p99 past the highest bound
    assert slow.p99 == Quantile(above=250.0) and percentiles_text(slow).endswith("/ > 250 ms")
    assert slow.to_json()["p99"] is None and slow.to_json()["p99_above"] == 250.0


def _stored_run(store, preset: str, accept: float, started_at: float, finish: str | None):
    """A run of `preset` in `store` whose requests accepted `accept` tokens per verify step; `finish`: its final
    status, or None for a run still going (no summary record yet)."""
    from specmon.bench.model import BenchResult, RequestResult
    from specmon.bench.run import new_run_id
    from specmon.bench.summary import summarize

    run = BenchResult(run_id=new_run_id(), preset=preset, url="http://127.0.0.1:30000", started_at=started_at)
    store.start_run(run)
    for i in range(6):
        request = RequestResult(index=i, prompt_id=f"p{i}", ok=True, completion_tokens=100,
                                spec_verify_ct=round(100 / accept), decode_tok_s=200.0, ttft_s=0.05, e2e_s=0.6)
        run.requests.append(request)
        store.add_request(run.run_id, request)
    if finish is not None:
        run.status, run.summary = finish, summarize(run.requests, 100, True)
        store.finish_run(run)
    return run


def test_the_bench_acceptance_beside_the_live_one_is_the_last_finished_run_s(tmp_path) -> None:
    """Never a run still going (read back from the store mid-run: a sweep in another terminal), cancelled or
    failed: in the app (its own results) and from the store alike."""
    from specmon.bench.report import last_finished_accept
    from specmon.bench.results import ResultStore
    from specmon.live.once import baseline_accept

    store = ResultStore(tmp_path)
    runs = [_stored_run(store, "eagle3-5", 2.5, 1000.0, "finished"),
            _stored_run(store, "eagle3-5", 1.25, 2000.0, "cancelled"),
            _stored_run(store, "eagle3-5", 1.0, 3000.0, None)]  # still going
    assert baseline_accept("eagle3-5", str(tmp_path)) == 2.5
    assert last_finished_accept(runs, "eagle3-5") == 2.5
    assert last_finished_accept(runs, "other") is None


def test_acceptance_rate_and_length_are_over_the_same_window() -> None:
    """SGLang's spec_accept_rate gauge is its last 40-step window's: beside a τ over the window it was a 0.1 s
    figure. Both are now over the window (the gauge's mean at the scrapes with traffic); idle scrapes, where the
    gauge keeps its last value, say nothing; without the verify counter τ is the gauge's mean the same way."""
    from specmon.live.tracker import LiveTracker
    from specmon.serving.prom import parse_scrape

    def scrape(t: int, decode: float, rate: float, accept: float, verify: bool = True):
        text = (f"# TYPE sglang:realtime_tokens_total counter\nsglang:realtime_tokens_total{{mode=\"decode\"}} {decode}\n"
                f"# TYPE sglang:generation_tokens_total counter\nsglang:generation_tokens_total {decode}\n"
                + (f"# TYPE sglang:spec_verify_calls_total counter\nsglang:spec_verify_calls_total {decode / 3}\n"
                   if verify else "")
                + f"# TYPE sglang:spec_accept_rate gauge\nsglang:spec_accept_rate {rate}\n"
                f"# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length {accept}\n"
                "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 1\n")
        return parse_scrape(text, float(t))

    for verify in (True, False):
        tracker = LiveTracker()
        tracker.set_server_info(EAGLE5_INFO)
        for t in range(0, 11):  # 10 s of traffic: the rate gauge 0.6, then 0.8, per decode window
            tracker.add_scrape(scrape(t, 300.0 * t, 0.6 if t <= 5 else 0.8, 2.6 if t <= 5 else 3.4, verify))
        snap = tracker.snapshot(10, 10)
        assert snap.accept_rate == pytest.approx(0.7), snap  # 5 scrapes at 0.6, 5 at 0.8: not the last's 0.8
        assert snap.accept_length == pytest.approx(3.0), snap  # Δgen / Δverify, or the gauge's 2.6 and 3.4
        tracker.add_scrape(scrape(11, 3000.0, 0.1, 1.1, verify))  # idle: gauges not refreshed by traffic
        idle = tracker.snapshot(10, 11)  # over 1..11 s: 4 scrapes at 0.6, 5 at 0.8, the idle one not at all
        assert idle.accept_rate == pytest.approx((4 * 0.6 + 5 * 0.8) / 9), idle
