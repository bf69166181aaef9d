"""Every place specmon reads a server, against a hostile one (tests/support/hostile_http.py): memory bounded by
the decoded size (not the bytes received: `Content-Encoding: gzip, gzip`), the whole answer within a deadline
(a server that drips or holds), strict JSON (no NaN, Infinity or 100,000 levels of nesting), a clear message
and never a traceback or a dead thread."""

from __future__ import annotations

import asyncio
import gzip
import json
import re
import subprocess
import sys
import time
import tracemalloc

import pytest

from specmon.gpu.demo import DemoGpuSource
from specmon.http.client import HttpClient
from specmon.http.errors import AnswerRefused
from specmon.live import scrape
from specmon.live.sampler import LiveMonitor, LiveSampler
from specmon.oncall.launcher import wait_ready
from specmon.serving.client import SGLangClient, SGLangError
from specmon.serving.poller import ServerPoller
from tests.support.hostile_http import (
    SGLANG_INFO,
    SGLANG_METRICS,
    Answer,
    HostileServer,
    bomb,
    bomb_answer,
    deep_json,
    routes_of,
)
from tests.support.peak_rss import peak_rss_mib

MIB = 1 << 20
BOMB = 256 * MIB
INFO_GZ = gzip.compress(SGLANG_INFO)

# name -> (the answer, what the refusal says). Each is read where /server_info is read.
HOSTILE_INFO = {
    "gzip, gzip bomb (1.8 KB)": (bomb_answer(BOMB, "gzip", "gzip"), "once decoded"),
    "gzip bomb": (bomb_answer(BOMB, "gzip"), "once decoded"),
    "deflate bomb": (bomb_answer(BOMB, "deflate"), "once decoded"),
    "gzip, deflate bomb": (bomb_answer(BOMB, "gzip", "deflate"), "once decoded"),
    "x-gzip bomb": (Answer(bomb(BOMB, "gzip"), encodings=("x-gzip",), encoded=True), "once decoded"),
    "three layers": (Answer(SGLANG_INFO, encodings=("gzip", "gzip", "gzip")), "3 layers"),
    "br": (Answer(SGLANG_INFO, encodings=("br",)), "'br' is not one specmon decodes"),
    "zstd": (Answer(SGLANG_INFO, encodings=("zstd",)), "'zstd' is not one specmon decodes"),
    "gzip header, plain body": (Answer(SGLANG_INFO, encodings=("gzip",), encoded=True), "broken gzip"),
    "truncated gzip": (Answer(INFO_GZ[:-40], encodings=("gzip",), encoded=True), "ends early"),
    "bytes after the gzip end": (Answer(INFO_GZ + b"x" * 1000, encodings=("gzip",), encoded=True), "after the end"),
    "50 MiB plain": (Answer(b"{", length=50 * MIB, endless=b" " * 65536), "once decoded"),
    "endless chunked": (Answer(b"{", framing="chunked", endless=b" " * 65536), "once decoded"),
    "endless until close": (Answer(b"{", framing="close", endless=b" " * 65536), "once decoded"),
    "dripped body": (Answer(SGLANG_INFO, drip_s=0.05), "no whole answer within"),
    "dripped head": (Answer(SGLANG_INFO, drip_s=0.05, drip_head=True), "within"),
    "head, then silence": (Answer(SGLANG_INFO, hold_s=float("inf")), "no whole answer within"),
    "nested 100,000 deep": (Answer(deep_json(100_000)), "nested deeper than 64 levels"),
    "objects nested 100,000 deep": (Answer(deep_json(100_000, "{")), "nested deeper than 64 levels"),
    "nested 65 deep": (Answer(deep_json(65, "{")), "nested deeper than 64 levels"),
    "NaN": (Answer(b'{"max_running_requests": NaN, "version": "0.5.16"}'), "not finite"),
    "Infinity": (Answer(b'{"max_total_num_tokens": Infinity}'), "not finite"),
    "-Infinity": (Answer(b'{"speculative_num_steps": -Infinity}'), "not finite"),
    "a 5,000-digit integer": (Answer(b'{"max_total_num_tokens": 1' + b"0" * 5000 + b"}"), "not JSON"),
    "a length that lies": (Answer(SGLANG_INFO, length=10**9), "RemoteProtocolError"),
}


