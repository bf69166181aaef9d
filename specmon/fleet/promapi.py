"""A read-only client of Prometheus' HTTP API (specmon.http): instant and range queries, the scrape configuration.

Only GETs. Secrets come from files (a bearer token, `user:password` for basic auth), never from the command
line, and are never printed: every PromError's text is redacted (`redact.redacted_text`), whatever Prometheus
or a proxy in front of it echoes. Every answer goes through specmon's bounds (`HttpClient.fetch`: at most
MAX_ANSWER_BYTES once decoded, whole within its deadline; nested at most inputs.MAX_DEPTH); a malformed one is a
PromError, never a traceback. Values are returned as Prometheus gives them (NaN and ±Inf included, a JSON number
read as the string Prometheus sends): the fleet's columns check them (`promql.Column.check`). What an answer says beside its data (Prometheus' `warnings` and `infos`) and the series
left out of it (labels over the bounds, a series answered twice) are kept in `PromClient.notes`, said by the
caller: never dropped without a word.

A query's answer in Prometheus' own form is decoded straight into typed records (msgspec: its shape bounds its
nesting; a 10,000-server answer in a fifth of the time); any other answer (an error, a value of another type, a
label that is not text, a lone surrogate, nesting) is read the general way, with the same checks and notes.
"""

from __future__ import annotations

import contextlib
import gc
import math
import ssl
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, NamedTuple

import msgspec
import yaml

from specmon.http.client import HttpClient
from specmon.http.decode import DECODED
from specmon.http.errors import AnswerRefused, AnswerTooLarge, HttpError, RequestTimeout, TransportError
from specmon.http.headers import HeaderRefused, auth_headers
from specmon.inputs import MIB, InputError, parse_json, read_secret, read_text
from specmon.redact import redacted_text, remember_secret
from specmon.text import printable, quoted

MAX_ANSWER_BYTES = 32 * 1024 * 1024
"""An answer longer than this is refused: bounded memory whatever a proxy in front of Prometheus sends."""
MAX_SECRET_BYTES = 16 * 1024
MAX_CA_BYTES = 16 * MIB
"""A CA bundle larger than this is refused (Debian's whole ca-certificates bundle is 220 KB)."""
MAX_LABELS = 64
MAX_LABEL_CHARS = 1024
"""A series with more labels, or a label longer, is left out of its answer (and said): never cut short, which
would merge two servers whose names differ only past the cut."""
MAX_CONFIG_BYTES = 4 * 1024 * 1024
"""A status/config YAML longer than this is not parsed (a real one is a few KiB; PyYAML takes seconds per MiB)."""
MAX_SCRAPE_S = 3600.0
"""A scrape interval over an hour cannot be a live fleet's (its rate window would be hours): not used, said."""
MAX_WARNINGS = 3
"""Prometheus' warnings and infos said per answer (the rest counted)."""
USER_AGENT = "specmon-fleet"


class PromError(Exception):
    """Prometheus could not be asked: `kind` is "unreachable", "unauthorized", "bad_answer" or "query". The
    message is printable (outside text in it escaped)."""

    def __init__(self, kind: str, message: str) -> None:
        message = printable(redacted_text(message))
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class PromAuth:
    """How to authenticate: files holding a bearer token or `user:password`, and a CA bundle for TLS."""

    bearer_token_file: str | None = None
    basic_auth_file: str | None = None
    ca_file: str | None = None

    def check(self, warn: Callable[[str], None] | None = None) -> None:
        """Read every file now, before anything is asked (PromError on a bad one); a secret file others may
        read is told to `warn`."""
        self.headers_and_auth(warn)
        self.verify()

    def headers_and_auth(self, warn: Callable[[str], None] | None = None
                         ) -> tuple[dict[str, str], tuple[str, str] | None]:
        """The Authorization header or basic auth, read from the files now (raises PromError on a bad file)."""
        if self.bearer_token_file and self.basic_auth_file:
            raise PromError("bad_answer", "give a bearer-token file or a basic-auth file, not both")
        if self.bearer_token_file:
            token = _read_secret(self.bearer_token_file, "bearer-token file", warn).strip()
            if not token:
                raise PromError("unauthorized", f"the bearer-token file {self.bearer_token_file} holds no token")
            remember_secret(token)
            try:
                return auth_headers(token, f"the bearer-token file {self.bearer_token_file}"), None
            except HeaderRefused as exc:
                raise PromError("unauthorized", str(exc)) from None
        if self.basic_auth_file:
            line = _read_secret(self.basic_auth_file, "basic-auth file", warn).splitlines()
            user, sep, password = (line[0] if line else "").partition(":")
            if not sep or not user:
                raise PromError("unauthorized", f"the basic-auth file {self.basic_auth_file} is not `user:password`")
            remember_secret(password, user=user)
            return {}, (user, password)
        return {}, None

    def verify(self) -> ssl.SSLContext | bool:
        if not self.ca_file:
            return True
        try:
            bundle = read_text(self.ca_file, MAX_CA_BYTES, what="CA file")
            return ssl.create_default_context(cadata=bundle)
        except (OSError, ssl.SSLError, ValueError) as exc:  # InputError (a FIFO, too big) and UnicodeDecodeError
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise PromError("unreachable", f"the CA file {self.ca_file} could not be read: {reason}") from None


