"""A lean HTTP/1.1 reader for one streamed `/generate` (issue 14 item 27): chunked transfer decoding on an
asyncio Protocol, each piece timed in `data_received` (on arrival, before any parsing) and fed to the SSE
parser there, so following a stream costs no future, task or buffer copy per chunk.

It serves plain `http://` httpx clients with their default transport and no proxy (`plain_origin`); anything
else (https, a proxy, a custom transport) keeps the httpx path in `stream.py`. Connections are kept alive and
reused, one per concurrent stream, as httpx would (`Pool`, closed with the client); the client's headers (the
API key among them) are sent as they are, but for `Accept-Encoding: identity`.

Bounds as on the httpx path: the response head is at most `MAX_HEAD` bytes, a chunk-size line at most
`MAX_SIZE_LINE`, an error body at most the event limit, and a chunk's claimed size never allocates anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import weakref
from collections.abc import Callable
from typing import Any

import httpx

MAX_HEAD = 64 * 1024
MAX_SIZE_LINE = 1024


class H1Error(Exception):
    """The connection or the HTTP framing broke; the message reads like httpx's ("RemoteProtocolError: ...")."""


def plain_origin(client: httpx.AsyncClient) -> tuple[str, int] | None:
    """(host, port) when `client` talks plain HTTP through httpx's own transport, without a proxy; else None."""
    url = client.base_url
    transport = getattr(client, "_transport", None)
    mounts = getattr(client, "_mounts", None)
    if url.scheme != "http" or not url.host or type(transport) is not httpx.AsyncHTTPTransport:
        return None
    if mounts is None or any(mount is not None for mount in mounts.values()):
        return None
    return url.host, url.port or 80


