"""A lean HTTP/1.1 client for streamed `/generate`: httptools (llhttp, the C parser Node.js, uvicorn and aiohttp
use) frames the response, an asyncio Protocol times each piece in `data_received` (on arrival, before any
parsing) and hands the body on at once, so following a stream costs no future, task or buffer copy per chunk.

`stream_client` (in `stream.py`) takes this path for a plain `http://` server that no proxy stands in front of
(specmon's own rule: loopback never goes through a proxy, another host only when the environment names none);
https and proxied servers keep httpx. Connections are kept alive and reused, one per concurrent stream, as
httpx would (`H1Client`'s pool, closed with it); the API key goes as a Bearer header.

Bounds as on the httpx path: the response head is at most `MAX_HEAD` bytes, an error body at most the event
limit, and a chunk's claimed size allocates nothing (llhttp counts it down as the bytes pass).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import httptools

MAX_HEAD = 64 * 1024
_UNSAFE_HEADER = re.compile(rb"[\r\n\0]")


class H1Error(Exception):
    """The connection or the HTTP framing broke; the message reads like httpx's ("RemoteProtocolError: ...")."""


class StreamProtocol(asyncio.Protocol):
    """One keep-alive connection; `begin` readies it for a response, parsed by llhttp as it arrives.

    `on_head(status, headers, transport)` is called once with the head (it may raise to refuse the response);
    for a 2xx answer `on_body(piece, at)` gets each body piece with its arrival time (it may raise to end the
    stream); an error answer's body is gathered (at most `error_limit` bytes) for `error_body`. `done` ends with
    None when the body is complete, or the exception that ended it; `reusable` then says whether the connection
    may carry another request.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.done: asyncio.Future[None] | None = None
        self.reusable = False

    def begin(
        self,
        on_head: Callable[[int, dict[bytes, bytes], asyncio.BaseTransport], None],
        on_body: Callable[[bytes, float], None],
        error_limit: int,
    ) -> None:
        self.done = asyncio.get_running_loop().create_future()
        self.reusable = False
        self.status = 0
        self.error_body = b""
        self._on_head = on_head
        self._on_body = on_body
        self._error_limit = error_limit
        self._parser = httptools.HttpResponseParser(self)
        self._headers: dict[bytes, bytes] = {}
        self._head_bytes = 0
        self._header_bytes = 0
        self._in_head = True
        self._keep_alive = False
        self._at = 0.0

    def send(self, request: bytes) -> None:
        assert self.transport is not None
        self.transport.write(request)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        self._at = time.perf_counter()
        if self.done is None or self.done.done():
            self.close()  # bytes nobody asked for: this connection cannot be trusted with another request
            return
        if self._in_head:
            self._head_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:  # raised by on_head / on_body: it ends this request
            self._end(exc.__context__ or exc)
        except httptools.HttpParserError as exc:
            self._end(H1Error(f"RemoteProtocolError: {exc}"))
        except httptools.HttpParserUpgrade:
            self._end(H1Error("RemoteProtocolError: the server switched protocols"))
        if self._in_head and self._head_bytes > MAX_HEAD and not self.done.done():  # still no end of the head
            self._end(H1Error(f"RemoteProtocolError: a response head over {MAX_HEAD} bytes"))

    def eof_received(self) -> bool:
        self.closed = True
        if self.done is None or self.done.done():
            return False
        if self._in_head:
            self._end(H1Error("RemoteProtocolError: Server disconnected without sending a response."))
        elif b"content-length" in self._headers or b"chunked" in self._headers.get(b"transfer-encoding", b"").lower():
            self._end(H1Error("RemoteProtocolError: peer closed connection without sending complete message body"))
        else:
            self._end(None)  # a body that runs to the end of the connection
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.done is not None and not self.done.done():
            self._end(H1Error(f"ReadError: {exc or 'connection lost'}"))

    # ----- llhttp's callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value) + 4
        if self._header_bytes > MAX_HEAD:  # a long head that arrived all at once
            raise H1Error(f"RemoteProtocolError: a response head over {MAX_HEAD} bytes")
        self._headers[name.lower()] = value

    def on_headers_complete(self) -> None:
        self._in_head = False
        self.status = self._parser.get_status_code()
        self._keep_alive = self._parser.should_keep_alive()
        assert self.transport is not None
        self._on_head(self.status, self._headers, self.transport)

    def on_body(self, body: bytes) -> None:
        if self.status < 400:
            self._on_body(body, self._at)
            return
        self.error_body += body[: self._error_limit + 1 - len(self.error_body)]
        if len(self.error_body) > self._error_limit:
            self._keep_alive = False  # the rest of the body is not read
            self._end(None)

    def on_message_complete(self) -> None:
        self._end(None)

    def _end(self, exc: BaseException | None) -> None:
        """The response is over: complete (None; the connection kept when it may be) or failed (closed)."""
        assert self.done is not None
        if self.done.done():
            self.reusable = False  # bytes past the end of the response
        else:
            if exc is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(exc)
            self.reusable = exc is None and self._keep_alive and not self.closed
        if not self.reusable:
            self.close()


class H1Client:
    """Streamed POSTs to one plain-HTTP server, on keep-alive connections pooled per client: never more idle
    ones than were ever in use at once, all closed with the client."""

    def __init__(self, base_url: str, headers: Mapping[str, str] | None = None, connect_timeout: float = 10.0):
        url = urlsplit(base_url)
        if url.scheme != "http" or not url.hostname:
            raise ValueError(f"not a plain http:// URL: {base_url!r}")
        self.host = url.hostname
        self.port = url.port or 80
        self.netloc = url.netloc.encode("ascii")
        self.base_path = url.path.rstrip("/")
        self.connect_timeout = connect_timeout
        self.headers = [(name.encode("ascii"), value.encode("latin-1")) for name, value in (headers or {}).items()]
        self.idle: list[StreamProtocol] = []
        self.closed = False

    def request(self, path: str, payload: dict[str, Any]) -> bytes:
        """The POST of `payload` as JSON to `path` under the base URL, with the client's headers (one with a line
        break or a NUL, an API key that would inject a header, is refused: H1Error)."""
        for name, value in self.headers:
            if _UNSAFE_HEADER.search(name + value) or b":" in name:
                raise H1Error(f"LocalProtocolError: the {name.decode()} header has a line break or a NUL: not sent")
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        target = (self.base_path + "/" + path.lstrip("/")).encode("ascii")
        lines = [b"POST " + target + b" HTTP/1.1", b"Host: " + self.netloc]
        lines += [name + b": " + value for name, value in self.headers]
        lines += [
            b"Accept-Encoding: identity",
            b"Connection: keep-alive",
            b"Content-Type: application/json",
            b"Content-Length: " + str(len(body)).encode(),
        ]
        return b"\r\n".join(lines) + b"\r\n\r\n" + body

    async def connect(self) -> StreamProtocol:
        """An idle connection still open, else a new one (OSError when it cannot be made)."""
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(StreamProtocol, self.host, self.port)
        return conn

    def release(self, conn: StreamProtocol) -> None:
        if conn.reusable and not conn.closed and not self.closed:
            self.idle.append(conn)
        else:
            conn.close()

    async def aclose(self) -> None:
        self.closed = True
        while self.idle:
            with contextlib.suppress(RuntimeError):  # its loop already closed: the socket goes with it
                self.idle.pop().close()

    async def __aenter__(self) -> H1Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
