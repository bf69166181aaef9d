"""specmon's one HTTP client (`specmon.http.client.HttpClient`, over aiohttp): what the pollers, `check`, the
Live view and the benchmark ask with. The same answers as an independent client (httpx), the API key as a
Bearer header and never a header that would inject another, each request on a connection of its own that is
closed once its answer is read, the proxy rule, and a GET's CPU (what an idle app's pollers cost). The
hostile answers of tests/hostile/test_hostile_servers.py and the framing of tests/hostile/test_http_framing.py are read
through it there."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from specmon.http.client import MAX_HEAD_LINE, MAX_HEADERS, HttpClient
from specmon.http.errors import ConnectError, RemoteProtocolError, RequestRefused
from specmon.http.headers import auth_headers
from specmon.live.sampler import LiveMonitor, LiveSampler
from specmon.ports import free_port
from specmon.serving.client import MAX_METRICS_BYTES, SGLangClient
from specmon.serving.poller import ServerPoller
from specmon.urls import proxy_for
from tests.bench.test_bench_hostile import Hostile
from tests.support.hostile_http import SGLANG_INFO, Answer, HostileServer
from tests.support.raw_http import RawRequest, RawServer, answer
from tests.support.serving_replay import ReplayServer

REPLAY = Path(__file__).parents[1] / "support" / "serving_replay.py"


async def test_gets_read_what_an_independent_client_reads():
    with ReplayServer() as server:
        async with HttpClient(server.url) as ours, httpx.AsyncClient(base_url=server.url) as theirs:
            for path in ("/metrics", "/server_info", "/model_info", "/health", "/nowhere"):
                mine = await ours.fetch("GET", path, limit=MAX_METRICS_BYTES, deadline_s=5)
                other = await theirs.get(path)
                assert (mine.status_code, mine.content) == (other.status_code, other.content), path
                assert mine.headers["content-type"] == other.headers["content-type"]
    assert len(server.behaviour.requests) == 10


async def test_each_request_has_a_connection_of_its_own_closed_once_its_answer_is_read():
    async def script(request: RawRequest):
        return [answer(b'{"n": %d}' % request.number)]  # keep-alive offered: the client is the one to close

    async with RawServer(script) as server, HttpClient(server.url) as client:
        for n in range(1, 6):
            got = await client.fetch("GET", "/model_info", limit=1 << 10, deadline_s=5)
            assert got.content == b'{"n": %d}' % n
        deadline = time.monotonic() + 10
        while server.closed < 5 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    assert [r.connection for r in server.requests] == [1, 2, 3, 4, 5]
    assert server.closed == 5, "a connection was left open after its answer"


async def test_a_server_that_closes_each_kept_connection_is_asked_again_on_a_new_one():
    # uvicorn closes an idle kept connection after 5 s; this server closes it after every answer, at once.
    with HostileServer({"/server_info": Answer(SGLANG_INFO)}) as server:
        async with HttpClient(server.url) as client:
            for _ in range(30):
                got = await client.fetch("GET", "/server_info", limit=1 << 20, deadline_s=5)
                assert got.status_code == 200 and got.content == SGLANG_INFO
        assert len(server.requests) == 30


async def test_the_api_key_goes_as_a_bearer_header_and_one_that_would_inject_a_header_is_not_sent():
    with ReplayServer(api_key="k-123") as server:
        async with HttpClient(server.url, headers=auth_headers("k-123")) as client:
            got = await client.fetch("GET", "/server_info", limit=1 << 22, deadline_s=5)
        assert got.status_code == 200
        for bad in ("Bearer k\r\nX-Evil: 1", "Bearer k\nX-Evil: 1", "Bearer k\0", "Bearer k\u00e9"):
            async with HttpClient(server.url, headers={"Authorization": bad}) as client:
                with pytest.raises(RequestRefused, match="not sent"):
                    await client.fetch("GET", "/server_info", limit=1 << 22, deadline_s=5)
        assert [r["authorization"] for r in server.behaviour.requests] == ["Bearer k-123"]


async def test_nothing_listening_is_a_connect_error_named_for_its_request():
    async with HttpClient(f"http://127.0.0.1:{free_port()}") as client:
        with pytest.raises(ConnectError, match="^GET /metrics: 127.0.0.1:") as raised:
            await client.fetch("GET", "/metrics", limit=1 << 20, deadline_s=5)
    assert raised.value.reason.startswith("127.0.0.1:")


def test_loopback_is_asked_directly_another_host_through_the_environments_proxy_when_one_is_named(monkeypatch):
    for name in ("no_proxy", "NO_PROXY", "http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
                 "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert proxy_for("http://10.0.0.1:5") is None  # no proxy named
    monkeypatch.setenv("http_proxy", "http://proxy.invalid:3128")
    assert proxy_for("http://127.0.0.1:5") is None and proxy_for("http://localhost:5") is None
    assert proxy_for("http://[::1]:5") is None
    assert proxy_for("http://10.0.0.1:5") == "http://proxy.invalid:3128"
    assert proxy_for("https://10.0.0.1:5") is None  # http_proxy is for http:// only
    monkeypatch.setenv("ALL_PROXY", "http://all.invalid:1")
    assert proxy_for("https://10.0.0.1:5") == "http://all.invalid:1"
    monkeypatch.setenv("NO_PROXY", "10.0.0.1")
    assert proxy_for("http://10.0.0.1:5") is None and proxy_for("http://10.0.0.2:5") == "http://proxy.invalid:3128"


async def test_another_host_is_asked_through_the_proxy_the_environment_names(monkeypatch):
    """A real request: the proxy (a raw server on loopback) gets it in absolute form; the host itself is a name
    that resolves nowhere, so a request that skipped the proxy could not be answered."""

    async def proxy(request: RawRequest):
        return [answer(b'{"via": "proxy"}')]

    for name in ("no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    async with RawServer(proxy) as server:
        monkeypatch.setenv("http_proxy", server.url)
        async with HttpClient("http://gpu-box.invalid:30000") as client:
            got = await client.fetch("GET", "/model_info", limit=1 << 10, deadline_s=5)
    assert got.content == b'{"via": "proxy"}'
    assert server.requests[0].path == "http://gpu-box.invalid:30000/model_info"


async def test_a_get_costs_well_under_the_cpu_of_httpx():
    """An idle app's pollers cost what their GETs cost (httpx ~2.5 ms of CPU each on the dev VM, aiohttp with
    specmon's bounds ~0.9 ms, a connection of its own included). CPU of this thread only; the server is another
    process (on a thread of this one it would hold the GIL while this thread is measured)."""

    async def cpu_per_get(get) -> float:
        for _ in range(5):
            await get()
        started = time.thread_time()
        for _ in range(100):
            await get()
        return (time.thread_time() - started) / 100

    server = subprocess.Popen([sys.executable, str(REPLAY), "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline() if server.stdout else ""
        assert line.startswith("LISTENING "), line
        url = f"http://127.0.0.1:{int(line.split()[1])}"
        async with HttpClient(url) as client, httpx.AsyncClient(base_url=url) as http:
            async def ours():
                await client.fetch("GET", "/model_info", limit=1 << 20, deadline_s=5)

            async def theirs():
                (await http.get("/model_info")).read()

            mine, other = float("inf"), float("inf")
            for _ in range(3):  # alternated, the least of each: another process's load moves both alike
                mine = min(mine, await cpu_per_get(ours))
                other = min(other, await cpu_per_get(theirs))
    finally:
        server.kill()
        server.wait()
    assert mine < other * 0.6, f"specmon {mine * 1e3:.2f} ms a GET, httpx {other * 1e3:.2f} ms"


def _wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_app_pollers_read_the_server():
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
    assert statuses and statuses[-1].state == "ready" and statuses[-1].spec is not None
    snapshot = monitor.snapshot()
    assert snapshot.source == "metrics" and snapshot.effective, snapshot


async def test_sglang_client_gets_and_posts_go_through_one_client():
    with ReplayServer() as server:
        async with SGLangClient(server.url) as client:
            assert (await client.alive()).ok
            assert await client.flush_cache()
            assert (await client.metrics()) is not None
    assert [r["method"] for r in server.behaviour.requests] == ["GET", "POST", "GET"]


@pytest.mark.parametrize(
    "answer_bytes, error",
    [
        pytest.param(b"HTTP/1.1 200 OK\r\nx-pad: " + b"a" * (MAX_HEAD_LINE + 1) + b"\r\ncontent-length: 2\r\n\r\n{}",
                     f"more than {MAX_HEAD_LINE} bytes", id="long-header-line"),
        pytest.param(b"HTTP/1.1 200 OK\r\n" + b"x: y\r\n" * (MAX_HEADERS + 1) + b"content-length: 2\r\n\r\n{}",
                     "Too many headers", id="too-many-headers"),
        pytest.param(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}", "peer closed connection", id="length-cut"),
        pytest.param(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n2\r\n{}\r\n",
                     "peer closed connection", id="chunks-cut"),
        pytest.param(b"", "disconnected without sending a whole answer", id="no-answer"),
        pytest.param(b"SPDY/9 200 OK\r\n\r\n", "Bad status line", id="not-http"),
    ],
)
async def test_a_long_head_or_a_framed_body_cut_short_is_a_protocol_error_named_for_its_request(answer_bytes, error):
    async def script(writer):
        writer.write(answer_bytes)
        await writer.drain()

    async with Hostile(script) as server, HttpClient(server.url) as client:
        with pytest.raises(RemoteProtocolError, match=error) as raised:
            await client.fetch("GET", "/server_info", limit=1 << 20, deadline_s=5)
    assert str(raised.value).startswith("GET /server_info: ")


async def test_a_body_that_runs_to_the_close_is_read_whole_each_time():
    async def script(writer):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + SGLANG_INFO)
        await writer.drain()

    async with Hostile(script) as server, HttpClient(server.url) as client:
        for _ in range(2):
            got = await client.fetch("GET", "/server_info", limit=1 << 20, deadline_s=5)
            assert (got.status_code, got.content) == (200, SGLANG_INFO)
        assert len(server.requests) == 2


async def test_a_redirect_is_an_answer_not_followed():
    async def script(request: RawRequest):
        return [answer(b"", "302 Found", headers=["Location: http://127.0.0.1:9/elsewhere"])]

    async with RawServer(script) as server, HttpClient(server.url) as client:
        got = await client.fetch("GET", "/metrics", limit=1 << 10, deadline_s=5)
    assert got.status_code == 302 and len(server.requests) == 1
