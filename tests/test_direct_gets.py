"""The pollers' GETs on one kept-alive connection (`bounded_http.DirectGets`): what a plain http:// server is
asked once a second, idle, at a fraction of httpx's CPU, with the same answers and the same bounds (the hostile
answers of tests/test_hostile_servers.py are read through both clients there)."""

from __future__ import annotations

import time

import httpx
import pytest

from specmon.bounded_http import DirectGets, fetch
from specmon.h1_connection import MAX_HEAD
from specmon.live.sampler import LiveMonitor, LiveSampler
from specmon.serving.client import MAX_METRICS_BYTES, SGLangClient, reading_client
from specmon.serving.poller import ServerPoller
from tests.support.hostile_http import SGLANG_INFO, Answer, HostileServer
from tests.support.serving_replay import ReplayServer
from tests.test_bench_hostile import Hostile


async def test_many_gets_share_one_connection_and_read_what_httpx_reads():
    with ReplayServer() as server:
        async with DirectGets(server.url) as direct, httpx.AsyncClient(base_url=server.url) as http:
            for path in ("/metrics", "/server_info", "/model_info", "/health", "/nowhere"):
                ours = await fetch(direct, "GET", path, limit=MAX_METRICS_BYTES, deadline_s=5)
                theirs = await fetch(http, "GET", path, limit=MAX_METRICS_BYTES, deadline_s=5)
                assert (ours.status_code, ours.content) == (theirs.status_code, theirs.content), path
                assert ours.headers["content-type"] == theirs.headers["content-type"]
            for _ in range(20):
                await fetch(direct, "GET", "/metrics", limit=MAX_METRICS_BYTES, deadline_s=5)
        asked = [r for r in server.behaviour.requests if r["authorization"] is None]
    direct_ports = {r["client_port"] for r in asked[0::2][:5]} | {r["client_port"] for r in asked[10:]}
    assert len(asked) == 30
    assert len(direct_ports) == 1, "each GET opened a connection of its own"


async def test_a_server_that_closes_each_kept_connection_is_asked_again_on_a_new_one():
    # uvicorn closes an idle kept connection after 5 s; this server closes it after every answer, at once.
    with HostileServer({"/server_info": Answer(SGLANG_INFO)}) as server:
        async with DirectGets(server.url) as direct:
            for _ in range(30):
                answer = await fetch(direct, "GET", "/server_info", limit=1 << 20, deadline_s=5)
                assert answer.status_code == 200 and answer.content == SGLANG_INFO
        assert len(server.requests) == 30


async def test_the_api_key_goes_as_a_bearer_header_and_one_that_would_inject_a_header_is_not_sent():
    with ReplayServer(api_key="k-123") as server:
        async with reading_client(server.url, "k-123") as direct:
            assert isinstance(direct, DirectGets)
            answer = await fetch(direct, "GET", "/server_info", limit=1 << 22, deadline_s=5)
        assert answer.status_code == 200
        async with DirectGets(server.url, {"Authorization": "Bearer k\r\nX-Evil: 1"}) as direct:
            with pytest.raises(httpx.LocalProtocolError, match="not sent"):
                await fetch(direct, "GET", "/server_info", limit=1 << 22, deadline_s=5)
        assert [r["authorization"] for r in server.behaviour.requests] == ["Bearer k-123"]


async def test_nothing_listening_is_a_connect_error_and_a_post_is_refused():
    with ReplayServer() as server:
        url = server.url
    async with DirectGets(url) as direct:
        with pytest.raises(httpx.ConnectError):
            await fetch(direct, "GET", "/metrics", limit=1 << 20, deadline_s=5)
        with pytest.raises(ValueError, match="plain GETs"):
            await fetch(direct, "POST", "/generate", limit=1 << 20, deadline_s=5)


def test_loopback_and_proxyless_servers_are_read_directly_proxied_ones_through_httpx(monkeypatch):
    monkeypatch.setenv("http_proxy", "http://proxy.invalid:3128")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert isinstance(reading_client("http://127.0.0.1:5"), DirectGets)
    assert isinstance(reading_client("https://127.0.0.1:5"), httpx.AsyncClient)
    assert isinstance(reading_client("http://10.0.0.1:5"), httpx.AsyncClient)