def request_bytes(client: httpx.AsyncClient, path: str, payload: dict[str, Any]) -> bytes:
    """The POST of `payload` as JSON to `path` under the client's base URL, with the client's headers."""
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    target = client.base_url.raw_path + path.lstrip("/").encode("ascii")
    skip = {b"host", b"accept-encoding", b"connection", b"content-length", b"content-type", b"transfer-encoding"}
    lines = [b"POST " + target + b" HTTP/1.1", b"Host: " + client.base_url.netloc]
    lines += [name + b": " + value for name, value in client.headers.raw if name.lower() not in skip]
    lines += [
        b"Accept-Encoding: identity",
        b"Connection: keep-alive",
        b"Content-Type: application/json",
        b"Content-Length: " + str(len(body)).encode(),
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


class StreamProtocol(asyncio.Protocol):
    """One keep-alive connection; `begin` readies it for a response, parsed as it arrives: its head, then its
    body (chunked, by length, or to EOF) piece by piece.

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
        self._buf = b""  # unparsed head or chunk framing only: body bytes are passed on at once
        self._in_head = True
        self._chunked = False
        self._keep_alive = False
        self._length: int | None = None  # bytes of body left (content-length), None: to EOF
        self._chunk_left = 0
        self._need_crlf = False
        self._in_trailers = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        at = time.perf_counter()
        if self.done is None or self.done.done():
            self.close()  # bytes nobody asked for: this connection cannot be trusted with another request
            return
        try:
            self._take(data, at)
        except Exception as exc:  # noqa: BLE001 -- any failure ends this request, with its reason
            self._end(exc)

    def eof_received(self) -> bool:
        self.closed = True
        if self.done is None or self.done.done():
            return False
        if self._in_head:
            self._end(H1Error("RemoteProtocolError: Server disconnected without sending a response."))
        elif self._chunked or self._length:
            self._end(H1Error("RemoteProtocolError: peer closed connection without sending complete message body"))
        else:
            self._end(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.done is not None and not self.done.done():
            self._end(H1Error(f"ReadError: {exc or 'connection lost'}"))

    def _end(self, exc: BaseException | None) -> None:
        """The response is over: complete (None; the connection kept when it may be) or failed (closed)."""
        assert self.done is not None
        if not self.done.done():
            if exc is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(exc)
        self.reusable = exc is None and self._keep_alive and not self._buf and not self.closed
        if not self.reusable:
            self.close()

    def _take(self, data: bytes, at: float) -> None:
        if self._in_head:
            self._buf += data
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > MAX_HEAD:
                    raise H1Error(f"RemoteProtocolError: a response head over {MAX_HEAD} bytes")
                return
            self._head(self._buf[:end])
            data, self._buf = self._buf[end + 4 :], b""
            if not data:
                if self._length == 0:
                    self._end(None)
                return
        if self._chunked:
            self._dechunk(data, at)
        elif self._length is not None:
            if len(data) >= self._length:
                data, self._buf, self._length = data[: self._length], data[self._length :], 0
                self._piece(data, at)
                self._end(None)
                return
            self._length -= len(data)
            self._piece(data, at)
        else:
            self._piece(data, at)

    def _head(self, head: bytes) -> None:
        status_line, *header_lines = head.split(b"\r\n")
        parts = status_line.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise H1Error(f"RemoteProtocolError: not an HTTP/1.x status line: {status_line[:80]!r}")
        self.status = int(parts[1])
        headers: dict[bytes, bytes] = {}
        for line in header_lines:
            name, sep, value = line.partition(b":")
            if not sep:
                raise H1Error(f"RemoteProtocolError: a garbled header line: {line[:80]!r}")
            headers[name.strip().lower()] = value.strip()
        self._in_head = False
        self._keep_alive = parts[0] == b"HTTP/1.1" and b"close" not in headers.get(b"connection", b"").lower()
        if b"chunked" in headers.get(b"transfer-encoding", b"").lower():
            self._chunked = True
        elif b"content-length" in headers:
            length = headers[b"content-length"]
            if not length.isdigit():
                raise H1Error(f"RemoteProtocolError: a content-length of {length[:40]!r}")
            self._length = int(length)
        else:
            self._keep_alive = False  # a body to EOF ends the connection with it
        assert self.transport is not None
        self._on_head(self.status, headers, self.transport)

    def _dechunk(self, data: bytes, at: float) -> None:
        if self._buf:
            data, self._buf = self._buf + data, b""
        pieces = []
        pos, size = 0, len(data)
        while pos < size:
            if self._in_trailers:
                eol = data.find(b"\r\n", pos)
                if eol < 0:
                    if size - pos > MAX_SIZE_LINE:
                        raise H1Error("RemoteProtocolError: a trailer line too long")
                    break
                line, pos = data[pos:eol], eol + 2
                if not line:  # the end of the message
                    self._buf = data[pos:]
                    if pieces:
                        self._piece(b"".join(pieces), at)
                    self._end(None)
                    return
            elif self._chunk_left:
                take = min(self._chunk_left, size - pos)
                pieces.append(data[pos : pos + take])
                pos += take
                self._chunk_left -= take
                self._need_crlf = not self._chunk_left
            elif self._need_crlf:
                if size - pos < 2:
                    break
                if data[pos : pos + 2] != b"\r\n":
                    raise H1Error("RemoteProtocolError: a chunk not ended by CRLF")
                pos += 2
                self._need_crlf = False
            else:
                eol = data.find(b"\r\n", pos)
                if eol < 0:
                    if size - pos > MAX_SIZE_LINE:
                        raise H1Error("RemoteProtocolError: a chunk-size line too long")
                    break
                field = data[pos:eol].split(b";", 1)[0].strip()
                try:
                    chunk_size = int(field, 16)
                except ValueError:
                    raise H1Error(f"RemoteProtocolError: a garbled chunk size {field[:40]!r}") from None
                if chunk_size < 0 or field.startswith((b"-", b"+", b"0x", b"0X")):
                    raise H1Error(f"RemoteProtocolError: a garbled chunk size {field[:40]!r}")
                pos = eol + 2
                if chunk_size == 0:  # the last chunk: then trailers (usually none) and an empty line
                    self._in_trailers = True
                    continue
                self._chunk_left = chunk_size
        self._buf = data[pos:]
        if pieces:
            self._piece(pieces[0] if len(pieces) == 1 else b"".join(pieces), at)

    def _piece(self, piece: bytes, at: float) -> None:
        if self.status < 400:
            self._on_body(piece, at)
            return
        self.error_body += piece[: self._error_limit + 1 - len(self.error_body)]
        if len(self.error_body) > self._error_limit:
            self._keep_alive = False  # the rest of the body is not read
            self._end(None)


class Pool:
    """Idle keep-alive connections to one origin, for one httpx client, closed with it; never more idle ones
    than were ever in use at once."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.idle: list[StreamProtocol] = []
        self.closed = False

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

    def close(self) -> None:
        self.closed = True
        while self.idle:
            with contextlib.suppress(RuntimeError):  # collected after its loop closed: the socket goes with it
                self.idle.pop().close()


_POOLS: weakref.WeakKeyDictionary[httpx.AsyncClient, Pool] = weakref.WeakKeyDictionary()


def pool_for(client: httpx.AsyncClient, origin: tuple[str, int]) -> Pool:
    """The client's pool, made on first use; closed when the client is (`aclose` of its transport's httpcore
    pool, which both `client.aclose()` and leaving `async with client` call), or else when it is collected."""
    pool = _POOLS.get(client)
    if pool is None:
        pool = _POOLS[client] = Pool(*origin)
        httpcore_pool = getattr(client._transport, "_pool", None)
        close_httpcore = getattr(httpcore_pool, "aclose", None)
        if close_httpcore is not None:

            async def aclose() -> None:
                pool.close()
                await close_httpcore()

            httpcore_pool.aclose = aclose  # type: ignore[union-attr]
        weakref.finalize(client, pool.close)
    return pool
