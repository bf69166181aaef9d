"""An async client for an SGLang server's HTTP API (health, info, cache, metrics, one generation).

UI-free: used by the poller, `specmon check` and the benchmark. The API key is sent as a bearer token and
never appears in a repr, an error message or a log line.
"""

from __future__ import annotations

import asyncio
import errno
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from specmon import urls
from specmon.http.client import Answer, HttpClient
from specmon.http.errors import AnswerRefused, AnswerTooSlow, HttpError, RequestTimeout, TransportError
from specmon.http.headers import auth_headers, header_value
from specmon.inputs import KIB, MIB, InputError, parse_json, read_secret
from specmon.redact import redacted_text, remember_secret
from specmon.serving.metrics import MetricsSnapshot, parse_metrics
from specmon.serving.spec import SpecSettings, spec_settings

API_KEY_ENV = "SPECMON_API_KEY"
MAX_API_KEY_FILE_BYTES = 64 * KIB
# What each answer may hold once decoded (a real 0.5.16 /server_info is 29 KB, /metrics 58 KB per rank).
MAX_INFO_BYTES = 4 * MIB
MAX_METRICS_BYTES = 8 * MIB
MAX_GENERATE_BYTES = 16 * MIB
MAX_SMALL_BYTES = 64 * KIB
_LIMITS = {"/metrics": MAX_METRICS_BYTES, "/generate": MAX_GENERATE_BYTES, "/server_info": MAX_INFO_BYTES,
           "/get_server_info": MAX_INFO_BYTES, "/model_info": MAX_INFO_BYTES, "/get_model_info": MAX_INFO_BYTES}

HealthState = Literal["ready", "starting", "unreachable", "unhealthy"]

class SGLangError(Exception):
    """A request to the server failed; `status_code` is None when no HTTP answer came back."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(redacted_text(message))  # a server's or a proxy's words may echo the API key
        self.status_code = status_code


class ServerUnreachable(SGLangError):
    """Nothing answers at the URL (connection refused or reset): not started, still loading, or gone."""


class AuthenticationFailed(SGLangError):
    """The server answered 401/403: the API key is missing or wrong."""


@dataclass(frozen=True)
class HealthStatus:
    """One answer of /health: `error` is "unreachable", "starting" (503 until warmup is done) or a reason."""

    ok: bool
    status_code: int | None
    error: str | None
    latency_s: float | None

    @property
    def state(self) -> HealthState:
        if self.ok:
            return "ready"
        if self.error == "unreachable":
            return "unreachable"
        if self.error == "starting":
            return "starting"
        return "unhealthy"


@dataclass(frozen=True)
class GenerateResult:
    """The outcome of one /generate request: its final text and `meta_info`, timed on the client."""

    text: str
    meta_info: dict[str, Any]
    elapsed_s: float
    ttft_s: float | None = None
    chunks: int = 1

    @property
    def completion_tokens(self) -> int:
        return int(self.meta_info.get("completion_tokens") or 0)

    @property
    def spec_verify_ct(self) -> int | None:
        value = self.meta_info.get("spec_verify_ct")
        return int(value) if value else None

    @property
    def accept_length(self) -> float | None:
        """completion_tokens / spec_verify_ct, as SGLang's own benchmarks compute it (None without speculation)."""
        verify = self.spec_verify_ct
        return self.completion_tokens / verify if verify else None

    @property
    def tokens_per_s(self) -> float | None:
        """completion_tokens over the server's e2e_latency (the client's elapsed time when absent)."""
        latency = self.meta_info.get("e2e_latency") or self.elapsed_s
        return self.completion_tokens / latency if latency else None

    def to_json(self) -> dict[str, Any]:
        return {
            "completion_tokens": self.completion_tokens,
            "spec_verify_ct": self.spec_verify_ct,
            "accept_length": self.accept_length,
            "tokens_per_s": self.tokens_per_s,
            "elapsed_s": self.elapsed_s,
            "ttft_s": self.ttft_s,
            "finish_reason": self.meta_info.get("finish_reason"),
        }


OWN_RID_PREFIX = "specmon-bench-"
"""The rid of every request a specmon benchmark sends."""


