"""HTTP answers read with bounds: the whole answer within a deadline, and at most so many bytes once decoded.

httpx decodes a Content-Encoding a whole network chunk at a time, so one 1.8 KB chunk of `gzip, gzip` becomes
2 GB before any caller can count it, and its timeouts are per read, so a server that drips a byte a second
never times out. Here the raw bytes are read (`aiter_raw`) and decoded by specmon (gzip, deflate; each layer
through zlib with `max_length`), the decoded size is counted as it grows, and the whole exchange runs under
one deadline. Every place specmon reads a server goes through `fetch` (async) or `BlockingFetcher` (threads
without a loop); streamed bodies go through `BodyDecoder`.

`DirectGets` asks the same GETs of a plain http:// server with no proxy in between, on one kept-alive connection
framed by httptools (llhttp): a tenth of httpx's CPU per request, which is most of what the app's pollers cost
while nothing happens. Its answers pass the same `BodyDecoder` under the same deadline; its faults are httpx's
exception classes, so every caller reads them as before.
"""

from __future__ import annotations

import asyncio
import re
import threading
import zlib
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from specmon.h1_connection import H1Connection
from specmon.inputs import InputError, parse_json, size_text

T = TypeVar("T")


class HeaderRefused(InputError):
    """A header value from a file or the environment (an API key, a bearer token) that cannot go in a request:
    the message names where it came from, never the value (a secret)."""


def header_value(value: str, source: str) -> str:
    """`value` as it may go in an HTTP header: printable ASCII only. A non-ASCII character (httpx cannot encode
    it), a control character or a newline (which would begin another header) is refused: HeaderRefused."""
    for position, char in enumerate(value, 1):
        if not " " <= char <= "~":
            kind = ("a control character (a line break)" if char in "\r\n" else "a non-ASCII character"
                    if ord(char) > 127 else "a control character")
            raise HeaderRefused(f"{source} holds {kind} (character {position} of {len(value)}); an HTTP header takes "
                                "printable ASCII only, so it is not sent")
    return value


def auth_headers(token: str | None, source: str = "the API key") -> dict[str, str]:
    """The one place a request's secret header is built: `Authorization: Bearer TOKEN` (none without a token),
    the token checked by `header_value`."""
    return {"Authorization": f"Bearer {header_value(token, source)}"} if token else {}


MAX_LAYERS = 2
"""Content-Encoding layers decoded at most ("gzip, gzip" is already more than any real server sends)."""


class AnswerRefused(httpx.DecodingError):
    """An answer specmon will not read: over its size limit, an encoding it does not decode, or broken."""


class AnswerTooSlow(httpx.ReadTimeout):
    """The whole answer did not arrive within its deadline (a server that drips, or holds the body back)."""


class _Layer:
    def __init__(self, name: str) -> None:
        self.name = name
        # gzip: a gzip member only (wbits 16+); deflate: zlib-wrapped, as RFC 9110 means it.
        self.inflater = zlib.decompressobj(16 + zlib.MAX_WBITS if name in ("gzip", "x-gzip") else zlib.MAX_WBITS)
        self.produced = 0


class BodyDecoder:
    """Decodes a body's Content-Encoding piece by piece; AnswerRefused as soon as a layer's output passes
    `limit` bytes (before it is made), for an encoding other than gzip/deflate, or for bytes past its end."""

    def __init__(self, content_encoding: str | None, limit: int, what: str = "the answer") -> None:
        names = [part.strip().lower() for part in (content_encoding or "").split(",")]
        names = [name for name in names if name and name != "identity"]
        for name in names:
            if name not in ("gzip", "x-gzip", "deflate"):
                raise AnswerRefused(f"{what}: Content-Encoding {name[:40]!r} is not one specmon decodes")
        if len(names) > MAX_LAYERS:
            raise AnswerRefused(f"{what}: Content-Encoding with {len(names)} layers (at most {MAX_LAYERS})")
        self.layers = [_Layer(name) for name in reversed(names)]  # the last applied is undone first
        self.limit = limit
        self.what = what
        self.size = 0

    def _too_large(self) -> AnswerRefused:
        return AnswerRefused(f"{self.what}: more than {size_text(self.limit)} once decoded")

    def feed(self, raw: bytes) -> bytes:
        data = raw
        for layer in self.layers:
            if not data:
                return b""
            if layer.inflater.eof:
                raise AnswerRefused(f"{self.what}: bytes after the end of its {layer.name} data")
            room = self.limit + 1 - layer.produced
            try:
                data = layer.inflater.decompress(data, room)
            except zlib.error as error:
                raise AnswerRefused(f"{self.what}: broken {layer.name} data ({error})") from None
            layer.produced += len(data)
            if layer.produced > self.limit or layer.inflater.unconsumed_tail:
                raise self._too_large()
            if layer.inflater.unused_data:
                raise AnswerRefused(f"{self.what}: bytes after the end of its {layer.name} data")
        self.size += len(data)
        if self.size > self.limit:
            raise self._too_large()
        return data

    def finish(self) -> bytes:
        for layer in self.layers:
            if not layer.inflater.eof:
                raise AnswerRefused(f"{self.what}: its {layer.name} data ends early")
        return b""


