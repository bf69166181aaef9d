"""Every HTTP request specmon makes, over one maintained client (aiohttp, whose C parser is llhttp), with
specmon's bounds put over it here and nowhere else.

The bounds: an answer's whole exchange (connection, head and body) within one deadline (`fetch`; a stream's
reader keeps its own watchdog), its body decoded by `BodyDecoder` so the decoded size is bounded (aiohttp's own
decompression is off), strict JSON (`Answer.json`), a response head of at most `MAX_HEADERS` lines of at most
`MAX_HEAD_LINE` bytes, no redirect followed, no cookie kept, and the proxy rule of `urls.proxy_for` (aiohttp's
`trust_env`, which would also read ~/.netrc, stays off). Every URL is checked (`urls.checked_url`) before a
connection is made.

Every request has a connection of its own, closed once its answer is read (as SGLang's own benchmark does): no
byte of one answer, no 1xx and no server's close of an idle connection can reach another request. What
aiohttp raises comes out as specmon's classes (`errors`); callers catch those only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json as jsonlib
import re
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from specmon.http.decode import DECODED, BodyDecoder
from specmon.http.errors import (
    AnswerTooSlow,
    BadUrl,
    ConnectError,
    ConnectTimeout,
    HttpError,
    ReadError,
    RemoteProtocolError,
    RequestRefused,
)
from specmon.http.headers import basic_auth_headers
from specmon.inputs import parse_json
from specmon.text import printable
from specmon.urls import UrlRefused, checked_url, proxy_for

MAX_HEAD_LINE = 8190
"""A response's status line and each of its header lines at most this many bytes (a real SGLang head is ~200)."""
MAX_HEADERS = 128
"""A response head of at most this many header lines."""
DEFAULT_CONNECT_TIMEOUT_S = 10.0
MAX_REASON_CHARS = 300
"""A failure's reason is cut here (a parser's message may quote what the server sent)."""
USER_AGENT = "specmon"

_UNSENDABLE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


@dataclass(frozen=True)
class Answer:
    """A whole HTTP answer, its body decoded; `headers` are looked up in any case."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self, where: str) -> Any:
        """The body as strict JSON (no NaN/Infinity, nested at most inputs.MAX_DEPTH); ValueError otherwise."""
        return parse_json(self.content, where=where, finite=True)


class Streamed:
    """An answer whose body is read as it arrives, inside `HttpClient.stream`: `raw_pieces` as sent (still
    encoded), `decoded_pieces` through `BodyDecoder`. A broken connection or framing is RemoteProtocolError or
    ReadError, named for the request."""

    def __init__(self, response: aiohttp.ClientResponse, what: str) -> None:
        self.status_code = response.status
        self.headers: Mapping[str, str] = response.headers
        self.what = what
        self._response = response

    @property
    def socket(self) -> Any:
        """The connection's socket (None once it is closed)."""
        connection = self._response.connection
        transport = connection.transport if connection is not None else None
        return transport.get_extra_info("socket") if transport is not None else None

    async def raw_pieces(self) -> AsyncIterator[bytes]:
        content = self._response.content
        while True:
            try:
                piece = await content.readany()
            except (aiohttp.ClientError, OSError) as exc:
                raise translated(exc, self.what) from None
            if not piece:
                return
            yield piece

    async def decoded_pieces(self, limit: int) -> AsyncIterator[bytes]:
        """The body decoded as it arrives; AnswerRefused as soon as it passes `limit` bytes."""
        decoder = BodyDecoder(self.headers.get("Content-Encoding"), limit, self.what)
        async for raw in self.raw_pieces():
            piece = decoder.feed(raw)
            if piece:
                yield piece
        decoder.finish()

    async def body(self, limit: int) -> bytes:
        return b"".join([piece async for piece in self.decoded_pieces(limit)])