def generate_payload(
    prompt: str | Sequence[int], max_new_tokens: int, temperature: float = 0.0, ignore_eos: bool = True, stream: bool = True,
    rid: str | None = None,
) -> dict[str, Any]:
    """The JSON body of a `/generate` request (streamed by default) for a text `prompt`, or token ids (sent as
    `input_ids`); with `rid`, the request's id in SGLang's records (a benchmark's start with OWN_RID_PREFIX, so
    that reading production leaves them out)."""
    body: dict[str, Any] = {"rid": rid} if rid else {}
    return body | {
        **({"text": prompt} if isinstance(prompt, str) else {"input_ids": list(prompt)}),
        "sampling_params": {
            "max_new_tokens": max_new_tokens,
            "temperature": temperature,
            "ignore_eos": ignore_eos,
        },
        "stream": stream,
    }



def resolve_api_key(api_key_file: str | os.PathLike[str] | None = None,
                    warn: Callable[[str], None] | None = None) -> str | None:
    """The API key from `api_key_file` when given, else from $SPECMON_API_KEY; None when neither is set. A key
    file others may read is told to `warn` (`inputs.read_secret`); the key is remembered, so that no error
    text specmon shows holds it (`redact.remember_secret`).

    Raises OSError when the file cannot be read (the message names the file, never its content), and
    HeaderRefused (an InputError) when the key cannot go in a request's header (`http.headers.header_value`).
    """
    if api_key_file:
        try:
            key = read_secret(api_key_file, MAX_API_KEY_FILE_BYTES, what="API key file", warn=warn).strip()
        except InputError as error:  # a FIFO, a device, too big: said as a read error is, with the reason
            raise OSError(errno.EINVAL, str(error).removeprefix(f"{api_key_file}: ")) from None
        except UnicodeDecodeError:
            raise OSError(errno.EINVAL, "not UTF-8 text") from None
        remember_secret(key)
        return header_value(key, f"the API key file {api_key_file}") or None
    key = os.environ.get(API_KEY_ENV, "").strip()
    remember_secret(key)
    return header_value(key, f"${API_KEY_ENV}") or None


@dataclass
class _EndpointChoice:
    """Which of a pair of endpoints (new name, deprecated get_* name) this server answers."""

    paths: tuple[str, str]
    working: str | None = None

    def order(self) -> list[str]:
        if self.working is None:
            return list(self.paths)
        return [self.working] + [p for p in self.paths if p != self.working]