def _read_secret(path: str, what: str, warn: Callable[[str], None] | None) -> str:
    try:
        return read_secret(path, MAX_SECRET_BYTES, what=what, warn=warn)
    except InputError as exc:  # a FIFO, a device, a directory, too large: refused before anything is read
        raise PromError("unauthorized", str(exc)) from None
    except UnicodeDecodeError:
        raise PromError("unauthorized", f"the {what} {path} is not UTF-8 text") from None
    except OSError as exc:
        raise PromError("unauthorized", f"the {what} {path} could not be read: {exc.strerror}") from None


class Sample(NamedTuple):
    """One series of an instant vector: its labels and value (NaN and ±Inf as Prometheus gave them)."""

    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class RangeSeries:
    """One series of a range query: its labels and (time, value) points."""

    labels: dict[str, str]
    points: tuple[tuple[float, float], ...]


_Label = Annotated[str, msgspec.Meta(max_length=MAX_LABEL_CHARS)]
_Labels = Annotated[dict[_Label, _Label], msgspec.Meta(max_length=MAX_LABELS)]
"""A series' labels within the bounds (`_labels`' checks, made by the decoder: msgspec refuses a lone surrogate)."""


class _InstantSeries(msgspec.Struct):
    metric: _Labels = {}
    value: tuple[float, str | float] | None = None


class _RangeSeries(msgspec.Struct):
    metric: _Labels = {}
    values: list[tuple[float, str | float]] = []


class _Vector(msgspec.Struct):
    resultType: str  # noqa: N815 - Prometheus' name
    result: list[_InstantSeries]


class _Matrix(msgspec.Struct):
    resultType: str  # noqa: N815 - Prometheus' name
    result: list[_RangeSeries]


class _VectorAnswer(msgspec.Struct):
    status: str
    data: _Vector
    warnings: list[str] = []
    infos: list[str] = []


class _MatrixAnswer(msgspec.Struct):
    status: str
    data: _Matrix
    warnings: list[str] = []
    infos: list[str] = []


_DECODERS: dict[type, msgspec.json.Decoder[Any]] = {
    kind: msgspec.json.Decoder(kind) for kind in (_VectorAnswer, _MatrixAnswer)}


