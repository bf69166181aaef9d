"""A streaming client for SGLang's native `/generate`, timing each chunk the moment its bytes arrive.

Everything the server sends is checked before use: a count that is not a finite integer, goes backwards or
runs far past `max_new_tokens` makes the request invalid (with the reason), and memory is bounded by
`max_new_tokens`, never by what the server claims. A request that gets no event for `stall_timeout_s` fails,
and none outlives the run's `deadline`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec

from specmon.bench.model import RequestResult
from specmon.bench.predict import clean_histogram
from specmon.bench.stats import is_degenerate
from specmon.http.client import HttpClient, Streamed
from specmon.http.errors import AnswerRefused, HttpError
from specmon.http.headers import auth_headers
from specmon.redact import redacted_text

MAX_ERROR_CHARS = 300
# A count this far past max_new_tokens is the server's error, not a verify step's overshoot.
MAX_TOKEN_OVERSHOOT = 64
# Bytes allowed per asked token (text and output_ids of a cumulative event), on top of a fixed allowance.
EVENT_BYTES_PER_TOKEN = 256
EVENT_BYTES_BASE = 1024 * 1024
TEXT_CHARS_PER_TOKEN = 64
DEFAULT_STALL_TIMEOUT_S = 60.0


class StreamError(Exception):
    """The stream broke: an HTTP error, a non-JSON body, garbled SSE, or an error event from the server."""

    def __init__(self, message: str) -> None:
        super().__init__(redacted_text(message))  # stored with the run: a server's words may echo the API key


class InvalidAnswer(StreamError):
    """The server's figures cannot be true (a count that is not a number, goes backwards, or is far too big)."""


class Stalled(StreamError):
    """No event within the stall timeout, or the run's deadline passed."""