@dataclass(frozen=True)
class Answer:
    """A whole HTTP answer, its body decoded."""

    status_code: int
    headers: httpx.Headers
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self, where: str) -> Any:
        """The body as strict JSON (no NaN/Infinity, nested at most inputs.MAX_DEPTH); ValueError otherwise."""
        return parse_json(self.content, where=where, finite=True)


async def decoded_pieces(response: httpx.Response, limit: int, what: str) -> AsyncIterator[bytes]:
    """The body of a streamed httpx response, decoded by `BodyDecoder` as it arrives."""
    decoder = BodyDecoder(response.headers.get("content-encoding"), limit, what)
    async for raw in response.aiter_raw():
        piece = decoder.feed(raw)
        if piece:
            yield piece
    decoder.finish()


async def fetch(http: httpx.AsyncClient | DirectGets, method: str, url: str, *, limit: int, deadline_s: float,
                **options: Any) -> Answer:
    """One request whose whole answer (head and body) must come within `deadline_s` and decode to at most
    `limit` bytes. Raises httpx errors: AnswerTooSlow, AnswerRefused, or those of the connection. A `DirectGets`
    takes GETs of a path only, without options (its deadline is the only timeout)."""
    if isinstance(http, DirectGets):
        if method != "GET" or options:
            raise ValueError(f"DirectGets asks plain GETs only, not {method} with {sorted(options)}")
        what = f"GET {url}"
        try:
            async with asyncio.timeout(deadline_s):
                return await http.get(url, limit, what)
        except TimeoutError:
            raise AnswerTooSlow(f"{what}: no whole answer within {deadline_s:g} s") from None
    what = f"{method} {httpx.URL(url).path or url}"
    try:
        async with asyncio.timeout(deadline_s), http.stream(method, url, **options) as response:
            parts = [piece async for piece in decoded_pieces(response, limit, what)]
            return Answer(response.status_code, response.headers, b"".join(parts))
    except TimeoutError:
        raise AnswerTooSlow(f"{what}: no whole answer within {deadline_s:g} s") from None


class BlockingFetcher:
    """`fetch` for code that does not run in an event loop: its own loop and httpx client, kept between calls.
    Called from a thread whose loop is running (the app's), each call runs on a short-lived thread instead."""

    def __init__(self, **client_options: Any) -> None:
        self._runner = asyncio.Runner()
        self._options = client_options
        self._http: httpx.AsyncClient | None = None
        self._closed = False

    def fetch(self, method: str, url: str, *, limit: int, deadline_s: float, **options: Any) -> Answer:
        if self._closed:  # a reader's thread may ask once more as its owner closes it
            raise RuntimeError("closed")
        return _outside_a_loop(lambda: self._runner.run(self._fetch(method, url, limit, deadline_s, options)))

    async def _fetch(self, method: str, url: str, limit: int, deadline_s: float, options: dict) -> Answer:
        if self._http is None:
            self._http = httpx.AsyncClient(**self._options)
        return await fetch(self._http, method, url, limit=limit, deadline_s=deadline_s, **options)

    def close(self) -> None:
        """Close the client and the loop; a second close does nothing (sources are stopped by more than one
        owner as the app ends)."""
        if self._closed:
            return
        self._closed = True

        def shut() -> None:
            if self._http is not None:  # no coroutine made for a runner that never ran one
                self._runner.run(self._aclose())
            self._runner.close()

        _outside_a_loop(shut)

    async def _aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None