@dataclass(frozen=True)
class ScrapeConfig:
    """The scrape intervals Prometheus runs with: the global one and each job's. `notes`: intervals that could
    not be used, and why."""

    global_s: float
    by_job: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

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
        self.answer_s = 2 * timeout_s
        """How long one answer may take, whole (`FleetReader.configure` raises it with the fleet's size)."""
        self.notes: list[str] = []
        """What the answers said beside their data (`take_notes`)."""
        self.left_out: dict[str, int] = {}
        """Series left out of the answers since the last `take_notes`, by why."""
        self._http: HttpClient | None = None

    async def __aenter__(self) -> PromClient:
        from specmon.urls import is_loopback

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

    def take_notes(self) -> list[str]:
        """What was said since the last call: each note once, in order, then the series left out, by why."""
        notes = list(dict.fromkeys(self.notes)) + [f"{count} series left out of Prometheus' answers: {why}"
                                                   for why, count in self.left_out.items()]
        self.notes, self.left_out = [], {}
        return notes

    async def query(self, expr: str, at: float | None = None) -> list[Sample]:
        """An instant query (at Prometheus' own time unless `at` is given); its result must be a vector (or a
        scalar, given as one unlabelled sample)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        path = "/api/v1/query"
        status, body = await self._fetch(path, params)
        with gc_paused():
            typed = _typed(status, body, _VectorAnswer)
            if isinstance(typed, _VectorAnswer) and typed.data.resultType == "vector":
                del body  # an answer of 10,000 servers holds ~10⁵ series: each copy let go as soon as it is read
                self.notes += _said_beside(path, typed.warnings, typed.infos)
                samples = [Sample(item.metric, math.nan if item.value is None else _number(item.value[1]))
                           for item in typed.data.result]
                del typed
                kept = self._kept(samples, checked=True)
                return samples if kept is samples else [Sample(labels, value) for labels, value in kept]
        data = self._data(path, status, body)
        kind, result = data.get("resultType"), data.get("result")
        if kind == "scalar":
            return [Sample({}, _value(result))]
        if kind != "vector" or not isinstance(result, list):
            raise PromError("bad_answer", f"query answered {quoted(kind)}, not a vector")
        return [Sample(labels, value) for labels, value in
                self._kept([(item.get("metric"), _value(item.get("value"))) for item in result
                            if isinstance(item, dict)])]

    async def query_range(self, expr: str, start: float, end: float, step: float) -> list[RangeSeries]:
        path = "/api/v1/query_range"
        status, body = await self._fetch(
            path, {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"})
        with gc_paused():
            typed = _typed(status, body, _MatrixAnswer)
            if isinstance(typed, _MatrixAnswer) and typed.data.resultType == "matrix":
                del body
                self.notes += _said_beside(path, typed.warnings, typed.infos)
                return [RangeSeries(labels, points) for labels, points in self._kept(
                    [(item.metric, tuple((t, _number(v)) for t, v in item.values)) for item in typed.data.result],
                    checked=True)]
        data = self._data(path, status, body)
        result = data.get("result")
        if data.get("resultType") != "matrix" or not isinstance(result, list):
            raise PromError("bad_answer", "range query did not answer a matrix")
        items = []
        for item in result:
            values = item.get("values") if isinstance(item, dict) else None
            if isinstance(values, list):
                items.append((item.get("metric"), tuple((_time(v), _value(v)) for v in values)))
        return [RangeSeries(labels, points) for labels, points in self._kept(items)]

    def _kept(self, items: Sequence[tuple[Any, Any]], checked: bool = False) -> Sequence[tuple[dict[str, str], Any]]:
        """The series of an answer whose labels are within the bounds (`checked`: by the typed decoder), each
        once: a series answered twice is kept once when both say the same, else neither is used (said in
        `notes`). `items` themselves when checked and no two series' labels hash alike (then no two are the same;
        two that do are told apart the exact way)."""
        if checked and len({hash(tuple(labels.items())) for labels, _ in items}) == len(items):
            return items
        kept: dict[tuple, tuple[dict[str, str], Any]] = {}
        conflicting: set[tuple] = set()
        for metric, value in items:
            labels = metric if checked else _labels(metric)
            if isinstance(labels, str):
                self._leave_out(labels)
                continue
            key = tuple(labels.items())  # Prometheus writes each series' labels in one order (sorted)
            if key not in kept:
                kept[key] = (labels, value)
            elif _same(kept[key][1], value):
                self._leave_out("answered twice with the same labels and values (counted once)")
            else:
                conflicting.add(key)
        if conflicting:
            self._leave_out("answered twice with the same labels, different values (neither used)", len(conflicting))
        return [pair for key, pair in kept.items() if key not in conflicting]

    def _leave_out(self, why: str, count: int = 1) -> None:
        self.left_out[why] = self.left_out.get(why, 0) + count

    async def scrape_config(self) -> ScrapeConfig:
        """The scrape intervals from `/api/v1/status/config` (the YAML Prometheus runs with)."""
        data = await self._api("/api/v1/status/config", {})
        return read_scrape_config(data.get("yaml"))

    async def recording_rules(self) -> dict[str, RecordingRule]:
        """The recording rules Prometheus evaluates, by record name: expression (as Prometheus prints it),
        health ("ok", "err", "unknown": not evaluated yet; "" when not said) and last error."""
        data = await self._api("/api/v1/rules", {"type": "record"})
        rules: dict[str, RecordingRule] = {}
        groups = data.get("groups")
        for group in groups if isinstance(groups, list) else []:
            group_rules = group.get("rules") if isinstance(group, dict) else None
            for rule in group_rules if isinstance(group_rules, list) else []:
                if isinstance(rule, dict) and isinstance(rule.get("name"), str) and isinstance(rule.get("query"), str):
                    health, error = rule.get("health"), rule.get("lastError")
                    rules[rule["name"]] = RecordingRule(rule["query"], health if isinstance(health, str) else "",
                                                        error if isinstance(error, str) else "")
        return rules

    async def _api(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        return self._data(path, *await self._fetch(path, params))

    async def _fetch(self, path: str, params: dict[str, str]) -> tuple[int, bytes]:
        """The answer's HTTP status and body, within specmon's bounds (PromError otherwise)."""
        if self._http is None:
            raise RuntimeError("PromClient used outside `async with`")
        try:
            got = await self._http.fetch("GET", path, params=params, limit=self.max_bytes, deadline_s=self.answer_s)
        except (TransportError, RequestTimeout) as exc:
            raise PromError("unreachable", f"Prometheus at {self.url} did not answer ({type(exc).__name__})") from None
        except AnswerTooLarge:
            raise PromError("bad_answer", f"Prometheus' answer to {path} is over {self.max_bytes} bytes") from None
        except AnswerRefused as exc:
            raise PromError("bad_answer", f"Prometheus' answer to {path}: {exc.reason}") from None
        except HttpError as exc:
            raise PromError("bad_answer", f"Prometheus at {self.url}: {type(exc).__name__}") from None
        return got.status_code, got.content

    def _data(self, path: str, status: int, body: bytes) -> dict[str, Any]:
        data, notes = api_data(self.url, path, status, body)
        self.notes += notes
        return data


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic collector paused over a stretch that makes many objects and no cycle (an answer of
    10,000 servers read, the rows made of it): each of its full passes walked every object made, a fifth of the
    CPU. No await inside: another thread runs with it paused only that long."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _typed(status: int, body: bytes, kind: type[_VectorAnswer] | type[_MatrixAnswer]
           ) -> _VectorAnswer | _MatrixAnswer | None:
    """A successful answer in Prometheus' own form, decoded as `kind`; None for anything else (read the general
    way, which says what is wrong with it)."""
    if status != 200:
        return None
    try:
        answer: _VectorAnswer | _MatrixAnswer = _DECODERS[kind].decode(body)
    except (msgspec.DecodeError, RecursionError):  # a ValidationError is a DecodeError
        return None
    return answer if answer.status == "success" else None


@dataclass(frozen=True)
class RecordingRule:
    """A recording rule as Prometheus' /api/v1/rules gives it."""

    query: str
    health: str = "ok"
    last_error: str = ""


