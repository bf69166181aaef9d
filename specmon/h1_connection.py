"""One kept-alive HTTP/1.1 connection whose responses llhttp (httptools: the C parser of Node.js, uvicorn and
aiohttp) frames as they arrive: the one framing under `bounded_http.DirectGets` (bounded GETs) and `bench.h1`
(streamed /generate).

Bounded alike on both: a response head of at most `MAX_HEAD` bytes (however it arrives), bytes nobody asked for
close the connection, a body framed by its length or chunks must end before the connection does. What a head
and a body are for, and what a fault is (httpx's classes, or the stream's own), each user says in a subclass.
"""

from __future__ import annotations

import asyncio
import time

import httptools

MAX_HEAD = 64 * 1024
"""A response head of at most this (h11, under httpx, allows 100 KiB; a real SGLang head is ~200 bytes)."""


class H1Connection(asyncio.Protocol):
    """One kept-alive connection; `begin` readies it for the next response, parsed by llhttp as it arrives.

    A subclass says what the response is for: `head_received(status, headers)` gets its head (it may raise to
    refuse the response), llhttp hands each body piece to its `on_body(piece)` (`arrived_at` is when the bytes
    came in; it may raise to end the response, or call `end_early` when it has read enough), and `fault(kind,
    message)` makes the exception for a broken connection or framing (kind: "RemoteProtocolError" or
    "ReadError", httpx's names). `done` ends with None when the response is over, or with the exception that
    ended it; `reusable` then says whether the connection may carry another request.
    """

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.done: asyncio.Future[None] | None = None
        self.reusable = False
        self.received = False
        self.status = 0
        self.arrived_at = 0.0

    def begin(self) -> None:
        self.done = asyncio.get_running_loop().create_future()
        self.reusable = False
        self.received = False
        self.status = 0
        self._parser = httptools.HttpResponseParser(self)
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0
        self._header_bytes = 0
        self._in_head = True
        self._keep_alive = False
        self._length_framed = False

    def head_received(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """The response's head, its headers as sent (names in their own case, in order)."""

    def fault(self, kind: str, message: str) -> BaseException:
        raise NotImplementedError

    def send(self, request: bytes) -> None:
        assert self.transport is not None
        self.transport.write(request)

    def end_early(self) -> None:
        """The reader has what it wants: the response ends here, and the rest of it is never read."""
        self._keep_alive = False
        self._end(None)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    # ----- asyncio's callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.arrived_at = time.perf_counter()
        if self.done is None or self.done.done():
            self.close()  # bytes nobody asked for: this connection cannot be trusted with another request
            return
        self.received = True
        if self._in_head:
            self._head_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:  # raised by a callback: it ends this response
            self._end(exc.__context__ or exc)
        except httptools.HttpParserError as exc:
            self._end(self.fault("RemoteProtocolError", str(exc)))
        except httptools.HttpParserUpgrade:
            self._end(self.fault("RemoteProtocolError", "the server switched protocols"))
        if self._in_head and self._head_bytes > MAX_HEAD and not self.done.done():  # still no end of the head
            self._end(self.fault("RemoteProtocolError", f"a response head over {MAX_HEAD} bytes"))

    def eof_received(self) -> bool:
        self.closed = True
        if self.done is None or self.done.done():
            return False
        if self._in_head:
            self._end(self.fault("RemoteProtocolError", "Server disconnected without sending a response."))
        elif self._length_framed:
            self._end(self.fault("RemoteProtocolError", "peer closed connection without sending complete message body"))
        else:
            self._end(None)  # a body that runs to the end of the connection
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.done is not None and not self.done.done():
            self._end(self.fault("ReadError", str(exc) if exc else "the connection was lost"))

    # ----- llhttp's callbacks (on_body is the subclass's)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_bytes += len(name) + len(value) + 4
        if self._header_bytes > MAX_HEAD:  # a long head that arrived all at once
            raise self.fault("RemoteProtocolError", f"a response head over {MAX_HEAD} bytes")
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        self.status = self._parser.get_status_code()
        self._keep_alive = self._parser.should_keep_alive()
        for name, value in self._headers:
            name = name.lower()
            if name == b"content-length" or (name == b"transfer-encoding" and b"chunked" in value.lower()):
                self._length_framed = True
        self.head_received(self.status, self._headers)

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
