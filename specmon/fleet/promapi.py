"""A read-only client of Prometheus' HTTP API (specmon.http): instant and range queries and the scrape configuration.

Only GETs. Secrets come from files (a bearer token, `user:password` for basic auth), never from the command
line, and are never printed. Every answer goes through specmon's bounds (`HttpClient.fetch`: at most
MAX_ANSWER_BYTES once decoded, whole within its deadline, strict JSON); a malformed one is a PromError, never a
traceback. Values are returned as Prometheus gives them (NaN and ±Inf included): the fleet's
columns check them (`promql.Column.check`).
"""

from __future__ import annotations

import math
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from specmon.http.client import HttpClient
from specmon.http.decode import DECODED
from specmon.http.errors import AnswerRefused, AnswerTooLarge, HttpError, RequestTimeout, TransportError
from specmon.http.headers import HeaderRefused, auth_headers

MAX_ANSWER_BYTES = 32 * 1024 * 1024
"""An answer longer than this is refused: bounded memory whatever a proxy in front of Prometheus sends."""
MAX_SECRET_BYTES = 16 * 1024
MAX_LABELS = 64
MAX_LABEL_CHARS = 1024
USER_AGENT = "specmon-fleet"


class PromError(Exception):
    """Prometheus could not be asked: `kind` is "unreachable", "unauthorized", "bad_answer" or "query"."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class PromAuth:
    """How to authenticate: files holding a bearer token or `user:password`, and a CA bundle for TLS."""

    bearer_token_file: str | None = None
    basic_auth_file: str | None = None
    ca_file: str | None = None

    def headers_and_auth(self) -> tuple[dict[str, str], tuple[str, str] | None]:
        """The Authorization header or basic auth, read from the files now (raises PromError on a bad file)."""
        if self.bearer_token_file and self.basic_auth_file:
            raise PromError("bad_answer", "give a bearer-token file or a basic-auth file, not both")
        if self.bearer_token_file:
            token = _read_secret(self.bearer_token_file, "bearer-token file").strip()
            if not token:
                raise PromError("unauthorized", f"the bearer-token file {self.bearer_token_file} holds no token")
            try:
                return auth_headers(token, f"the bearer-token file {self.bearer_token_file}"), None
            except HeaderRefused as exc:
                raise PromError("unauthorized", str(exc)) from None
        if self.basic_auth_file:
            line = _read_secret(self.basic_auth_file, "basic-auth file").splitlines()
            user, sep, password = (line[0] if line else "").partition(":")
            if not sep or not user:
                raise PromError("unauthorized", f"the basic-auth file {self.basic_auth_file} is not `user:password`")
            return {}, (user, password)
        return {}, None

    def verify(self) -> ssl.SSLContext | bool:
        if not self.ca_file:
            return True
        try:
            return ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise PromError("unreachable", f"the CA file {self.ca_file} could not be read: {exc}") from None


def _read_secret(path: str, what: str) -> str:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_SECRET_BYTES + 1)
    except OSError as exc:
        raise PromError("unauthorized", f"the {what} {path} could not be read: {exc.strerror}") from None
    if len(data) > MAX_SECRET_BYTES:
        raise PromError("unauthorized", f"the {what} {path} is larger than {MAX_SECRET_BYTES} bytes")
    return data.decode("utf-8", "replace")


class Sample(NamedTuple):
    """One series of an instant vector: its labels and value (NaN and ±Inf as Prometheus gave them)."""

    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class RangeSeries:
    """One series of a range query: its labels and (time, value) points."""

    labels: dict[str, str]
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class ScrapeConfig:
    """The scrape intervals Prometheus runs with: the global one and each job's."""

    global_s: float
    by_job: dict[str, float] = field(default_factory=dict)

    def interval_for(self, jobs: set[str] | frozenset[str] = frozenset()) -> float:
        """The longest interval among `jobs` (all jobs when none is known)."""
        chosen = [self.by_job[j] for j in jobs if j in self.by_job] or list(self.by_job.values())
        return max(chosen, default=self.global_s)