def error_message(status: int, body: bytes) -> str:
    """A short message for an HTTP error response, from SGLang's `{"error": ...}` body when it has one."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        err = data.get("error", data.get("detail", data.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            text = str(err)
    return f"HTTP {status}: {text[:MAX_ERROR_CHARS] or '(empty body)'}"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


_STRICT_JSON = json.JSONDecoder(parse_constant=_reject_constant)


def _loads(data: bytes) -> Any:
    """Strict JSON: NaN and Infinity are refused (Python's json takes them by default). One decoder for every
    event (`json.loads` with an option builds a new one per call)."""
    return _STRICT_JSON.decode(data.decode("utf-8"))


class _Meta(msgspec.Struct):
    """The meta_info fields the client reads, each checked where it is read; the others are skipped unread."""

    completion_tokens: Any = None
    prompt_tokens: Any = None
    finish_reason: Any = None
    spec_verify_ct: Any = None
    spec_accept_histogram: Any = None
    e2e_latency: Any = None


class _Event(msgspec.Struct):
    """The fields of one event the client reads. `output_ids` stays undecoded JSON (it is counted only when
    completion_tokens is missing): decoding SGLang's cumulative list on every event was most of the decode."""

    text: Any = None
    output_ids: msgspec.Raw = msgspec.Raw()
    meta_info: _Meta | None = None
    error: Any = msgspec.UNSET


_EVENT = msgspec.json.Decoder(_Event)
_NO_META = _Meta()


def _decoded(data: bytes) -> tuple[Any, _Meta, Any]:
    """An event's text, meta_info and output_ids (undecoded JSON, or a list); a server's error event is a
    StreamError. Strict JSON (NaN, Infinity and invalid UTF-8 refused); what msgspec refuses is read again by
    Python's json, so that an event of another shape fails with the same message it always did."""
    try:
        event = _EVENT.decode(data)
    except msgspec.DecodeError:
        return _decoded_slowly(data)
    except RecursionError as exc:
        raise StreamError(f"garbled SSE event: {data[:80]!r} (nested too deep)") from exc
    if event.error is not msgspec.UNSET:
        _raise_server_error(event.error)
    return event.text, event.meta_info or _NO_META, event.output_ids


def _decoded_slowly(data: bytes) -> tuple[Any, _Meta, Any]:
    try:
        event = _loads(data)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError included
        raise StreamError(f"garbled SSE event: {data[:80]!r}") from exc
    if not isinstance(event, dict):
        raise StreamError(f"unexpected SSE event: {data[:80]!r}")
    if "error" in event:
        _raise_server_error(event["error"])
    meta = event.get("meta_info")
    if meta is None:
        meta = {}
    elif not isinstance(meta, dict):
        raise InvalidAnswer(f"invalid answer: meta_info is {_show(meta)}, not an object")
    fields = _Meta(**{name: meta.get(name) for name in _Meta.__struct_fields__})
    return event.get("text"), fields, event.get("output_ids")


def _raise_server_error(err: Any) -> None:
    msg = err.get("message", err) if isinstance(err, dict) else err
    raise StreamError(f"server error: {str(msg)[:MAX_ERROR_CHARS]}")


def _ids_count(ids: Any) -> int | None:
    """How many output_ids an event lists (None when it has no list)."""
    if isinstance(ids, msgspec.Raw):
        if not ids:
            return None
        ids = msgspec.json.decode(ids)
    return len(ids) if isinstance(ids, list) else None


def _count(value: Any, key: str) -> int | None:
    """An integer count from meta_info (None when absent); anything else is an InvalidAnswer."""
    if value is None or (type(value) is int and value >= 0):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidAnswer(f"invalid answer: {key} is {_show(value)}, not an integer")
    if value < 0:
        raise InvalidAnswer(f"invalid answer: {key} is negative ({value})")
    return value


def _seconds(value: Any, key: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise InvalidAnswer(f"invalid answer: {key} is {_show(value)}, not a duration in seconds")
    return float(value)


def _show(value: Any) -> str:
    return f"{type(value).__name__} {str(value)[:40]!r}" if not isinstance(value, int | float) else repr(value)


class _StreamState:
    """Folds SSE events into a RequestResult; SGLang's text and completion_tokens are cumulative."""

    def __init__(self, result: RequestResult, t_send: float, max_new_tokens: int,
                 on_tokens: Callable[[int], None] | None = None) -> None:
        self.result = result
        self.on_tokens = on_tokens
        self.t_send = t_send
        self.max_tokens = max_new_tokens + MAX_TOKEN_OVERSHOOT
        self.max_text = EVENT_BYTES_BASE + TEXT_CHARS_PER_TOKEN * max_new_tokens
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.first_tokens = 0
        self.tokens = 0
        self.text = ""
        self.done = False
        self.final_meta: _Meta | None = None

    def feed(self, data: bytes, at: float) -> None:
        if len(data) < 16 and data.strip() == b"[DONE]":
            self.done = True
            return
        text, meta, ids = _decoded(data)
        self._take_text(text)
        tokens = _count(meta.completion_tokens, "completion_tokens")
        if tokens is None:
            tokens = _ids_count(ids)
        self._take_tokens(self.tokens if tokens is None else tokens, at)
        self._check_final_figures(meta)
        prompt_tokens = _count(meta.prompt_tokens, "prompt_tokens")
        if prompt_tokens is not None:
            self.result.prompt_tokens = prompt_tokens
        if meta.finish_reason is not None:
            self.final_meta = meta

    def _check_final_figures(self, meta: _Meta) -> None:
        verify = _count(meta.spec_verify_ct, "spec_verify_ct")
        if verify and verify > self.tokens:
            raise InvalidAnswer(
                f"invalid answer: spec_verify_ct {verify} is more than completion_tokens {self.tokens} "
                "(every verify step emits at least one token)"
            )
        _seconds(meta.e2e_latency, "e2e_latency")

    def _take_text(self, text: Any) -> None:
        if text is None:
            return
        if not isinstance(text, str):
            raise InvalidAnswer(f"invalid answer: text is {_show(text)}, not a string")
        self.text = text if text.startswith(self.text) else self.text + text
        if len(self.text) > self.max_text:
            raise InvalidAnswer(f"invalid answer: more than {self.max_text} characters of text")

    def _take_tokens(self, tokens: int, at: float) -> None:
        if tokens < self.tokens:
            raise InvalidAnswer(f"invalid answer: completion_tokens went back from {self.tokens} to {tokens}")
        if tokens > self.max_tokens:
            raise InvalidAnswer(
                f"invalid answer: completion_tokens {tokens} is far beyond max_new_tokens "
                f"{self.max_tokens - MAX_TOKEN_OVERSHOOT}"
            )
        if tokens == self.tokens:
            return
        new = tokens - self.tokens
        if self.on_tokens is not None:
            self.on_tokens(new)
        if self.t_first is None:
            self.t_first = at
            self.first_tokens = new
        else:
            self.result.chunk_gaps_ms.append((at - (self.t_last or at)) * 1000.0)
            self.result.chunk_tokens.append(new)
        self.t_last = at
        self.tokens = tokens

    def finish(self, at: float) -> RequestResult:
        r = self.result
        r.e2e_s = at - self.t_send
        r.completion_tokens = self.tokens
        r.output_text = self.text
        if self.t_first is not None:
            r.ttft_s = self.t_first - self.t_send
            span = (self.t_last or self.t_first) - self.t_first
            decoded = self.tokens - self.first_tokens
            if span > 0 and decoded > 0:
                r.decode_tok_s = decoded / span
        meta = self.final_meta
        if meta is None:
            raise StreamError("stream ended before the final chunk" + ("" if self.done else " (no [DONE])"))
        reason = meta.finish_reason
        r.finish_reason = reason.get("type", str(reason)) if isinstance(reason, dict) else str(reason)
        if r.finish_reason == "abort":
            raise StreamError(f"request aborted: {reason.get('message', '') if isinstance(reason, dict) else ''}")
        verify = _count(meta.spec_verify_ct, "spec_verify_ct")
        if verify:
            r.spec_verify_ct = verify
            r.accept_length = self.tokens / verify
            histogram = clean_histogram(meta.spec_accept_histogram, max_len=self.max_tokens + 1)
            if histogram is not None and sum(histogram) == verify:
                r.accept_histogram = histogram
        r.server_e2e_s = _seconds(meta.e2e_latency, "e2e_latency")
        if is_degenerate(self.text):
            r.flags.append("repetition")
        r.ok = True
        return r


_QUICKACK = getattr(socket, "TCP_QUICKACK", None)


def _set_quickack(sock: Any) -> None:
    """TCP_QUICKACK on `sock` (a socket, or None); Linux only, and any error is ignored. Called for every piece
    read: kept to one test and one system call."""
    if _QUICKACK is not None and sock is not None:
        try:  # noqa: SIM105 (contextlib.suppress would be a context manager per piece)
            sock.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
        except OSError:
            pass


def stream_client(base_url: str, api_key: str | None = None, *, connect_timeout: float = 10.0) -> HttpClient:
    """The client `stream_generate` reads one server's streams with (the API key as a Bearer header, each
    stream on a connection of its own, as SGLang's own benchmark does), closed with itself."""
    return HttpClient(base_url, headers=auth_headers(api_key), connect_timeout_s=connect_timeout,
                      accept_encoding="identity")


async def stream_generate(
    client: HttpClient,
    payload: dict[str, Any],
    index: int,
    prompt_id: str,
    warmup: bool = False,
    path: str = "/generate",
    *,
    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
    deadline: float | None = None,
    on_tokens: Callable[[int], None] | None = None,
) -> RequestResult:
    """Send one streamed `/generate` request and measure it; failures come back as `ok=False` with `error`.

    `deadline` is a `time.perf_counter()` value the request may not outlive (the run's deadline); `on_tokens`
    is called with the new tokens of each chunk that brings some, as it arrives.
    """
    result = RequestResult(index=index, prompt_id=prompt_id, warmup=warmup)
    max_new = (payload.get("sampling_params") or {}).get("max_new_tokens") or 0
    t_send = time.perf_counter()
    state = _StreamState(result, t_send, max_new, on_tokens)
    watchdog = _Watchdog(stall_timeout_s, deadline)
    try:
        async with asyncio.timeout(None) as timer, watchdog.watching(timer):
            await _read_stream(client, path, payload, state, watchdog, max_new)
        state.finish(time.perf_counter())
    except TimeoutError:
        result.ok = False
        result.error = watchdog.message()
    except StreamError as exc:
        result.ok = False
        result.error = str(exc)
    except HttpError as exc:
        result.ok = False
        result.error = f"{type(exc).__name__}: {exc.reason[:MAX_ERROR_CHARS] or 'connection failed'}"
    if not result.ok:
        result.completion_tokens = result.completion_tokens or state.tokens
        result.output_text = result.output_text or state.text
        if result.e2e_s is None:
            result.e2e_s = time.perf_counter() - t_send
    return result


_CLOCK_RESOLUTION = time.get_clock_info("monotonic").resolution  # the event loop's clock


class _Watchdog:
    """The stall timeout (renewed by every event) capped by the run's deadline, in loop time. An event only
    notes its time; the one timer checks it when it is due and expires the request's Timeout only if no event
    came since (moving a timer per event cost a heap entry each)."""

    def __init__(self, stall_s: float, deadline: float | None) -> None:
        self.stall_s = stall_s
        loop = asyncio.get_running_loop()
        # perf_counter and the loop's clock are both monotonic; convert the deadline once.
        self.deadline = None if deadline is None else loop.time() + (deadline - time.perf_counter())
        self.last_event = loop.time()
        self._loop = loop
        self._timer: asyncio.Timeout | None = None
        self._check_handle: asyncio.TimerHandle | None = None

    @contextlib.asynccontextmanager
    async def watching(self, timer: asyncio.Timeout) -> AsyncIterator[None]:
        """Watch the stream while inside: `timer` (entered, with no expiry) expires when the stream stalls."""
        self._timer = timer
        self._check_handle = self._loop.call_at(self.next_expiry(), self._check)
        try:
            yield
        finally:
            self._check_handle.cancel()
            self._timer = None

    def next_expiry(self) -> float:
        expiry = self.last_event + self.stall_s
        return expiry if self.deadline is None else min(expiry, self.deadline)

    def renew(self) -> None:
        self.last_event = self._loop.time()

    def _check(self) -> None:
        if self._timer is None:
            return
        expiry, now = self.next_expiry(), self._loop.time()
        if now >= expiry - _CLOCK_RESOLUTION:  # the loop runs a timer up to its clock's resolution early
            self._timer.reschedule(now)
        else:
            self._check_handle = self._loop.call_at(expiry, self._check)

    def message(self) -> str:
        if self.deadline is not None and self._loop.time() >= self.deadline - 0.001:
            return "Stalled: the run's deadline passed before this request finished"
        return f"Stalled: no event from the server for {self.stall_s:g} s"


async def _read_stream(
    client: HttpClient,
    path: str,
    payload: dict[str, Any],
    state: _StreamState,
    watchdog: _Watchdog,
    max_new: int,
) -> None:
    """The stream, each piece timed as the reader gets it (as SGLang's own request function times its lines)."""
    max_event = EVENT_BYTES_BASE + EVENT_BYTES_PER_TOKEN * max_new
    sse = _SseFeed(state, watchdog, max_event)
    async with client.stream("POST", path, json=payload, headers={"Accept-Encoding": "identity"}) as response:
        if response.status_code >= 400:
            raise StreamError(error_message(response.status_code, await _bounded_body(response, max_event)))
        sse.head(response)
        async for piece in response.raw_pieces():
            sse.feed(piece, time.perf_counter())
    sse.finish()


class _SseFeed:
    """SSE events from body pieces as they arrive: complete events are fed at once, the rest is kept (bounded).

    Every piece read asks for its ACK at once (TCP_QUICKACK re-armed): on a reused connection the kernel would
    delay it, and a server without TCP_NODELAY then holds its next small event until the ACK comes."""

    def __init__(self, state: _StreamState, watchdog: _Watchdog, max_event: int) -> None:
        self.state = state
        self.watchdog = watchdog
        self.max_event = max_event
        self.buffer = b""
        self.sock: Any = None

    def head(self, response: Streamed) -> None:
        _check_encoding(response.status_code, response.headers.get("Content-Encoding", "identity"))
        self.sock = response.socket
        _set_quickack(self.sock)

    def feed(self, piece: bytes, at: float) -> None:
        _set_quickack(self.sock)
        if (not self.buffer and piece.endswith(b"\n\n") and piece.startswith(b"data:")
                and piece.find(b"\n") == len(piece) - 2 and b"\r" not in piece):
            # The usual piece: one whole event of one data line (SGLang's), fed without splitting it.
            self.state.feed(piece[5:-2].lstrip(b" "), at)
            self.watchdog.renew()
            return
        buffer = self.buffer + piece if self.buffer else piece
        if b"\n\n" in buffer or b"\r\n\r\n" in buffer:
            buffer = _feed_events(self.state, buffer, at, self.watchdog)
        if len(buffer) > self.max_event:
            raise StreamError(f"garbled SSE: an event larger than {self.max_event} bytes without a separator")
        self.buffer = buffer

    def finish(self) -> None:
        if self.buffer.strip():
            _feed_event(self.state, self.buffer, time.perf_counter())


def _check_encoding(status: int, encoding: str) -> None:
    """A stream is read as sent (identity is asked): an encoded one is refused, never decoded unbounded."""
    encoding = encoding.strip().lower()
    if status < 400 and encoding not in ("identity", ""):
        raise StreamError(f"unsupported content-encoding {encoding[:40]!r} (identity asked)")


async def _bounded_body(response: Streamed, limit: int) -> bytes:
    """An error body, at most `limit` bytes once decoded (what comes past it is not read)."""
    body = b""
    try:
        async for piece in response.decoded_pieces(limit):
            body += piece
    except AnswerRefused as exc:
        return body[:limit] or str(exc).encode()
    return body


def _feed_events(state: _StreamState, buffer: bytes, at: float, watchdog: _Watchdog) -> bytes:
    """Feed every complete event in `buffer`; returns what is left (an incomplete event)."""
    if b"\r" in buffer:
        buffer = buffer.replace(b"\r\n", b"\n")
    *events, rest = buffer.split(b"\n\n")
    fed = False
    for event in events:
        fed = _feed_event(state, event, at) or fed
    if fed:
        watchdog.renew()
    return rest


def _feed_event(state: _StreamState, event: bytes, at: float) -> bool:
    """Feed one SSE event; True when it carried data (a comment-only event does not count as progress)."""
    if event.startswith(b"data:") and b"\n" not in event:  # SGLang's: one data line
        state.feed(event[5:].lstrip(b" "), at)
        return True
    data_lines = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            data_lines.append(line[5:].lstrip(b" "))
        elif line.strip() and not line.startswith(b":"):
            raise StreamError(f"garbled SSE line: {line[:80]!r}")
    if data_lines:
        state.feed(b"\n".join(data_lines), at)
    return bool(data_lines)
