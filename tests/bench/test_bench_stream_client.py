"""The benchmark's stream client (`bench.stream.stream_client`, specmon's one HTTP client): framing split
anywhere, the API key sent, error bodies bounded, broken framing said with its reason, the proxy rule, and
each stream on a connection of its own (as SGLang's own benchmark does), none left open."""

from __future__ import annotations

import asyncio
import time

import pytest

from specmon.bench.stream import stream_client, stream_generate
from specmon.http.client import MAX_HEAD_LINE, HttpClient
from specmon.serving.client import generate_payload
from specmon.urls import proxy_for
from tests.bench.test_bench_hostile import HEAD, Hostile, chunk, event


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
    async with Recording(GOOD, piece) as server, stream_client(server.url) as client:
        result = await stream_generate(client, generate_payload("hi", 16), 0, "p0")
    assert result.ok, result.error
    assert result.completion_tokens == 8 and result.output_text == "abcdefgh"
    assert result.chunk_tokens == [3, 3]


async def test_the_request_carries_the_api_key_the_base_path_and_identity_encoding():
    async with Recording(GOOD) as server, stream_client(server.url + "/v1", "sk-secret") as client:
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
    async with Recording(answer, 5) as server, stream_client(server.url) as client:
        result = await stream_generate(client, generate_payload("hi", 16), 0, "p0")
    assert not result.ok and result.error == "HTTP 500: CUDA error"


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        pytest.param(HEAD + b"zz\r\n", "Invalid character in chunk size", id="chunk-size-not-hex"),
        pytest.param(HEAD + b"-5\r\n", "Invalid character in chunk size", id="chunk-size-negative"),
        pytest.param(HEAD + b"1" * 40 + b"\r\n", "Chunk size overflow", id="chunk-size-huge"),
        pytest.param(HEAD + chunk(event(2)), "peer closed connection without sending complete message body",
                     id="body-cut-short"),
        pytest.param(b"", "the server disconnected without sending a whole answer", id="no-response"),
        pytest.param(b"SPDY/9 200 OK\r\n\r\n", "Expected HTTP/", id="not-http"),
        pytest.param(HEAD.replace(b"\r\n\r\n", b"\r\ncontent-encoding: br\r\n\r\n") + chunk(event(2)),
                     "content-encoding", id="compressed"),
        pytest.param(HEAD + b"f" * 2000, "Chunk size overflow", id="endless-chunk-size"),
        pytest.param(HEAD[:-4] + b"\r\nx-pad: " + b"a" * (16 * 65536) + b"\r\n\r\n",
                     f"more than {MAX_HEAD_LINE} bytes", id="endless-head"),
        pytest.param(HEAD[:-4] + b"\r\nx-pad: " + b"a" * (MAX_HEAD_LINE + 1) + b"\r\n\r\n",
                     f"more than {MAX_HEAD_LINE} bytes", id="long-head"),
        pytest.param(HEAD[:-4] + b"\r\n" + b"x-pad: a\r\n" * 10_000 + b"\r\n", "Too many headers",
                     id="endless-header-lines"),
    ],
)
async def test_broken_framing_is_an_error_with_its_reason(answer, expected):
    async with Recording(answer) as server, stream_client(server.url) as client:
        result = await stream_generate(client, generate_payload("hi", 16), 0, "p0")
    assert not result.ok and expected in result.error, result.error
    assert "\n" not in result.error


def test_loopback_is_never_proxied_and_another_host_only_when_the_environment_names_a_proxy(monkeypatch):
    for name in ("no_proxy", "NO_PROXY", "http_proxy", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    assert proxy_for("https://127.0.0.1:5") is None
    assert proxy_for("http://10.0.0.1:5") == "http://proxy:3128"  # the environment's proxy stands in front of it
    assert proxy_for("http://127.0.0.1:5") is None  # loopback never goes through a proxy
    monkeypatch.setenv("NO_PROXY", "10.0.0.1")
    assert proxy_for("http://10.0.0.1:5") is None
    monkeypatch.delenv("HTTP_PROXY")
    monkeypatch.delenv("NO_PROXY")
    assert proxy_for("http://10.0.0.1:5") is None


async def test_a_header_value_with_a_line_break_is_refused_not_sent():
    from specmon.http.headers import HeaderRefused

    async with Recording(GOOD) as server:
        with pytest.raises(HeaderRefused, match="holds a control character \\(a line break\\)"):  # the one place headers are built
            stream_client(server.url, "sk\r\nX-Injected: 1")
        async with HttpClient(server.url, headers={"Authorization": "Bearer sk\r\nX-Injected: 1"}) as client:
            result = await stream_generate(client, generate_payload("hi", 16), 0, "p0")  # and the client itself
    assert not result.ok and result.error.startswith("RequestRefused: ") and "not sent" in result.error
    assert not server.heads


async def test_each_stream_has_a_connection_of_its_own_and_none_is_left_open():
    from tests.support.raw_http import RawServer, chunked

    async def script(request):
        return [chunked([event(2, "ab"), event(8, "abcdefgh", finish=True), b"data: [DONE]\n\n"])]

    async with RawServer(script) as server, stream_client(server.url) as client:
        for i in range(3):
            result = await stream_generate(client, generate_payload("hi", 12), i, f"p{i}")
            assert result.ok, result.error
        deadline = time.monotonic() + 10
        while server.closed < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    assert [r.connection for r in server.requests] == [1, 2, 3]
    assert server.closed == 3, "a stream's connection was left open after its last chunk"