class PromClient:
    """Asks one Prometheus (async; use as `async with`). Raises PromError on any failure."""

    def __init__(self, url: str, auth: PromAuth | None = None, timeout_s: float = 5.0,
                 max_bytes: int = MAX_ANSWER_BYTES) -> None:
        self.url = url.rstrip("/")
        self.auth = auth or PromAuth()
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._http: HttpClient | None = None

    async def __aenter__(self) -> PromClient:
        from specmon.http.urls import is_loopback

        headers, basic = self.auth.headers_and_auth()
        # On loopback there is no network to spare: compressing the answers would only cost Prometheus CPU.
        self._http = HttpClient(
            self.url, headers=headers, basic_auth=basic, ssl_context=self.auth.verify(),
            connect_timeout_s=self.timeout_s, accept_encoding="identity" if is_loopback(self.url) else DECODED,
            user_agent=USER_AGENT,
        )
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def query(self, expr: str, at: float | None = None) -> list[Sample]:
        """An instant query; its result must be a vector (or a scalar, given as one unlabelled sample)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = await self._api("/api/v1/query", params)
        kind, result = data.get("resultType"), data.get("result")
        if kind == "scalar":
            return [Sample({}, _value(result))]
        if kind != "vector" or not isinstance(result, list):
            raise PromError("bad_answer", f"query answered {kind!r}, not a vector")
        return [Sample(_labels(item), _value(item.get("value"))) for item in result if isinstance(item, dict)]

    async def query_range(self, expr: str, start: float, end: float, step: float) -> list[RangeSeries]:
        data = await self._api("/api/v1/query_range",
                               {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
        result = data.get("result")
        if data.get("resultType") != "matrix" or not isinstance(result, list):
            raise PromError("bad_answer", "range query did not answer a matrix")
        series = []
        for item in result:
            values = item.get("values") if isinstance(item, dict) else None
            if not isinstance(values, list):
                continue
            points = tuple((_time(v), _value(v)) for v in values)
            series.append(RangeSeries(_labels(item), points))
        return series

    async def scrape_config(self) -> ScrapeConfig:
        """The scrape intervals from `/api/v1/status/config` (the YAML Prometheus runs with)."""
        data = await self._api("/api/v1/status/config", {})
        text = data.get("yaml")
        if not isinstance(text, str):
            raise PromError("bad_answer", "status/config answered no yaml")
        try:
            config = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise PromError("bad_answer", f"status/config's yaml is unreadable: {str(exc)[:120]}") from None
        config = config if isinstance(config, dict) else {}
        global_section = config.get("global") if isinstance(config.get("global"), dict) else {}
        global_s = parse_duration(global_section.get("scrape_interval")) or 60.0
        by_job: dict[str, float] = {}
        for job in config.get("scrape_configs") or []:
            if isinstance(job, dict) and isinstance(job.get("job_name"), str):
                by_job[job["job_name"]] = parse_duration(job.get("scrape_interval")) or global_s
        return ScrapeConfig(global_s, by_job)

    async def recording_rules(self) -> dict[str, str]:
        """The recording rules Prometheus evaluates: record name → its expression (as Prometheus prints it)."""
        data = await self._api("/api/v1/rules", {"type": "record"})
        rules: dict[str, str] = {}
        for group in data.get("groups") or []:
            for rule in (group.get("rules") or []) if isinstance(group, dict) else []:
                if isinstance(rule, dict) and isinstance(rule.get("name"), str) and isinstance(rule.get("query"), str):
                    rules[rule["name"]] = rule["query"]
        return rules

    async def _api(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        if self._http is None:
            raise RuntimeError("PromClient used outside `async with`")
        try:
            got = await self._http.fetch("GET", path, params=params, limit=self.max_bytes, deadline_s=self.timeout_s * 2)
        except (TransportError, RequestTimeout) as exc:
            raise PromError("unreachable", f"Prometheus at {self.url} did not answer ({type(exc).__name__})") from None
        except AnswerTooLarge:
            raise PromError("bad_answer", f"Prometheus' answer to {path} is over {self.max_bytes} bytes") from None
        except AnswerRefused as exc:
            raise PromError("bad_answer", f"Prometheus' answer to {path}: {exc.reason}") from None
        except HttpError as exc:
            raise PromError("bad_answer", f"Prometheus at {self.url}: {type(exc).__name__}") from None
        status = got.status_code
        if status in (401, 403):
            raise PromError("unauthorized", f"Prometheus at {self.url} answered HTTP {status} (check the credentials)")
        try:
            answer = got.json(f"Prometheus' answer to {path}")
        except ValueError:
            answer = None
        if not isinstance(answer, dict) or answer.get("status") not in ("success", "error"):
            raise PromError("bad_answer", f"Prometheus at {self.url} answered HTTP {status} with no API answer "
                            f"(is it Prometheus?)")
        if answer["status"] == "error":
            message = str(answer.get("error", "error"))[:300]
            kind = "query" if answer.get("errorType") in ("bad_data", "execution", "timeout") else "bad_answer"
            raise PromError(kind, f"Prometheus refused {path}: {message}")
        data = answer.get("data")
        if not isinstance(data, dict):
            raise PromError("bad_answer", f"Prometheus at {self.url} answered no data object")
        return data


def _labels(item: Any) -> dict[str, str]:
    metric = item.get("metric") if isinstance(item, dict) else None
    if not isinstance(metric, dict):
        return {}
    if len(metric) <= MAX_LABELS:
        for key, value in metric.items():
            if type(value) is not str or len(value) > MAX_LABEL_CHARS or len(key) > MAX_LABEL_CHARS:
                break
        else:
            return metric  # the usual answer, already as it should be (JSON object keys are always strings)
    labels = {}
    for key, value in list(metric.items())[:MAX_LABELS]:
        if isinstance(value, str):
            labels[key[:MAX_LABEL_CHARS]] = value[:MAX_LABEL_CHARS]
    return labels


def _value(pair: Any) -> float:
    """`[time, "value"]` → float (NaN for anything unreadable)."""
    if type(pair) is not list or len(pair) != 2 or type(pair[1]) is not str:
        return math.nan
    try:
        return float(pair[1])
    except ValueError:
        return math.nan


def _time(pair: Any) -> float:
    if isinstance(pair, list) and pair and isinstance(pair[0], int | float):
        return float(pair[0])
    return math.nan


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}


def parse_duration(text: Any) -> float | None:
    """A Prometheus duration (`15s`, `1m30s`, `500ms`) in seconds; None when unreadable."""
    if not isinstance(text, str) or not text:
        return None
    total, number = 0.0, ""
    i = 0
    while i < len(text):
        c = text[i]
        if c.isdigit():
            number += c
            i += 1
            continue
        unit = "ms" if text.startswith("ms", i) else c
        if not number or unit not in _UNITS:
            return None
        total += int(number) * _UNITS[unit]
        number = ""
        i += len(unit)
    return total if not number and total > 0 else None


def format_duration(seconds: float) -> str:
    """Seconds as a PromQL duration (`1m`, `90s`, `1m30s`... whole seconds, at least 1s)."""
    whole = max(1, int(round(seconds)))
    if whole % 3600 == 0:
        return f"{whole // 3600}h"
    if whole % 60 == 0:
        return f"{whole // 60}m"
    return f"{whole}s"


def host_of(address: str) -> str:
    """`host:port` (or a URL) → host; IPv6 brackets kept off."""
    text = address.split("://", 1)[-1].split("/", 1)[0]
    if text.startswith("["):
        return text[1:text.find("]")] if "]" in text else text
    return text.rsplit(":", 1)[0] if text.count(":") == 1 else text


def ensure_file(path: str | None) -> None:
    """A given secret or CA path must be a readable regular file (checked before anything is asked)."""
    if path and not Path(path).is_file():
        raise PromError("unauthorized", f"{path} is not a readable file")
