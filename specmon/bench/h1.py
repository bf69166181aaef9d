"""A lean HTTP/1.1 client for streamed `/generate`: httptools (llhttp, the C parser Node.js, uvicorn and aiohttp
use) frames the response, an asyncio Protocol times each piece in `data_received` (on arrival, before any
parsing) and hands the body on at once, so following a stream costs no future, task or buffer copy per chunk.

`stream_client` (in `stream.py`) takes this path for a plain `http://` server that no proxy stands in front of
(specmon's own rule: loopback never goes through a proxy, another host only when the environment names none);
https and proxied servers keep httpx. Connections are kept alive and reused, one per concurrent stream, as
httpx would (`H1Client`'s pool, closed with it); the API key goes as a Bearer header.

Bounds as on the httpx path: the response head is at most `h1_connection.MAX_HEAD` bytes, an error body at most
the event limit, and a chunk's claimed size allocates nothing (llhttp counts it down as the bytes pass).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from specmon.h1_connection import H1Connection

_UNSAFE_HEADER = re.compile(rb"[\r\n\0]")


class H1Error(Exception):
    """The connection or the HTTP framing broke; the message reads like httpx's ("RemoteProtocolError: ...")."""


class StreamProtocol(H1Connection):
    """One keep-alive connection for streams; `begin_stream` readies it for a response, framed by llhttp as it
    arrives (`H1Connection`).

    `on_head(status, headers, transport)` is called once with the head (names lower-cased; it may raise to refuse
    the response); for a 2xx answer `on_body(piece, at)` gets each body piece with its arrival time (it may raise
    to end the stream); an error answer's body is gathered (at most `error_limit` bytes) for `error_body`. `done`
    ends with None when the body is complete, or the exception that ended it (H1Error for the connection's and
    the framing's faults); `reusable` then says whether the connection may carry another request.
    """

    def begin_stream(
        self,
        on_head: Callable[[int, dict[bytes, bytes], asyncio.BaseTransport], None],
        on_body: Callable[[bytes, float], None],
        error_limit: int,
    ) -> None:
        super().begin()
        self.error_body = b""
        self._on_head = on_head
        self._on_body = on_body
        self._error_limit = error_limit

    def head_received(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        assert self.transport is not None
        self._on_head(status, {name.lower(): value for name, value in headers}, self.transport)

    def on_body(self, body: bytes) -> None:
        if self.status < 400:
            self._on_body(body, self.arrived_at)
            return
        self.error_body += body[: self._error_limit + 1 - len(self.error_body)]
        if len(self.error_body) > self._error_limit:
            self.end_early()  # the rest of the body is not read

    def fault(self, kind: str, message: str) -> BaseException:
        return H1Error(f"{kind}: {message}")


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