def _bounded(call, limit_mb: float = 60.0, limit_s: float = 6.0):
    tracemalloc.start()
    started = time.monotonic()
    try:
        result = call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    elapsed = time.monotonic() - started
    assert peak < limit_mb * MIB, f"peak {peak / MIB:.0f} MiB"
    assert elapsed < limit_s, f"took {elapsed:.1f} s"
    return result


@pytest.mark.parametrize("name", list(HOSTILE_INFO))
def test_server_info_through_the_client_is_refused_with_the_reason(name):
    answer, says = HOSTILE_INFO[name]

    async def read():
        async with SGLangClient(server.url, timeout=1.0) as client:
            with pytest.raises(SGLangError) as caught:
                await client.server_info()
            return str(caught.value)

    with HostileServer(routes_of(info=answer)) as server:
        message = _bounded(lambda: asyncio.run(read()))
    assert says in message, message


@pytest.mark.parametrize("name", list(HOSTILE_INFO))
def test_server_info_for_the_live_view_is_refused_with_the_reason(name, monkeypatch):
    answer, says = HOSTILE_INFO[name]
    monkeypatch.setattr(scrape, "READ_DEADLINE_S", 1.0, raising=False)

    async def read():
        async with HttpClient(server.url, connect_timeout_s=1.0) as http:
            return await scrape.read_server_info(http)

    with HostileServer(routes_of(info=answer)) as server:
        reading = _bounded(lambda: asyncio.run(read()))
    assert reading.info is None
    assert reading.error is not None and says in reading.error, reading.error


HOSTILE_METRICS = {
    "gzip, gzip bomb": (bomb_answer(BOMB, "gzip", "gzip", content_type="text/plain"), "once decoded"),
    "deflate bomb": (bomb_answer(BOMB, "deflate", content_type="text/plain"), "once decoded"),
    "endless chunked": (Answer.text(b"# x\n", framing="chunked", endless=b"a 1\n" * 16384), "once decoded"),
    "dripped": (Answer.text(SGLANG_METRICS, drip_s=0.01), "no whole answer within"),
    "head, then silence": (Answer.text(SGLANG_METRICS, hold_s=float("inf")), "no whole answer within"),
    "br": (Answer.text(SGLANG_METRICS, encodings=("br",)), "not one specmon decodes"),
}


@pytest.mark.parametrize("name", list(HOSTILE_METRICS))
def test_metrics_for_the_live_view_and_check_are_refused_with_the_reason(name, monkeypatch):
    answer, says = HOSTILE_METRICS[name]
    monkeypatch.setattr(scrape, "READ_DEADLINE_S", 1.0, raising=False)

    async def read():
        async with HttpClient(server.url, connect_timeout_s=1.0) as http:
            live = await scrape.read_metrics(http, 0.0)
        async with SGLangClient(server.url, timeout=1.0) as client:
            with pytest.raises(SGLangError) as caught:
                await client.metrics()
        return live, str(caught.value)

    with HostileServer(routes_of(metrics=answer)) as server:
        live, message = _bounded(lambda: asyncio.run(read()), limit_s=8)
    assert live.scrape is not None and says in live.scrape.error, live
    assert not live.unreachable
    assert says in message, message


@pytest.mark.parametrize("name", ["gzip, gzip bomb (1.8 KB)", "dripped body", "dripped head", "head, then silence",
                                  "endless chunked", "br"])
def test_health_answers_unhealthy_with_the_reason_in_time(name):
    answer, _ = HOSTILE_INFO[name]

    async def read():
        async with SGLangClient(server.url, timeout=1.0) as client:
            return await client.health(timeout=1.0), await client.alive(timeout=1.0)

    with HostileServer(routes_of(health=answer, model_info=answer)) as server:
        health, alive = _bounded(lambda: asyncio.run(read()))
    assert not health.ok and health.error and health.state == "unhealthy", health
    assert not alive.ok and alive.error, alive


@pytest.mark.parametrize("name", ["gzip, gzip bomb (1.8 KB)", "dripped body", "endless chunked", "NaN",
                                  "nested 100,000 deep", "head, then silence"])