def api_data(url: str, path: str, status: int, body: bytes) -> tuple[dict[str, Any], list[str]]:
    """An API answer's `data` object and what it said beside it (its `warnings` and `infos`, printable and
    bounded); PromError for a refusal, an error answer or something that is not Prometheus' API."""
    if status in (401, 403):
        raise PromError("unauthorized", f"Prometheus at {url} answered HTTP {status} (check the credentials)")
    try:
        answer = parse_json(body, where=f"Prometheus' answer to {path}")
    except InputError as exc:
        raise PromError("bad_answer", str(exc)) from None
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or answer.get("status") not in ("success", "error"):
        raise PromError("bad_answer", f"Prometheus at {url} answered HTTP {status} with no API answer "
                        f"(is it Prometheus?)")
    if answer["status"] == "error":
        error = answer.get("error", "error")
        message = error if isinstance(error, str) else repr(error)
        kind = "query" if answer.get("errorType") in ("bad_data", "execution", "timeout") else "bad_answer"
        raise PromError(kind, f"Prometheus refused {path}: {message[:300]}")
    data = answer.get("data")
    if not isinstance(data, dict):
        raise PromError("bad_answer", f"Prometheus at {url} answered no data object")
    return data, _said_beside(path, answer.get("warnings"), answer.get("infos"))


def _said_beside(path: str, warnings: Any, infos: Any) -> list[str]:
    """An answer's `warnings` and `infos` as notes, printable and bounded."""
    notes = []
    for items, said in ((warnings, "warns"), (infos, "notes")):
        if not isinstance(items, list) or not items:
            continue
        texts = [quoted(item, 200) if isinstance(item, str) else quoted(repr(item)[:200]) for item in items]
        more = f" (and {len(texts) - MAX_WARNINGS} more)" if len(texts) > MAX_WARNINGS else ""
        notes.append(f"Prometheus {said} about {path}: {'; '.join(texts[:MAX_WARNINGS])}{more}")
    return notes