class SGLangClient:
    """Async client of one SGLang server. Use as `async with SGLangClient(url) as client: ...`."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 10.0) -> None:
        self.base_url = urls.base_url(base_url)
        self.timeout = timeout
        self._http = HttpClient(self.base_url, headers=auth_headers(api_key), connect_timeout_s=timeout)
        self._server_info_paths = _EndpointChoice(("/server_info", "/get_server_info"))
        self._model_info_paths = _EndpointChoice(("/model_info", "/get_model_info"))

    def __repr__(self) -> str:
        return f"SGLangClient({self.base_url!r})"

    async def __aenter__(self) -> SGLangClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, timeout: float | None = None, json: Any = None) -> Answer:
        seconds = timeout if timeout is not None else self.timeout
        try:
            response = await self._http.fetch(method, path, limit=_LIMITS.get(path, MAX_SMALL_BYTES),
                                              deadline_s=seconds, json=json)
        except AnswerTooSlow as exc:
            raise SGLangError(f"{method} {path}: no whole answer within {seconds:g} s", 200) from exc
        except RequestTimeout as exc:
            raise SGLangError(f"{method} {path}: no answer within {seconds:g} s") from exc
        except AnswerRefused as exc:
            raise SGLangError(str(exc), 200) from exc
        except TransportError as exc:
            raise ServerUnreachable(f"{method} {path}: {self.base_url} is unreachable ({type(exc).__name__})") from exc
        except HttpError as exc:
            raise SGLangError(str(exc)) from exc
        if response.status_code in (401, 403):
            raise AuthenticationFailed(
                f"{method} {path}: HTTP {response.status_code} (API key missing or wrong)", response.status_code
            )
        return response

    async def health(self, generate: bool = False, timeout: float | None = None) -> HealthStatus:
        """GET /health (or /health_generate): 200 ready, 503 starting, connection refused unreachable."""
        path = "/health_generate" if generate else "/health"
        started = time.perf_counter()
        seconds = timeout if timeout is not None else self.timeout
        try:
            response = await self._http.fetch("GET", path, limit=MAX_SMALL_BYTES, deadline_s=seconds)
        except RequestTimeout:
            return HealthStatus(False, None, f"no answer within {seconds:g} s", None)
        except TransportError:
            return HealthStatus(False, None, "unreachable", None)
        except HttpError as exc:
            return HealthStatus(False, None, str(exc), None)
        latency = time.perf_counter() - started
        code = response.status_code
        if code == 200:
            return HealthStatus(True, code, None, latency)
        if code == 503:
            return HealthStatus(False, code, "starting", latency)
        return HealthStatus(False, code, f"HTTP {code}", latency)

    async def alive(self, timeout: float | None = None) -> HealthStatus:
        """A liveness check that costs the server nothing: GET /model_info (or /get_model_info).

        On SGLang 0.4.10+ `/health` is `/health_generate`: every call injects a one-token generation, which
        shows in the server log as a `Prefill batch` line and in its request counters. Once a server is ready,
        poll this instead, and /health only now and then.
        """
        started = time.perf_counter()
        limit = timeout if timeout is not None else self.timeout
        try:
            async with asyncio.timeout(limit):
                await self.model_info()
        except TimeoutError:
            return HealthStatus(False, None, f"no answer within {limit:g} s", None)
        except ServerUnreachable:
            return HealthStatus(False, None, "unreachable", None)
        except SGLangError as exc:
            return HealthStatus(False, exc.status_code, str(exc), time.perf_counter() - started)
        return HealthStatus(True, 200, None, time.perf_counter() - started)

    async def _get_json_with_fallback(self, choice: _EndpointChoice) -> dict[str, Any]:
        for path in choice.order():
            response = await self._request("GET", path)
            if response.status_code == 404:
                continue
            if response.status_code != 200:
                raise SGLangError(f"GET {path}: HTTP {response.status_code}", response.status_code)
            choice.working = path
            try:
                data = response.json(f"GET {path}")
            except InputError as exc:
                raise SGLangError(f"{exc}", 200) from exc
            except ValueError as exc:  # UnicodeDecodeError included
                raise SGLangError(f"GET {path}: the answer is not JSON", 200) from exc
            if not isinstance(data, dict):
                raise SGLangError(f"GET {path}: the answer is a JSON {type(data).__name__}, not an object", 200)
            return data
        raise SGLangError(f"GET {' and '.join(choice.paths)}: HTTP 404", 404)

    async def server_info(self) -> dict[str, Any]:
        """GET /server_info, falling back to the deprecated /get_server_info on 404 (remembered)."""
        return await self._get_json_with_fallback(self._server_info_paths)

    async def model_info(self) -> dict[str, Any]:
        """GET /model_info, falling back to the deprecated /get_model_info on 404 (remembered)."""
        return await self._get_json_with_fallback(self._model_info_paths)

    async def spec_settings(self) -> SpecSettings:
        """The server's effective speculative settings (from server_info)."""
        return spec_settings(await self.server_info())

    async def flush_cache(self, retries: int = 5, delay: float = 0.5) -> bool:
        """POST /flush_cache; 400 means requests are running, so retry; False when it never flushed."""
        for attempt in range(retries + 1):
            response = await self._request("POST", "/flush_cache")
            if response.status_code == 200:
                return True
            if response.status_code != 400:
                raise SGLangError(f"POST /flush_cache: HTTP {response.status_code}", response.status_code)
            if attempt < retries:
                await asyncio.sleep(delay)
        return False

    async def metrics_text(self) -> str | None:
        """The raw /metrics text, or None when the server runs without --enable-metrics (404)."""
        response = await self._request("GET", "/metrics")
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise SGLangError(f"GET /metrics: HTTP {response.status_code}", response.status_code)
        return response.text

    async def metrics(self) -> MetricsSnapshot | None:
        """Parsed /metrics (counters summed over labels), or None when metrics are not enabled."""
        text = await self.metrics_text()
        if text is None:
            return None
        try:
            return parse_metrics(text)
        except ValueError as exc:
            raise SGLangError(f"GET /metrics: not Prometheus text ({exc})", 200) from exc

    async def generate(
        self,
        text: str,
        max_new_tokens: int,
        temperature: float = 0.0,
        stream: bool = False,
        ignore_eos: bool = False,
        timeout: float | None = None,
    ) -> GenerateResult:
        """One POST /generate (JSON body); with `stream` the SSE chunks are read to [DONE] and TTFT measured.
        The whole answer comes within `timeout` (the client's by default)."""
        body = generate_payload(text, max_new_tokens, temperature, ignore_eos, stream)
        started = time.perf_counter()
        if not stream:
            response = await self._request("POST", "/generate", timeout=timeout, json=body)
            _raise_for_generate(response)
            try:
                data = response.json("POST /generate")
            except InputError as exc:
                raise SGLangError(f"{exc}", 200) from exc
            except ValueError as exc:  # UnicodeDecodeError included
                raise SGLangError("POST /generate: the answer is not JSON", 200) from exc
            return checked_generate_result(data, time.perf_counter() - started)
        return await self._generate_stream(body, started)

    async def _generate_stream(self, body: dict[str, Any], started: float) -> GenerateResult:
        last: dict[str, Any] | None = None
        ttft = None
        chunks = 0
        try:
            async with asyncio.timeout(self.timeout), self._http.stream("POST", "/generate", json=body) as response:
                if response.status_code in (401, 403):
                    raise AuthenticationFailed(
                        f"POST /generate: HTTP {response.status_code} (API key missing or wrong)",
                        response.status_code,
                    )
                pieces = response.decoded_pieces(MAX_GENERATE_BYTES)
                if response.status_code != 200:
                    error = b"".join([piece async for piece in pieces])
                    _raise_for_generate(Answer(response.status_code, response.headers, error))
                async for line in _lines(pieces):
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        break
                    try:
                        chunk = parse_json(payload, where="POST /generate", finite=True)
                    except ValueError as exc:
                        raise SGLangError("POST /generate: a streamed chunk is not JSON", 200) from exc
                    if isinstance(chunk, dict) and "error" in chunk:
                        raise SGLangError(f"POST /generate: {_error_message(chunk)}")
                    if ttft is None:
                        ttft = time.perf_counter() - started
                    chunks += 1
                    last = chunk
        except TimeoutError as exc:
            raise SGLangError(f"POST /generate: no whole answer within {self.timeout:g} s") from exc
        except RequestTimeout as exc:
            raise SGLangError(f"POST /generate: no answer within {self.timeout:g} s") from exc
        except AnswerRefused as exc:
            raise SGLangError(str(exc), 200) from exc
        except TransportError as exc:
            raise ServerUnreachable(f"POST /generate: {self.base_url} is unreachable ({type(exc).__name__})") from exc
        except HttpError as exc:
            raise SGLangError(str(exc)) from exc
        if last is None:
            raise SGLangError("POST /generate: the stream ended without a chunk")
        result = checked_generate_result(last, time.perf_counter() - started)
        return GenerateResult(result.text, result.meta_info, result.elapsed_s, ttft, chunks)


