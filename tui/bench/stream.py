"""A streaming client for SGLang's native `/generate`, timing each chunk the moment its bytes arrive."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from specmon.tui.bench.model import RequestResult
from specmon.tui.bench.stats import is_degenerate

MAX_ERROR_CHARS = 300
MAX_EVENT_BYTES = 16 * 1024 * 1024


class StreamError(Exception):
    """The stream broke: an HTTP error, a non-JSON body, garbled SSE, or an error event from the server."""


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


class _StreamState:
    """Folds SSE events into a RequestResult; SGLang's text and completion_tokens are cumulative."""

    def __init__(self, result: RequestResult, t_send: float) -> None:
        self.result = result
        self.t_send = t_send
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.first_tokens = 0
        self.tokens = 0
        self.text = ""
        self.done = False
        self.final_meta: dict[str, Any] | None = None

    def feed(self, data: bytes, at: float) -> None:
        if data.strip() == b"[DONE]":
            self.done = True
            return
        try:
            event = json.loads(data)
        except ValueError as exc:
            raise StreamError(f"garbled SSE event: {data[:80]!r}") from exc
        if not isinstance(event, dict):
            raise StreamError(f"unexpected SSE event: {data[:80]!r}")
        if "error" in event:
            err = event["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            raise StreamError(f"server error: {str(msg)[:MAX_ERROR_CHARS]}")
        meta = event.get("meta_info") or {}
        text = event.get("text")
        if isinstance(text, str):
            self.text = text if text.startswith(self.text) else self.text + text
        tokens = meta.get("completion_tokens")
        if not isinstance(tokens, int):
            ids = event.get("output_ids")
            tokens = len(ids) if isinstance(ids, list) else self.tokens
        if tokens > self.tokens:
            new = tokens - self.tokens
            if self.t_first is None:
                self.t_first = at
                self.first_tokens = new
            else:
                self.result.chunk_gaps_ms.append((at - (self.t_last or at)) * 1000.0)
                self.result.chunk_tokens.append(new)
            self.t_last = at
            self.tokens = tokens
        if isinstance(meta.get("prompt_tokens"), int):
            self.result.prompt_tokens = meta["prompt_tokens"]
        if meta.get("finish_reason") is not None:
            self.final_meta = meta

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
        reason = meta.get("finish_reason")
        r.finish_reason = reason.get("type", str(reason)) if isinstance(reason, dict) else str(reason)
        if r.finish_reason == "abort":
            raise StreamError(f"request aborted: {reason.get('message', '') if isinstance(reason, dict) else ''}")
        verify = meta.get("spec_verify_ct")
        if isinstance(verify, int) and verify > 0:
            r.spec_verify_ct = verify
            r.accept_length = self.tokens / verify
        if isinstance(meta.get("e2e_latency"), int | float):
            r.server_e2e_s = float(meta["e2e_latency"])
        if is_degenerate(self.text):
            r.flags.append("repetition")
        r.ok = True
        return r


async def stream_generate(
    client: httpx.AsyncClient,
    payload: dict[str, Any],
    index: int,
    prompt_id: str,
    warmup: bool = False,
    path: str = "/generate",
) -> RequestResult:
    """Send one streamed `/generate` request and measure it; failures come back as `ok=False` with `error`."""
    result = RequestResult(index=index, prompt_id=prompt_id, warmup=warmup)
    t_send = time.perf_counter()
    state = _StreamState(result, t_send)
    try:
        async with client.stream("POST", path, json=payload) as response:
            if response.status_code >= 400:
                body = await response.aread()
                raise StreamError(error_message(response.status_code, body))
            buffer = b""
            async for chunk in response.aiter_bytes():
                at = time.perf_counter()
                buffer += chunk
                while True:
                    cut = buffer.find(b"\n\n")
                    if cut < 0:
                        break
                    event, buffer = buffer[:cut], buffer[cut + 2 :]
                    _feed_event(state, event, at)
                if len(buffer) > MAX_EVENT_BYTES:
                    raise StreamError("garbled SSE: an event larger than 16 MiB without a separator")
            if buffer.strip():
                _feed_event(state, buffer, time.perf_counter())
        state.finish(time.perf_counter())
    except StreamError as exc:
        result.ok = False
        result.error = str(exc)
    except httpx.HTTPError as exc:
        result.ok = False
        result.error = f"{type(exc).__name__}: {str(exc)[:MAX_ERROR_CHARS] or 'connection failed'}"
    if not result.ok:
        result.completion_tokens = result.completion_tokens or state.tokens
        result.output_text = result.output_text or state.text
        if result.e2e_s is None:
            result.e2e_s = time.perf_counter() - t_send
    return result


def _feed_event(state: _StreamState, event: bytes, at: float) -> None:
    data_lines = []
    for line in event.replace(b"\r\n", b"\n").split(b"\n"):
        if line.startswith(b"data:"):
            data_lines.append(line[5:].lstrip(b" "))
        elif line.strip() and not line.startswith(b":"):
            raise StreamError(f"garbled SSE line: {line[:80]!r}")
    if data_lines:
        state.feed(b"\n".join(data_lines), at)