def _labels(metric: Any) -> dict[str, str] | str:
    """A series' labels (its `metric`), or why it is left out (more than MAX_LABELS labels, one over
    MAX_LABEL_CHARS, one that is not text or not valid Unicode)."""
    if not isinstance(metric, dict):
        return {}
    if len(metric) > MAX_LABELS:
        return f"more than {MAX_LABELS} labels"
    for key, value in metric.items():
        if type(value) is not str:
            return "a label value that is not text"
        if len(value) > MAX_LABEL_CHARS or len(key) > MAX_LABEL_CHARS:
            return f"a label over {MAX_LABEL_CHARS} characters"
        if not (value.isascii() and key.isascii()) and not _unicode(key + value):
            return "a label that is not valid Unicode"
    return metric


def _unicode(text: str) -> bool:
    """Whether `text` is valid Unicode (JSON's `\\ud800` escapes decode to lone surrogates, which no terminal,
    URL or PromQL string can hold)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _same(first: Any, second: Any) -> bool:
    """Whether two values (or two tuples of points) of a series answered twice are the same (NaN is NaN)."""
    if isinstance(first, tuple) and isinstance(second, tuple):
        return len(first) == len(second) and all(_same(a, b) for a, b in zip(first, second, strict=True))
    return first == second or (first != first and second != second)


def _value(pair: Any) -> float:
    """`[time, "value"]` → float (`_number`); NaN for anything that is not such a pair."""
    if type(pair) is not list or len(pair) != 2:
        return math.nan
    return _number(pair[1])


def _number(value: Any) -> float:
    """A sample's value → float (a JSON number, as a compatible backend may send it, too; NaN for anything
    unreadable, ±Inf for a number too large). Python's float() also takes `1_000` and spaces, which Prometheus
    never writes: refused."""
    if type(value) is str:
        if len(value) > 64 or "_" in value or value[:1].isspace() or value[-1:].isspace():
            return math.nan
        try:
            return float(value)
        except ValueError:
            return math.nan
    if type(value) in (int, float):
        try:
            return float(value)
        except OverflowError:  # an integer past a float's range
            return math.inf if value > 0 else -math.inf
    return math.nan


def _time(pair: Any) -> float:
    if isinstance(pair, list) and pair and type(pair[0]) in (int, float):
        try:
            return float(pair[0])
        except OverflowError:
            return math.nan
    return math.nan


def read_scrape_config(text: Any) -> ScrapeConfig:
    """The scrape intervals of status/config's YAML: the global one (60 s, Prometheus' default, when it says
    none) and each job's. An interval that cannot be used (over MAX_SCRAPE_S, unreadable) is left out and said
    in `notes`; PromError when the YAML cannot be read at all."""
    if not isinstance(text, str):
        raise PromError("bad_answer", "status/config answered no yaml")
    if len(text) > MAX_CONFIG_BYTES:
        raise PromError("bad_answer", f"status/config's yaml is over {MAX_CONFIG_BYTES} bytes")
    try:
        config = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise PromError("bad_answer", f"status/config's yaml is unreadable: {str(exc)[:120]}") from None
    except RecursionError:
        raise PromError("bad_answer", "status/config's yaml is nested too deeply") from None
    config = config if isinstance(config, dict) else {}
    notes: list[str] = []

    def interval(where: str, value: Any) -> float | None:
        seconds = parse_duration(value)
        if seconds is not None and seconds > MAX_SCRAPE_S:
            notes.append(f"{where}'s scrape interval {quoted(value)} cannot be a live fleet's (over "
                         f"{MAX_SCRAPE_S:g} s): not used")
            return None
        if seconds is None and value is not None:
            notes.append(f"{where}'s scrape interval {quoted(value)} is not a duration: not used")
        return seconds

    global_section = config.get("global")
    if not isinstance(global_section, dict):
        global_section = {}
    global_s = interval("the global section", global_section.get("scrape_interval")) or 60.0
    by_job: dict[str, float] = {}
    jobs = config.get("scrape_configs")
    for job in jobs if isinstance(jobs, list) else []:
        if isinstance(job, dict) and isinstance(job.get("job_name"), str):
            by_job[job["job_name"]] = interval(f"the job {quoted(job['job_name'])}", job.get("scrape_interval")) \
                or global_s
    return ScrapeConfig(global_s, by_job, tuple(notes))


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}


def parse_duration(text: Any) -> float | None:
    """A Prometheus duration (`15s`, `1m30s`, `500ms`) in seconds; None when unreadable."""
    if not isinstance(text, str) or not text or len(text) > 64:
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