def checked_generate_result(data: Any, elapsed_s: float) -> GenerateResult:
    """A GenerateResult from a /generate answer whose shape and figures were checked (else SGLangError)."""
    if isinstance(data, list):
        if not data:
            raise SGLangError("POST /generate: the answer is an empty list", 200)
        data = data[0]
    if not isinstance(data, dict):
        raise SGLangError(f"POST /generate: the answer is a JSON {type(data).__name__}, not an object", 200)
    meta = data.get("meta_info")
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise SGLangError(f"POST /generate: meta_info is a {type(meta).__name__}, not an object", 200)
    text = data.get("text", "")
    if not isinstance(text, str):
        raise SGLangError(f"POST /generate: text is a {type(text).__name__}, not a string", 200)
    for key in ("completion_tokens", "spec_verify_ct", "prompt_tokens"):
        value = meta.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise SGLangError(f"POST /generate: meta_info.{key} is {value!r}, not a count", 200)
    verify, tokens = meta.get("spec_verify_ct"), meta.get("completion_tokens") or 0
    if verify and verify > tokens:
        raise SGLangError(
            f"POST /generate: spec_verify_ct {verify} is more than completion_tokens {tokens} (impossible)", 200
        )
    latency = meta.get("e2e_latency")
    if latency is not None and (
        isinstance(latency, bool) or not isinstance(latency, int | float) or not 0 <= latency < float("inf")
    ):
        raise SGLangError(f"POST /generate: meta_info.e2e_latency is {latency!r}, not seconds", 200)
    return GenerateResult(text, meta, elapsed_s)


def _error_message(data: Any) -> str:
    if isinstance(data, dict):
        error = data.get("error", data.get("detail", data))
        if isinstance(error, dict):
            return str(error.get("message", error))
        return str(error)
    return str(data)


async def _lines(pieces: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The text lines of a decoded body (bounded by its decoder's limit)."""
    pending = b""
    async for piece in pieces:
        pending += piece
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line.decode("utf-8", "replace").rstrip("\r")
    if pending:
        yield pending.decode("utf-8", "replace")


def _raise_for_generate(response: Answer) -> None:
    if response.status_code == 200:
        return
    try:
        detail = _error_message(response.json("POST /generate"))
    except ValueError:
        detail = response.text[:200]
    raise SGLangError(f"POST /generate: HTTP {response.status_code}: {detail}", response.status_code)