def test_the_emulator_gpu_feed_is_unavailable_with_the_reason(name):
    answer, says = HOSTILE_INFO[name]
    with HostileServer({"/_emulator/gpus": answer}) as server:
        source = DemoGpuSource(server.url + "/_emulator/gpus", timeout_s=1.0)
        try:
            snapshot = _bounded(source.read)
        finally:
            source.close()
    assert not snapshot.available and says in snapshot.reason, snapshot.reason


def test_a_gpu_feed_of_the_wrong_shape_is_malformed_not_a_crash():
    with HostileServer({"/_emulator/gpus": Answer.json([1, 2, 3])}) as server:
        source = DemoGpuSource(server.url + "/_emulator/gpus", timeout_s=1.0)
        snapshot = source.read()
        source.close()
    assert not snapshot.available and "malformed" in snapshot.reason


def test_waiting_for_ready_on_a_dripping_health_ends_at_its_timeout():
    with HostileServer(routes_of(health=Answer(b"x" * 1000, drip_s=0.1))) as server:
        started = time.monotonic()
        outcome = wait_ready(server.url, None, None, timeout=3.0)
    assert outcome.state == "timeout"
    assert time.monotonic() - started < 8  # each /health whole within 2 s, however it drips


def test_a_decoder_never_makes_more_than_its_limit():
    from specmon.http.decode import BodyDecoder

    decoder = BodyDecoder("gzip, gzip", 1 * MIB)
    body = bomb_answer(BOMB, "gzip", "gzip").body
    made = 0
    with pytest.raises(AnswerRefused, match="more than 1.0 MiB once decoded"):
        for i in range(0, len(body), 64):
            made += len(decoder.feed(body[i : i + 64]))
    assert made <= 1 * MIB
    assert BodyDecoder("identity", 10).feed(b"0123456789") == b"0123456789"
    with pytest.raises(AnswerRefused):
        BodyDecoder(None, 10).feed(b"01234567890")


# ----- threads that read servers keep going, whatever they read


def test_the_live_sampler_survives_every_hostile_answer_and_reads_the_good_one_after():
    server = HostileServer(routes_of()).start()
    monitor = LiveMonitor()
    sampler = LiveSampler(server.url, monitor, interval_s=0.05, info_s=0.05)
    hostile = [HOSTILE_INFO[name][0] for name in ("gzip, gzip bomb (1.8 KB)", "NaN", "nested 100,000 deep",
                                                   "endless chunked", "br")]
    original = monitor.tracker.add_scrape
    calls = []

    def add_scrape_failing_once(scrape_):
        calls.append(scrape_)
        if len(calls) == 1:
            raise RuntimeError("a shape nobody foresaw")
        original(scrape_)

    monitor.tracker.add_scrape = add_scrape_failing_once
    try:
        sampler.start()
        for answer in hostile:
            server.route("/server_info", answer)
            server.route("/metrics", answer)
            count = len(server.requests)
            deadline = time.monotonic() + 10
            while len(server.requests) < count + 4 and time.monotonic() < deadline:
                time.sleep(0.02)
        server.route("/server_info", Answer(SGLANG_INFO))
        server.route("/metrics", Answer.text(SGLANG_METRICS))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            snap = monitor.snapshot()
            if snap.source == "metrics" and snap.effective.get("algorithm") == "EAGLE3":
                break
            time.sleep(0.05)
        assert snap.source == "metrics" and snap.effective["algorithm"] == "EAGLE3", snap
        assert sampler._runner.thread.is_alive()
    finally:
        sampler.stop()
        server.stop()


def test_the_server_poller_survives_what_it_cannot_read_and_says_so(monkeypatch):
    from specmon.serving import poller as poller_module

    statuses = []
    real = poller_module.spec_settings
    failures = iter([RuntimeError("a shape nobody foresaw")])

    def failing_once(info):
        error = next(failures, None)
        if error is not None:
            raise error
        return real(info)

    monkeypatch.setattr(poller_module, "spec_settings", failing_once)
    with HostileServer(routes_of(info=Answer(SGLANG_INFO))) as server:
        poller = ServerPoller(server.url, statuses.append, interval_s=0.05, info_refresh_s=0.05)
        poller.start()
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not (statuses and statuses[-1].spec is not None):
                time.sleep(0.02)
        finally:
            poller.stop()
    assert any(s.state == "unhealthy" and "a shape nobody foresaw" in (s.last_error or "") for s in statuses)
    assert statuses[-1].state == "ready" and statuses[-1].spec.algorithm == "EAGLE3"