async def test_a_get_costs_under_half_the_cpu_of_httpx():
    """The reason DirectGets exists: an idle app's pollers cost what their GETs cost (httpx ~2 ms of CPU each on
    the dev VM, DirectGets ~0.5 ms). CPU of this thread only (the server runs on its own threads)."""

    async def cpu_per_get(client) -> float:
        for _ in range(5):
            await fetch(client, "GET", "/model_info", limit=1 << 20, deadline_s=5)
        started = time.thread_time()
        for _ in range(100):
            await fetch(client, "GET", "/model_info", limit=1 << 20, deadline_s=5)
        return (time.thread_time() - started) / 100

    with ReplayServer() as server:
        async with DirectGets(server.url) as direct, httpx.AsyncClient(base_url=server.url) as http:
            ours = min([await cpu_per_get(direct), await cpu_per_get(direct)])
            theirs = min([await cpu_per_get(http), await cpu_per_get(http)])
    assert ours < theirs / 2, f"DirectGets {ours * 1e3:.2f} ms a GET, httpx {theirs * 1e3:.2f} ms"


def _wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_app_pollers_keep_one_connection_each():
    with ReplayServer() as server:
        statuses = []
        poller = ServerPoller(server.url, statuses.append, interval_s=0.05)
        monitor = LiveMonitor()
        sampler = LiveSampler(server.url, monitor, interval_s=0.05)
        poller.start()
        sampler.start()
        try:
            _wait_for(lambda: sum(r["path"] == "/metrics" for r in server.behaviour.requests) >= 10
                      and sum(r["path"] == "/model_info" for r in server.behaviour.requests) >= 10)
        finally:
            poller.stop()
            sampler.stop()
        requests = list(server.behaviour.requests)
    assert statuses and statuses[-1].state == "ready" and statuses[-1].spec is not None
    snapshot = monitor.snapshot()
    assert snapshot.source == "metrics" and snapshot.effective, snapshot
    ports = {r["client_port"] for r in requests}
    assert len(ports) <= 3, f"{len(requests)} GETs on {len(ports)} connections"  # poller, sampler, maybe a /health


async def test_sglang_client_gets_go_direct_and_its_posts_through_httpx():
    with ReplayServer() as server:
        async with SGLangClient(server.url) as client:
            assert (await client.alive()).ok
            assert await client.flush_cache()
            assert (await client.metrics()) is not None
    assert [r["method"] for r in server.behaviour.requests] == ["GET", "POST", "GET"]


@pytest.mark.parametrize(
    "answer, error",
    [
        pytest.param(b"HTTP/1.1 200 OK\r\nx-pad: " + b"a" * (MAX_HEAD + 1) + b"\r\ncontent-length: 2\r\n\r\n{}",
                     f"a response head over {MAX_HEAD} bytes", id="long-head-at-once"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}", "peer closed connection", id="length-cut"),
        pytest.param(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n2\r\n{}\r\n",
                     "peer closed connection", id="chunks-cut"),
        pytest.param(b"", "Server disconnected without sending a response", id="no-answer"),
    ],
)
async def test_a_long_head_or_a_framed_body_cut_short_is_a_protocol_error_named_for_its_request(answer, error):
    """The framing `bench.h1`'s streams share (`h1_connection`): the same bounds, with httpx's classes here."""

    async def script(writer):
        writer.write(answer)
        await writer.drain()

    async with Hostile(script) as server, DirectGets(server.url) as direct:
        with pytest.raises(httpx.RemoteProtocolError, match=error) as raised:
            await fetch(direct, "GET", "/server_info", limit=1 << 20, deadline_s=5)
    assert str(raised.value).startswith("GET /server_info: ")


async def test_a_body_that_runs_to_the_close_is_read_whole_each_time():
    async def script(writer):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + SGLANG_INFO)
        await writer.drain()

    async with Hostile(script) as server, DirectGets(server.url) as direct:
        for _ in range(2):
            answer = await fetch(direct, "GET", "/server_info", limit=1 << 20, deadline_s=5)
            assert (answer.status_code, answer.content) == (200, SGLANG_INFO)
        assert len(server.requests) == 2
