"""The lean HTTP/1.1 stream reader (tui/bench/h1.py): framing split anywhere, headers as the client's, the
API key sent, error bodies bounded, and the httpx path kept for https, proxies and custom transports."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from specmon.bench import h1
from specmon.bench.stream import stream_generate
from specmon.serving.client import generate_payload, http_client
from tests.test_bench_hostile import HEAD, Hostile, chunk, event


class Recording(Hostile):
    """A raw server on 127.0.0.1 that records each request head and answers with `answer` written in pieces."""

    def __init__(self, answer: bytes, piece: int = 0):
        super().__init__(self._answer)
        self.answer = answer
        self.piece = piece

    async def _answer(self, writer) -> None:
        step = self.piece or len(self.answer)
        for i in range(0, len(self.answer), step):
            writer.write(self.answer[i : i + step])
            await writer.drain()
            if self.piece:
                await asyncio.sleep(0)


GOOD = HEAD + chunk(event(2, "ab")) + chunk(event(5, "abcde")) + chunk(event(8, "abcdefgh", finish=True)) + b"0\r\n\r\n"


@pytest.mark.parametrize("piece", [0, 1, 7])
async def test_a_chunked_stream_split_anywhere_reads_the_same(piece):
    async with Recording(GOOD, piece) as server, httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        assert h1.plain_origin(client) is not None
        result = await stream_generate(client, generate_payload("hi", 16), 0, "p0")
    assert result.ok, result.error
    assert result.completion_tokens == 8 and result.output_text == "abcdefgh"
    assert result.chunk_tokens == [3, 3]


async def test_the_request_carries_the_api_key_the_base_path_and_identity_encoding():
    async with Recording(GOOD) as server, http_client(server.url + "/v1", "sk-secret") as client:
        result = await stream_generate(client, generate_payload("hi", 16), 0, "p0")
    assert result.ok, result.error
    head = server.heads[0].decode()
    assert head.startswith("POST /v1/generate HTTP/1.1\r\n")
    assert "Authorization: Bearer sk-secret\r\n" in head
    assert "Accept-Encoding: identity\r\n" in head and "gzip" not in head
    assert b'"max_new_tokens":16' in server.bodies[0]


async def test_a_content_length_body_and_an_error_status_read_like_httpx():
    body = b'{"error": {"message": "CUDA error"}}'
    answer = b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    async with Recording(answer, 5) as server, httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        result = await stream_generate(client, generate_payload("hi", 16), 0, "p0")
    assert not result.ok and result.error == "HTTP 500: CUDA error"


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (HEAD + b"zz\r\n", "garbled chunk size"),
        (HEAD + b"-5\r\n", "garbled chunk size"),
        (HEAD + chunk(event(2)), "peer closed connection without sending complete message body"),
        (b"", "Server disconnected without sending a response"),
        (b"SPDY/9 200 OK\r\n\r\n", "not an HTTP/1.x status line"),
        (HEAD.replace(b"\r\n\r\n", b"\r\ncontent-encoding: br\r\n\r\n") + chunk(event(2)), "content-encoding"),
        (HEAD + b"f" * 2000, "chunk-size line too long"),
    ],
)
async def test_broken_framing_is_an_error_with_its_reason(answer, expected):
    async with Recording(answer) as server, httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        result = await stream_generate(client, generate_payload("hi", 16), 0, "p0")
    assert not result.ok and expected in result.error, result.error


def test_https_proxies_and_custom_transports_keep_the_httpx_path():
    assert h1.plain_origin(httpx.AsyncClient(base_url="https://127.0.0.1:5")) is None
    assert h1.plain_origin(httpx.AsyncClient(base_url="http://10.0.0.1:5", proxy="http://proxy:3128")) is None
    mock = httpx.MockTransport(lambda request: httpx.Response(200))
    assert h1.plain_origin(httpx.AsyncClient(base_url="http://127.0.0.1:5", transport=mock)) is None
    assert h1.plain_origin(httpx.AsyncClient(base_url="http://127.0.0.1:5")) == ("127.0.0.1", 5)


async def test_sequential_streams_reuse_one_connection_which_closes_with_the_client():
    from specmon.bench.loopback import LoopbackConfig, LoopbackServer

    with LoopbackServer(LoopbackConfig(tokens_per_s=2000)) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            for i in range(3):
                result = await stream_generate(client, generate_payload("hi", 12), i, f"p{i}")
                assert result.ok, result.error
            pool = h1.pool_for(client, h1.plain_origin(client))
            idle = list(pool.idle)
            assert len(idle) == 1 and not idle[0].closed
        assert server.connections == 1
        assert pool.closed and not pool.idle and idle[0].closed