def _outside_a_loop(call: Callable[[], T]) -> T:
    """`call()` here, or on a short-lived thread when this thread runs an event loop (which would refuse it)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return call()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:  # handed to the caller's thread
            outcome["error"] = error

    worker = threading.Thread(target=work, name="specmon-fetch", daemon=True)
    worker.start()
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


_UNSAFE_HEADER = re.compile(r"[\r\n\0]")


class _GetProtocol(H1Connection):
    """One kept-alive connection for `DirectGets`: a `BodyDecoder` decodes and counts each answer's body as it
    arrives; `answer` is the whole of it once `done`. Faults are httpx's exceptions."""

    def begin_get(self, limit: int, what: str) -> None:
        self.begin()
        self._limit = limit
        self._what = what
        self._decoder: BodyDecoder | None = None
        self._parts: list[bytes] = []

    def head_received(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self._answer_headers = httpx.Headers(headers)
        self._decoder = BodyDecoder(self._answer_headers.get("content-encoding"), self._limit, self._what)

    def on_body(self, body: bytes) -> None:
        assert self._decoder is not None
        piece = self._decoder.feed(body)
        if piece:
            self._parts.append(piece)

    def fault(self, kind: str, message: str) -> BaseException:
        return (httpx.ReadError if kind == "ReadError" else httpx.RemoteProtocolError)(f"{self._what}: {message}")

    def answer(self) -> Answer:
        """The answer, once `done` with None (AnswerRefused when its encoded data ends early)."""
        assert self._decoder is not None
        self._decoder.finish()
        return Answer(self.status, self._answer_headers, b"".join(self._parts))


class DirectGets:
    """Bounded GETs (see `fetch`) to one plain http:// server, on kept-alive connections: one at a time in use
    (more only while GETs overlap), all closed with it. Only for a server that no proxy stands in front of."""

    def __init__(self, base_url: str, headers: Mapping[str, str] | None = None, connect_timeout_s: float = 5.0) -> None:
        url = urlsplit(base_url)
        if url.scheme != "http" or not url.hostname:
            raise ValueError(f"not a plain http:// URL: {base_url!r}")
        self.host = url.hostname
        self.port = url.port or 80
        self.base_path = url.path.rstrip("/")
        self.connect_timeout_s = connect_timeout_s
        pairs = list((headers or {}).items())
        extra = "".join(f"{name}: {value}\r\n" for name, value in pairs)
        self._head_end = (
            f"Host: {url.netloc}\r\nAccept: */*\r\nAccept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\n"
            f"User-Agent: specmon\r\n{extra}\r\n"
        )
        self._unsafe = any(_UNSAFE_HEADER.search(name + value) or ":" in name for name, value in pairs)
        try:
            self._head_end.encode("latin-1")
        except UnicodeEncodeError:
            self._unsafe = True
        self._idle: list[_GetProtocol] = []
        self._closed = False

    async def get(self, path: str, limit: int, what: str) -> Answer:
        """The answer to `GET path` (raises httpx's errors); callers bound it in time (`fetch`)."""
        if self._unsafe:
            raise httpx.LocalProtocolError(f"{what}: a header has a line break, a NUL or a character past latin-1: not sent")
        if not path.startswith("/") or _UNSAFE_HEADER.search(path) or " " in path:
            raise ValueError(f"not a path: {path!r}")
        request = f"GET {self.base_path}{path} HTTP/1.1\r\n{self._head_end}".encode("latin-1")
        conn = self._reused()
        if conn is not None:
            try:
                return await self._exchange(conn, request, limit, what)
            except (httpx.RemoteProtocolError, httpx.ReadError):
                if conn.received:
                    raise
                # the server closed the kept connection as the request went out: once more on a new one
        return await self._exchange(await self._connect(), request, limit, what)

    def _reused(self) -> _GetProtocol | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    async def _connect(self) -> _GetProtocol:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(_GetProtocol, self.host, self.port)
        except TimeoutError:
            raise httpx.ConnectTimeout(f"{self.host}:{self.port}: no connection within {self.connect_timeout_s:g} s") from None
        except OSError as exc:
            raise httpx.ConnectError(f"{self.host}:{self.port}: {exc.strerror or exc}") from None
        return conn

    async def _exchange(self, conn: _GetProtocol, request: bytes, limit: int, what: str) -> Answer:
        conn.begin_get(limit, what)
        assert conn.done is not None
        try:
            conn.send(request)
            await conn.done
            answer = conn.answer()
        except BaseException:
            conn.close()  # cancelled (the deadline) or failed mid-answer: this connection is done
            raise
        if not conn.closed and not self._closed:
            self._idle.append(conn)
        return answer

    async def aclose(self) -> None:
        self._closed = True
        while self._idle:
            self._idle.pop().close()

    async def __aenter__(self) -> DirectGets:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