class HttpClient:
    """Requests to one server (`base_url`, to which paths are joined) or to whole URLs, with `headers` on each:
    one aiohttp session, made in the loop of the first request and closed with the client (`aclose`, or
    `async with`). A header that cannot be sent (a line break, a NUL) makes every request RequestRefused,
    before anything is sent.

    `accept_encoding`: what is asked (only what `BodyDecoder` undoes; "identity" where compression would cost
    more than it saves). `ssl`: True (the system's CAs), or an SSLContext (a CA file)."""

    def __init__(
        self,
        base_url: str = "",
        *,
        headers: Mapping[str, str] | None = None,
        basic_auth: tuple[str, str] | None = None,
        ssl_context: ssl.SSLContext | bool = True,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        accept_encoding: str = DECODED,
        user_agent: str = USER_AGENT,
    ) -> None:
        self.base_url = _checked(base_url.rstrip("/"), "the server URL") if base_url else ""
        self.connect_timeout_s = connect_timeout_s
        self.headers = {"User-Agent": user_agent, "Accept": "*/*", "Accept-Encoding": accept_encoding,
                        **(headers or {}), **(basic_auth_headers(*basic_auth) if basic_auth else {})}
        self._unsendable = next((name for name, value in self.headers.items()
                                 if _UNSENDABLE.search(name + value) or ":" in name or not value.isascii()), None)
        self._ssl = ssl_context
        self._proxies: dict[tuple[str, str], str | None] = {}
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    def url(self, url: str) -> str:
        """`url` when it is whole (http:// or https://), else the base URL and this path; checked either way."""
        if url.startswith(("http://", "https://")):
            return _checked(url)
        if not self.base_url or not url.startswith("/"):
            raise BadUrl(f"{url[:80]!r} is not a path of the server's URL")
        return _checked(self.base_url + url)

    def _proxy(self, url: str) -> str | None:
        """`urls.proxy_for`, decided once per scheme and host for the client's life (as the environment is)."""
        parts = urlsplit(url)
        key = (parts.scheme, parts.netloc)
        if key not in self._proxies:
            self._proxies[key] = proxy_for(url)
        return self._proxies[key]

    def _session_now(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("the HTTP client is closed")
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True, limit=0, ssl=self._ssl),
                timeout=aiohttp.ClientTimeout(total=None, connect=self.connect_timeout_s,
                                              sock_connect=self.connect_timeout_s),
                headers=self.headers, auto_decompress=False, trust_env=False,
                cookie_jar=aiohttp.DummyCookieJar(), max_line_size=MAX_HEAD_LINE, max_field_size=MAX_HEAD_LINE,
                max_headers=MAX_HEADERS,
            )
        return self._session

    @contextlib.asynccontextmanager
    async def stream(self, method: str, url: str, *, params: Mapping[str, str] | None = None, json: Any = None,
                     headers: Mapping[str, str] | None = None) -> AsyncIterator[Streamed]:
        """One request; its answer's head, with the body still to read (see `Streamed`). Nothing bounds its
        time here: the caller does (`fetch`, or a stream's watchdog). The connection closes on leaving."""
        full = self.url(url)
        what = _what(method, full)
        if self._unsendable is not None:
            raise RequestRefused.of(what, f"the {self._unsendable[:40]} header has a line break, a NUL or a "
                                 "non-ASCII character: not sent")
        extra = dict(headers or {})
        body = None
        if json is not None:
            body = jsonlib.dumps(json, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
            extra["Content-Type"] = "application/json"
        session = self._session_now()
        try:
            response = await session.request(method, full, params=params, data=body, headers=extra,
                                             allow_redirects=False, proxy=self._proxy(full))
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise translated(exc, what, self.connect_timeout_s) from None
        try:
            yield Streamed(response, what)
        finally:
            response.close()

    async def fetch(self, method: str, url: str, *, limit: int, deadline_s: float,
                    params: Mapping[str, str] | None = None, json: Any = None,
                    headers: Mapping[str, str] | None = None) -> Answer:
        """One request whose whole answer (connection, head and body) comes within `deadline_s` and decodes to
        at most `limit` bytes. Raises specmon's errors: AnswerTooSlow, AnswerRefused, a TransportError..."""
        what = _what(method, url)
        try:
            async with asyncio.timeout(deadline_s), self.stream(method, url, params=params, json=json,
                                                                headers=headers) as answer:
                return Answer(answer.status_code, answer.headers, await answer.body(limit))
        except TimeoutError:
            raise AnswerTooSlow.of(what, f"no whole answer within {deadline_s:g} s") from None

    async def aclose(self) -> None:
        self._closed = True
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def __aenter__(self) -> HttpClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _checked(url: str, what: str = "the URL") -> str:
    """`urls.checked_url`, its refusal a BadUrl (an HttpError, as every failed request is)."""
    try:
        return checked_url(url, what)
    except UrlRefused as exc:
        raise BadUrl(str(exc)) from None


def _what(method: str, url: str) -> str:
    """The request in a message: its method and path (`GET /metrics`), whatever the URL holds."""
    try:
        path = urlsplit(url).path
    except ValueError:  # an unclosed [: refused by checked_url
        path = ""
    return f"{method} {printable(path or url)[:120]}"


def translated(exc: BaseException, what: str, connect_timeout_s: float | None = None) -> HttpError:
    """aiohttp's (or the socket's) exception as specmon's, in one line beginning with `what` (the request)."""
    if isinstance(exc, HttpError):
        return exc
    error = _translated(exc, what, connect_timeout_s)
    reason = printable(" ".join(error.reason.split()))[:MAX_REASON_CHARS]
    return type(error).of(what, reason)


def _translated(exc: BaseException, what: str, connect_timeout_s: float | None) -> HttpError:
    if isinstance(exc, aiohttp.ConnectionTimeoutError | aiohttp.ServerTimeoutError):
        within = f" within {connect_timeout_s:g} s" if connect_timeout_s else ""
        return ConnectTimeout.of(what, f"no connection{within}")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return ConnectError.of(what, f"{exc.host}:{exc.port}: {exc.strerror or exc.os_error}")
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return RemoteProtocolError.of(what, "the server disconnected without sending a whole answer")
    if isinstance(exc, aiohttp.ClientPayloadError):
        cause = exc.__cause__ or exc.__context__
        return RemoteProtocolError.of(what, f"{_payload_message(cause if cause is not None else exc)}")
    if isinstance(exc, aiohttp.ClientResponseError):
        return RemoteProtocolError.of(what, f"{exc.message or exc}")
    if isinstance(exc, aiohttp.InvalidURL):
        return BadUrl.of(what, f"not a URL specmon asks ({exc})")
    if isinstance(exc, ValueError):
        return RequestRefused.of(what, f"{exc}: not sent")
    if isinstance(exc, OSError):
        return ReadError.of(what, f"{exc.strerror or exc}")
    return RemoteProtocolError.of(what, f"{type(exc).__name__}: {exc}")


def _payload_message(exc: BaseException) -> str:
    """A broken body in words: aiohttp's ContentLengthError and TransferEncodingError, in the words specmon
    always used."""
    name = type(exc).__name__
    if name == "ContentLengthError":
        return "peer closed connection without sending complete message body (its Content-Length)"
    if name == "TransferEncodingError":
        return f"peer closed connection without sending complete message body (chunked: {getattr(exc, 'message', exc)})"
    return f"{getattr(exc, 'message', None) or exc}"
