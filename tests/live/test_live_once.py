"""`specmon monitor --once --json` against real HTTP: the emulator under a concurrent benchmark (the live
acceptance agrees with the benchmark's), a server without /metrics (the log is the source), and the replay
server of real SGLang 0.5.16 answers."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx

from specmon.ports import free_port_pair
from tests.emulator.test_emulator import EAGLE3, launch
from tests.support.serving_replay import ReplayServer

KEYS = {"state", "source", "window_s", "window_from", "window_to", "decode_tok_s", "running", "queued", "max_running", "kv_used", "kv_total",
        "accept_length", "accept_rate", "ttft_ms", "itl_ms", "e2e_ms", "cache_hit_rate", "effective", "restarts",
        "alerts", "startup_s", "absurd", "speculation_pays",
        "traffic"}  # traffic: null unless the request records are local


def specmon(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specmon", *args], capture_output=True, text=True,
                          timeout=timeout)


def once(url: str, *extra: str) -> dict:
    done = specmon("monitor", "--url", url, "--once", "--json", *extra)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def test_once_under_a_concurrent_benchmark_agrees_with_it(tmp_path):
    server = launch(tmp_path, *EAGLE3, "--emulator-speed", "50", "--emulator-decode-speed", "5", "--enable-metrics")
    try:
        server.wait_ready()
        url = f"http://127.0.0.1:{server.port}"
        bench = subprocess.Popen(
            [sys.executable, "-m", "specmon", "bench", "--url", url, "--concurrency", "4", "--requests", "48",
             "--warmup", "0", "--max-new-tokens", "256", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # wait until the benchmark's requests are running
            text = httpx.get(url + "/metrics", timeout=5).text
            if "sglang:num_requests_total" in text and 'num_requests_total{engine_type="unified"' in text:
                break
            time.sleep(0.1)
        asked_at = time.time()
        snap = once(url, "--window", "6", "--log", str(server.log_path))
        answered_at = time.time()
        out, err = bench.communicate(timeout=120)
        assert bench.returncode == 0, err
    finally:
        server.stop()
    assert set(snap) == KEYS
    assert snap["state"] == "serving" and snap["source"] == "metrics"
    # the window's first and last scrape: inside the command's lifetime, about --window apart (1 s scrapes)
    assert asked_at <= snap["window_from"] < snap["window_to"] <= answered_at
    assert 4.5 <= snap["window_to"] - snap["window_from"] <= 6.5
    assert snap["decode_tok_s"] > 0 and snap["max_running"] and snap["kv_total"]
    assert snap["effective"]["algorithm"] == "EAGLE3" and snap["effective"]["num_draft_tokens"] == 4
    assert snap["ttft_ms"]["p50"] is not None or snap["ttft_ms"]["within_ms"]  # one bucket: only its bounds
    assert snap["itl_ms"]["p99"] is not None or snap["itl_ms"]["within_ms"]
    bench_accept = json.loads(out)["summary"]["accept_length"]["token_weighted"]
    assert abs(snap["accept_length"] - bench_accept) / bench_accept < 0.05, (snap["accept_length"], bench_accept)


def test_once_without_metrics_reads_the_log(tmp_path):
    server = launch(tmp_path, *EAGLE3, "--emulator-speed", "50", "--emulator-decode-speed", "5")
    try:
        server.wait_ready()
        url = f"http://127.0.0.1:{server.port}"
        for _ in range(3):
            httpx.post(url + "/generate", json={"text": "hello", "sampling_params": {"max_new_tokens": 200,
                                                                                    "ignore_eos": True}}, timeout=30)
        deadline = time.monotonic() + 10
        while "Decode batch" not in server.log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        snap = once(url, "--window", "60", "--log", str(server.log_path))
    finally:
        server.stop()
    assert snap["source"] == "log" and snap["window_from"] is None and snap["window_to"] is None
    assert 1.5 < snap["accept_length"] < 5 and snap["decode_tok_s"] is not None
    assert snap["ttft_ms"] == {"p50": None, "p90": None, "p99": None}


def test_once_against_real_0516_answers():
    with ReplayServer() as server:
        snap = once(server.url, "--window", "1")
    assert snap["source"] == "metrics" and snap["state"] == "idle"
    assert snap["kv_total"] == 3221374 and snap["max_running"] == 48
    assert snap["effective"]["algorithm"] == "EAGLE3"


def test_once_unreachable_exits_1():
    port = free_port_pair()
    done = specmon("monitor", "--url", f"http://127.0.0.1:{port}", "--once", "--json", "--window", "1")
    assert done.returncode == 1 and json.loads(done.stdout)["state"] == "unreachable"