def test_the_poller_reads_absurd_settings_as_absurd_not_as_a_crash():
    info = json.loads(SGLANG_INFO) | {"speculative_num_steps": 10**400, "max_total_num_tokens": -5,
                                      "speculative_algorithm": {"x": 1}}
    statuses = []
    with HostileServer(routes_of(info=Answer.json(info))) as server:
        poller = ServerPoller(server.url, statuses.append, interval_s=0.05)
        poller.start()
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not (statuses and statuses[-1].spec is not None):
                time.sleep(0.02)
        finally:
            poller.stop()
    spec = statuses[-1].spec
    assert spec.num_steps is None and spec.max_total_num_tokens is None and spec.algorithm is None
    assert any("speculative_num_steps about 1e400 cannot be true" in a for a in spec.absurd)
    assert any("max_total_num_tokens -5 cannot be true" in a for a in spec.absurd)


# ----- the commands, as a user runs them: exit code, message, no traceback, peak memory


def _specmon(*args: str, tmp_path, timeout: float = 90) -> tuple[subprocess.CompletedProcess, float]:
    env = {"SPECMON_STATE_DIR": str(tmp_path / "state"), "XDG_STATE_HOME": str(tmp_path / "xdg"),
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "tests.support.peak_rss", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert "Traceback" not in done.stderr, done.stderr
    peak = peak_rss_mib(done.stderr)
    assert peak is not None, done.stderr
    return done, peak


BOMBS = {
    "/metrics gzip, gzip": routes_of(metrics=bomb_answer(BOMB, "gzip", "gzip", content_type="text/plain")),
    "/server_info gzip, gzip": routes_of(info=bomb_answer(BOMB, "gzip", "gzip")),
}


@pytest.mark.parametrize("where", list(BOMBS))
def test_monitor_once_check_and_bench_stay_small_against_a_bomb(where, tmp_path):
    with HostileServer(BOMBS[where]) as server:
        once, once_peak = _specmon("monitor", "--once", "--url", server.url, "--window", "1", "--json",
                                   tmp_path=tmp_path)
        check, check_peak = _specmon("check", "--url", server.url, tmp_path=tmp_path)
        bench, bench_peak = _specmon("bench", "--url", server.url, "--requests", "1", "--warmup", "0",
                                     "--stall-timeout", "3", "--deadline", "10", tmp_path=tmp_path)
    assert max(once_peak, check_peak, bench_peak) < 150, (once_peak, check_peak, bench_peak)
    alerts = json.loads(once.stdout)["alerts"]
    assert any("once decoded" in alert["text"] for alert in alerts), alerts
    assert check.returncode == 1 and "once decoded" in check.stdout, check.stdout
    if where.startswith("/server_info"):
        assert bench.returncode == 2 and "more than 4.0 MiB once decoded" in bench.stderr, bench.stderr


def test_monitor_once_has_a_deadline_on_a_dripping_server(tmp_path):
    routes = routes_of(info=Answer(SGLANG_INFO, drip_s=0.2), metrics=Answer.text(SGLANG_METRICS, drip_s=0.2))
    with HostileServer(routes) as server:
        started = time.monotonic()
        done, _ = _specmon("monitor", "--once", "--url", server.url, "--window", "1", "--json", tmp_path=tmp_path)
    assert time.monotonic() - started < 30
    texts = [alert["text"] for alert in json.loads(done.stdout)["alerts"]]
    assert any("no whole answer within 5 s" in text for text in texts), texts


def test_check_has_a_deadline_on_each_answer(tmp_path, monkeypatch, capsys):
    from specmon.cli import main
    from specmon.serving import check

    monkeypatch.setattr(check, "READ_TIMEOUT_S", 1.0, raising=False)
    monkeypatch.setattr(check, "HEALTH_TIMEOUT_S", 1.0, raising=False)
    for route in ("info", "metrics", "health"):
        dripping = Answer(SGLANG_INFO if route != "metrics" else SGLANG_METRICS, drip_s=0.05)
        with HostileServer(routes_of(**{route: dripping}, generate=Answer.json(
                {"text": "ok", "meta_info": {"completion_tokens": 64, "spec_verify_ct": 20}}))) as server:
            started = time.monotonic()
            assert main(["check", "--url", server.url]) == 1
        out = capsys.readouterr().out
        assert time.monotonic() - started < 10, route
        assert "within 1 s" in out, out


APP_CASES = {
    "gzip, gzip bombs": routes_of(info=bomb_answer(BOMB, "gzip", "gzip"),
                                  metrics=bomb_answer(BOMB, "gzip", "gzip", content_type="text/plain")),
    "Infinity and NaN in /server_info": routes_of(info=Answer(SGLANG_INFO.replace(
        b'"max_running_requests":48', b'"max_running_requests":Infinity').replace(
        b'"max_total_num_tokens":3221374', b'"max_total_num_tokens":NaN'))),
    "absurd /metrics, dripped /server_info": routes_of(
        info=Answer(SGLANG_INFO, drip_s=0.05),
        metrics=Answer.text(SGLANG_METRICS.replace(b"sglang:num_running_reqs{", b"sglang:num_running_reqs{x=\"9080022\",")
                            + b'sglang:num_running_reqs{tp_rank="7"} 9080022\n')),
    "HTTP 500 on /metrics": routes_of(metrics=Answer(b"oops", status=500, content_type="text/plain")),
    "terminal escapes in /server_info and /metrics": routes_of(
        info=Answer.json(json.loads(SGLANG_INFO) | {"version": "0.5.16\x1b[2J\u202e", "speculative_algorithm":
                                                    "EAGLE3\x1b]0;pwned\x07\x9b"}),
        metrics=Answer(b"\x1b[2Joops", status=500)),
}


APP_SAYS = {"gzip, gzip bombs": "once decoded", "Infinity and NaN in /server_info": "not finite",
            "absurd /metrics, dripped /server_info": "absurd",
            "HTTP 500 on /metrics": "HTTP 500 (Internal Server Error: oops)",
            "terminal escapes in /server_info and /metrics": "EAGLE3\\x1b]0;pwned\\x07\\x9b"}
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@pytest.mark.parametrize("name", list(APP_CASES))
def test_the_app_stays_up_and_small_whatever_the_server_sends(tmp_path, name):
    with HostileServer(APP_CASES[name]) as server:
        done, peak = _specmon("monitor", "--url", server.url, "--headless", "--duration", "8",
                              "--screenshot", str(tmp_path / "shot.svg"), tmp_path=tmp_path, timeout=120)
        asked = server.paths()
    assert done.returncode == 0, done.stderr
    assert "/metrics" in asked and "/server_info" in asked
    assert (tmp_path / "shot.svg").is_file()  # it ran to the end of its duration
    assert peak < 250, peak
    screen = (tmp_path / "shot.svg").read_text().replace("&#160;", " ")
    assert APP_SAYS[name] in screen, screen[-3000:]
    assert CONTROL.search(screen) is None, "a server's control characters reached the terminal"


def test_ps_reads_a_demo_servers_dripping_gpu_feed_within_its_deadline(tmp_path, monkeypatch):
    import psutil

    from specmon.oncall import state

    monkeypatch.setenv("SPECMON_STATE_DIR", str(tmp_path / "state"))
    sleeper = subprocess.Popen(["sleep", "120"])
    try:
        with HostileServer({"/_emulator/gpus": Answer(b" " * 10_000, drip_s=0.2)}) as server:
            state.save(state.ServerRecord(
                id="abc123", preset="demo-eagle3-10", argv=["sleep", "120"], pid=sleeper.pid, pgid=sleeper.pid,
                create_time=psutil.Process(sleeper.pid).create_time(), url="http://127.0.0.1:9", host="127.0.0.1",
                port=9, log=str(tmp_path / "x.log"), started_at=time.time(), demo=True,
                gpu_url=server.url + "/_emulator/gpus"))
            started = time.monotonic()
            done, _ = _specmon("ps", "--json", tmp_path=tmp_path)
            took = time.monotonic() - started
    finally:
        sleeper.kill()
        sleeper.wait()
    assert took < 15, took
    ours = [s for s in json.loads(done.stdout)["servers"] if s["id"] == "abc123"]
    assert len(ours) == 1 and ours[0]["alive"]
    assert ours[0]["gpu_memory_mib"] is None  # the feed never came whole: no figure, not a hang


def test_bench_stops_at_its_stall_timeout_on_a_server_that_holds_every_answer(tmp_path):
    hold = Answer(SGLANG_INFO, hold_s=float("inf"))
    routes = routes_of(info=Answer(SGLANG_INFO), metrics=Answer.text(SGLANG_METRICS, hold_s=float("inf")),
                       flush_cache=hold, generate=hold)
    with HostileServer(routes) as server:
        started = time.monotonic()
        done, _ = _specmon("bench", "--url", server.url, "--requests", "2", "--warmup", "0", "--stall-timeout", "2",
                           "--deadline", "20", "--json", tmp_path=tmp_path)
    assert time.monotonic() - started < 40
    summary = json.loads(done.stdout)
    assert done.returncode == 1 and summary["summary"]["requests_failed"] == 2, summary["summary"]


GPU = {"index": 0, "name": "Emulated NVIDIA H200", "memory_used_mib": 1000.0, "memory_total_mib": 143771.0,
       "util_gpu_pct": 50.0, "temp_c": 40.0, "power_w": 300.0, "processes": [{"pid": 1234, "used_mib": 900.0}]}


@pytest.mark.parametrize(("change", "says"), [
    ({}, None),
    ({"memory_used_mib": 1e300}, "memory_used_mib 1e+300 cannot be true"),
    ({"memory_used_mib": 200_000.0}, "more than the GPU's 143,771 MiB"),
    ({"temp_c": 1e9}, "temp_c 1,000,000,000 cannot be true"),
    ({"util_gpu_pct": -5}, "util_gpu_pct -5 cannot be true"),
    ({"processes": [{"pid": 10**30, "used_mib": 1.0}]}, "a process's pid about 1e30 cannot be true"),
    ({"processes": [{"pid": 5, "used_mib": 1e300}]}, "a process's used_mib 1e+300 cannot be true"),
    ({"name": "x" * 5000}, "name 'xxxxxxxx"),
])
def test_the_emulator_gpu_feeds_absurd_figures_are_shown_as_absurd_never_drawn(change, says):
    feed = {"available": True, "gpus": [GPU | change]}
    with HostileServer({"/_emulator/gpus": Answer.json(feed)}) as server:
        source = DemoGpuSource(server.url + "/_emulator/gpus", timeout_s=2.0)
        snapshot = source.read()
        source.close()
    reading = snapshot.gpus[0]
    if says is None:
        assert reading.error is None and reading.memory_used_mib == 1000.0 and reading.processes
    else:
        assert reading.error.startswith("absurd: ") and says in reading.error, reading.error
        assert not reading.processes
        for name in change:
            if name != "processes":
                assert getattr(reading, name) is None


async def test_a_blocking_fetcher_works_from_a_thread_that_runs_an_event_loop():
    with HostileServer({"/_emulator/gpus": Answer.json({"available": True, "gpus": [GPU]})}) as server:
        source = DemoGpuSource(server.url + "/_emulator/gpus", timeout_s=2.0)
        snapshot = source.read()  # the app's thread runs Textual's loop: the read goes to a worker thread
        source.close()
    assert snapshot.available and snapshot.gpus[0].memory_used_mib == 1000.0


# ----- a /metrics answer that is no success, or no Prometheus text, is said: a state and an alert

UNREADABLE_METRICS = {
    "HTTP 500": (Answer(b"Internal Server Error", status=500, content_type="text/plain"),
                 "GET /metrics: HTTP 500 (Internal Server Error)"),
    "HTTP 503, a JSON body": (Answer.json({"detail": "scheduler \x1b[2Jdown"}, status=503),
                              'HTTP 503 (Service Unavailable: {"detail": "scheduler \\u001b[2Jdown"})'),
    "HTTP 401": (Answer(b"", status=401), "GET /metrics: HTTP 401 (Unauthorized)"),
    "HTTP 302": (Answer(b"", status=302, headers=(("Location", "/login"),)), "GET /metrics: HTTP 302 (Found)"),
    "HTTP 599": (Answer(b"\x1b]0;pwned\x07", status=599), "GET /metrics: HTTP 599 (\\x1b]0;pwned\\x07)"),
    "an HTML page": (Answer(b"<html><body>login</body></html>", content_type="text/html"), "no Prometheus sample"),
    "binary": (Answer.text(b"\x00\x01\x02 {{{\n"), "no Prometheus sample"),
    "a gzip bomb": (bomb_answer(BOMB, "gzip", "gzip", content_type="text/plain"), "once decoded"),
}


@pytest.mark.parametrize("name", list(UNREADABLE_METRICS))
def test_monitor_once_says_a_metrics_answer_it_cannot_read(name, tmp_path):
    answer, says = UNREADABLE_METRICS[name]
    with HostileServer(routes_of(metrics=answer)) as server:
        as_json, _ = _specmon("monitor", "--once", "--url", server.url, "--window", "1", "--json", tmp_path=tmp_path)
        as_text, _ = _specmon("monitor", "--once", "--url", server.url, "--window", "1", tmp_path=tmp_path)
    snapshot = json.loads(as_json.stdout)
    assert snapshot["state"] == "unreadable", snapshot
    assert [a["severity"] for a in snapshot["alerts"] if says in a["text"]] == ["error"], snapshot["alerts"]
    assert as_json.returncode == as_text.returncode == 1
    assert as_text.stdout.startswith("state unreadable,"), as_text.stdout
    assert any(line.startswith("! error: ") and says in line for line in as_text.stdout.splitlines()), as_text.stdout
    assert "\x1b" not in as_text.stdout + as_json.stdout and "\x07" not in as_text.stdout


def test_the_live_view_says_each_unreadable_metrics_answer_and_reads_the_good_one_after():
    server = HostileServer(routes_of()).start()
    monitor = LiveMonitor()
    sampler = LiveSampler(server.url, monitor, interval_s=0.05, info_s=60)

    def wait_for(check) -> object:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            snap = monitor.snapshot()
            if check(snap):
                return snap
            time.sleep(0.02)
        return snap

    try:
        sampler.start()
        assert wait_for(lambda s: s.source == "metrics").state in ("idle", "serving")
        for name, (answer, says) in UNREADABLE_METRICS.items():
            server.route("/metrics", answer)
            snap = wait_for(lambda s, says=says: any(says in a.text for a in s.alerts))
            assert snap.state == "unreadable", (name, snap.state, snap.alerts)
            assert [a.severity for a in snap.alerts if says in a.text] == ["error"], (name, snap.alerts)
            server.route("/metrics", Answer.text(SGLANG_METRICS))
            assert wait_for(lambda s: s.source == "metrics").state in ("idle", "serving"), name
    finally:
        sampler.stop()
        server.stop()


def test_no_metrics_or_none_of_sglangs_series_is_said_not_shown_as_idle(tmp_path):
    cases = {"HTTP 404": (Answer(b'{"detail":"Not Found"}', status=404), "info", "without --enable-metrics"),
             "empty": (Answer.text(b""), "warning", "none of the sglang:* series specmon reads"),
             "another program's": (Answer.text(b"# TYPE up gauge\nup 1\n"), "warning", "none of the sglang:*")}
    for name, (answer, severity, says) in cases.items():
        with HostileServer(routes_of(metrics=answer)) as server:
            done, _ = _specmon("monitor", "--once", "--url", server.url, "--window", "1", "--json",
                               tmp_path=tmp_path)
        snapshot = json.loads(done.stdout)
        assert snapshot["state"] == "waiting", (name, snapshot)
        assert [a["severity"] for a in snapshot["alerts"] if says in a["text"]] == [severity], (name, snapshot)


# ----- a header value from a file or the environment that cannot be sent: refused in one line, nothing sent

BAD_KEYS = {"non-ASCII": "sk-SECRET-caf\u00e9", "beyond Latin-1": "sk-SECRET-\u0100\u4e2d",
            "a newline": "sk-SECRET\nX-Evil: 1", "a control character": "sk-SECRET\x1b[2J", "DEL": "sk-SECRET\x7f"}
KEYED = {
    "check --url": ["check", "--url", "{url}"],
    "monitor --once": ["monitor", "--once", "--url", "{url}", "--window", "1"],
    "monitor (the app)": ["monitor", "--url", "{url}", "--headless", "--duration", "2"],
    "bench": ["bench", "--url", "{url}", "--requests", "1", "--warmup", "0", "--deadline", "10"],
    "sweep": ["sweep", "never-base", "never-spec", "--requests", "1", "--presets", "{presets}"],
    "switch": ["switch", "never-spec", "--from", "nothing-running", "--presets", "{presets}"],
}
NEVER_PRESETS = {"never-base": "", "never-spec": 'speculative-algorithm = "NGRAM"\n'}
"""Presets a sweep or switch here may name: their launcher does not exist, so nothing starts whatever goes wrong."""


KEY_SOURCES = [(command, "env") for command in KEYED] + [("check --url", "file"), ("bench", "file")]


@pytest.mark.parametrize("bad", list(BAD_KEYS))
@pytest.mark.parametrize(("command", "source"), KEY_SOURCES)
def test_an_api_key_that_cannot_go_in_a_header_is_refused_in_one_line(tmp_path, command, source, bad):
    key = BAD_KEYS[bad]
    presets = tmp_path / "presets"
    presets.mkdir()
    for name, spec in NEVER_PRESETS.items():
        (presets / f"{name}.toml").write_text(f'name = "{name}"\n[server]\nlauncher = ["/nonexistent/never"]\n'
                                              f'[server.args]\nmodel-path = "m"\nport = 9\n{spec}')
    argv = [part.replace("{presets}", str(presets)) for part in KEYED[command]]
    env = {"SPECMON_STATE_DIR": str(tmp_path / "state"), "XDG_STATE_HOME": str(tmp_path / "xdg"),
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    if source == "file":
        (tmp_path / "key").write_text(key + "\n")
        (tmp_path / "key").chmod(0o600)  # one others may read adds its warning line
        argv += ["--api-key-file", str(tmp_path / "key")]
        where = f"the API key file {tmp_path / 'key'}"
    else:
        env["SPECMON_API_KEY"] = key
        where = "$SPECMON_API_KEY"
    with HostileServer(routes_of()) as server:
        done = subprocess.run([sys.executable, "-m", "specmon", *(a.replace("{url}", server.url) for a in argv)],
                              capture_output=True, text=True, timeout=60, env=env)
        asked = server.paths()
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stdout == "", done.stdout
    assert done.stderr.count("\n") == 1 and where in done.stderr and "printable ASCII only" in done.stderr
    assert "SECRET" not in done.stderr  # the key itself is never printed
    assert asked == [], asked  # nothing was sent without it, or with it cut


def test_a_bearer_token_file_that_cannot_go_in_a_header_is_refused(tmp_path, capsys):
    from specmon.cli import main

    with HostileServer({}) as prometheus:
        for bad, token in BAD_KEYS.items():
            (tmp_path / "token").write_text(token)
            assert main(["fleet", "--prometheus", prometheus.url, "--bearer-token-file", str(tmp_path / "token"),
                         "--once"]) == 2, bad
            err = capsys.readouterr().err
            assert "printable ASCII only" in err and str(tmp_path / "token") in err, err
        assert prometheus.paths() == []


def test_the_one_header_builder_takes_printable_ascii_only():
    from specmon.http.headers import HeaderRefused, auth_headers

    assert auth_headers(None) == {} and auth_headers("") == {}
    assert auth_headers("sk-abc_DEF.123~+/=") == {"Authorization": "Bearer sk-abc_DEF.123~+/="}
    for bad in BAD_KEYS.values():
        with pytest.raises(HeaderRefused, match="the API key holds") as refused:
            auth_headers(bad)
        assert bad not in str(refused.value)
