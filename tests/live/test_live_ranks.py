"""The Live view's rank merging (specmon/serving/prom.py) on the emulator's per-rank series, over real HTTP: with a
DP2 x TP2 launch that reports from every scheduler, DP ranks are summed and TP replicas counted once, in one
scrape and in `specmon monitor --once --json` under load."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specmon.serving.prom import parse_scrape
from tests.emulator.test_emulator import EAGLE3, launch
from tests.live.test_live_once import once

pytestmark = pytest.mark.timeout(120)

DP2_TP2 = ["--tp-size", "2", "--dp-size", "2", "--enable-metrics-for-all-schedulers", "--enable-metrics"]


def by_rank(text: str, name: str, **match: str) -> dict[tuple[str, str], float]:
    """{(dp_rank, tp_rank): value} of one series, read straight from the exposition text."""
    return {
        (s.labels["dp_rank"], s.labels["tp_rank"]): s.value
        for f in text_string_to_metric_families(text) for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in match.items())
    }


def tp0_sum(values: dict[tuple[str, str], float]) -> float:
    """What the merge must give: each DP rank once (its TP rank 0), added up."""
    for (dp, tp), value in values.items():
        assert value == values[(dp, "0")], f"TP rank {tp} of DP rank {dp} is no replica of TP rank 0"
    return sum(v for (_dp, tp), v in values.items() if tp == "0")


def keep_busy(url: str, stop: threading.Event, tokens: int = 400) -> list[threading.Thread]:
    def loop(i: int) -> None:
        while not stop.is_set():
            body = {"text": f"busy {i}", "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}}
            try:
                httpx.post(url + "/generate", json=body, timeout=60)
            except httpx.HTTPError:
                return  # the server was stopped under it

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(4)]
    for thread in threads:
        thread.start()
    return threads


def test_one_scrape_sums_dp_ranks_and_counts_tp_replicas_once(tmp_path):
    server = launch(tmp_path, *EAGLE3, *DP2_TP2, "--emulator-speed", "50", "--emulator-decode-speed", "2")
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        server.wait_ready()
        threads = keep_busy(server.url, stop)
        deadline = time.monotonic() + 30
        while True:  # until both DP ranks have reported a running batch
            text = httpx.get(server.url + "/metrics", timeout=5).text
            running = by_rank(text, "sglang:num_running_reqs")
            if len(running) == 4 and all(running.values()):
                break
            assert time.monotonic() < deadline, running
            time.sleep(0.1)
    finally:
        stop.set()
        server.stop()
        for thread in threads:
            thread.join(10)
    merged = parse_scrape(text, taken_at=0.0)
    assert merged.error is None
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:num_used_tokens",
                 "sglang:max_total_num_tokens", "sglang:gen_throughput"):
        assert merged.gauge(name) == pytest.approx(tp0_sum(by_rank(text, name))), name
    usage = by_rank(text, "sglang:token_usage")
    assert merged.gauge("sglang:token_usage") == pytest.approx(tp0_sum(usage) / 2)  # a ratio: averaged over DP
    decode = by_rank(text, "sglang:realtime_tokens_total", mode="decode")
    assert merged.counter("sglang:realtime_tokens_total{mode=decode}") == pytest.approx(tp0_sum(decode))
    assert merged.per_dp["sglang:num_running_reqs"] == {dp: running[(dp, "0")] for dp in ("0", "1")}
    everything = sum(by_rank(text, "sglang:max_total_num_tokens").values())
    assert merged.gauge("sglang:max_total_num_tokens") == everything / 2  # a plain sum would count TP twice


def test_once_on_dp2_tp2_under_load_counts_tp_replicas_once(tmp_path):
    server = launch(tmp_path, *EAGLE3, *DP2_TP2, "--emulator-speed", "50", "--emulator-decode-speed", "5")
    stop = threading.Event()
    threads: list[threading.Thread] = []
    try:
        server.wait_ready()
        threads = keep_busy(server.url, stop, tokens=120)
        first = httpx.get(server.url + "/metrics", timeout=5).text
        started = time.monotonic()
        snap = once(server.url, "--window", "4")
        elapsed = time.monotonic() - started
        last = httpx.get(server.url + "/metrics", timeout=5).text
    finally:
        stop.set()
        server.stop()
        for thread in threads:
            thread.join(10)
    per_rank = by_rank(last, "sglang:max_total_num_tokens")
    assert snap["source"] == "metrics" and snap["state"] == "serving"
    assert snap["kv_total"] == per_rank[("0", "0")] + per_rank[("1", "0")]
    generated = [sum(s.value for f in text_string_to_metric_families(t) for s in f.samples
                     if s.name == "sglang:generation_tokens_total") for t in (first, last)]
    reference = (generated[1] - generated[0]) / elapsed  # the tokenizer's count: no ranks to merge
    assert 0.6 < snap["decode_tok_s"] / reference < 1.6, (snap["decode_tok_s"], reference)
    assert 2.0 < snap["accept_length"] < 4.0  # 4 draft tokens at the emulator's 0.75 per-token acceptance

