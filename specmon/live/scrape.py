"""Reading /metrics and /server_info for the live view: bounded (each answer whole within `READ_DEADLINE_S`
and at most its size once decoded: `HttpClient.fetch`), never raising, and never generating (specmon's
reads are not traffic)."""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from specmon.http.client import Answer, HttpClient
from specmon.http.errors import AnswerRefused, ConnectError, HttpError, RequestTimeout, TransportError
from specmon.inputs import InputError
from specmon.serving.client import MAX_INFO_BYTES, MAX_METRICS_BYTES
from specmon.serving.prom import Scrape, ScrapeParser, parse_scrape
from specmon.text import printable

READ_DEADLINE_S = 5.0
"""A whole /metrics or /server_info answer within this, however slowly a server drips it."""


@dataclass(frozen=True)
class Reading:
    """One /metrics read: `scrape` (None when absent or unreachable; with its `error` set when the answer could not
    be read: no success, too big, too slow, not Prometheus text), `absent` (HTTP 404: no --enable-metrics),
    `unreachable` (nothing answered; `error` names how)."""

    scrape: Scrape | None
    absent: bool = False
    unreachable: bool = False
    error: str | None = None


async def read_metrics(http: HttpClient, taken_at: float,
                       parser: ScrapeParser | None = None) -> Reading:
    """GET /metrics and parse it (see `parse_scrape`; with `parser`, what did not change is not parsed again)."""
    try:
        answer = await http.fetch("GET", "/metrics", limit=MAX_METRICS_BYTES, deadline_s=READ_DEADLINE_S)
    except (AnswerRefused, RequestTimeout) as exc:
        return Reading(Scrape(taken_at, error=printable(exc)[:200]))  # it answers, but not so that it can be read
    except TransportError as exc:
        return Reading(None, unreachable=True, error=type(exc).__name__)
    except HttpError as exc:
        return Reading(Scrape(taken_at, error=printable(f"GET /metrics: {type(exc).__name__}: {exc}")[:200]))
    if answer.status_code == 404:
        return Reading(None, absent=True)
    if not 200 <= answer.status_code < 300:
        return Reading(Scrape(taken_at, error=http_error("GET /metrics", answer)))
    text = answer.text
    return Reading(parser.parse(text, taken_at) if parser is not None else parse_scrape(text, taken_at))


def http_error(what: str, answer: Answer) -> str:
    """An answer that is no success, in one line: `GET /metrics: HTTP 500 (Internal Server Error: oops)`, the
    reason and the body's first line (cut, made printable)."""
    try:
        reason = HTTPStatus(answer.status_code).phrase
    except ValueError:
        reason = ""
    first = next((line.strip() for line in answer.content[:400].decode("utf-8", "replace").splitlines()
                  if line.strip()), "")
    parts = [reason] if reason else []
    if first and first.lower() != reason.lower():
        parts.append(printable(first)[:80])
    return f"{what}: HTTP {answer.status_code}" + (f" ({': '.join(parts)})" if parts else "")


@dataclass(frozen=True)
class InfoReading:
    """One /server_info read: `info` (None when there is none to use) and, when it could not be used, why."""

    info: dict[str, Any] | None
    error: str | None = None


async def read_server_info(http: HttpClient) -> InfoReading:
    """GET /server_info (falling back to /get_server_info): a JSON object in strict JSON (no NaN or Infinity,
    nested at most inputs.MAX_DEPTH), else the reason (none when nothing answers or neither path exists)."""
    for path in ("/server_info", "/get_server_info"):
        try:
            answer = await http.fetch("GET", path, limit=MAX_INFO_BYTES, deadline_s=READ_DEADLINE_S)
        except (AnswerRefused, RequestTimeout) as exc:
            return InfoReading(None, str(exc)[:200])
        except ConnectError:
            return InfoReading(None)  # nothing answers: the metrics reading says unreachable
        except HttpError as exc:
            return InfoReading(None, f"GET {path}: {type(exc).__name__}: {exc}"[:200])
        if answer.status_code == 404:
            continue
        if not 200 <= answer.status_code < 300:
            return InfoReading(None, http_error(f"GET {path}", answer))
        try:
            info = answer.json(f"GET {path}")
        except InputError as exc:
            return InfoReading(None, str(exc)[:200])
        except ValueError:
            return InfoReading(None, f"GET {path}: not JSON")
        if not isinstance(info, dict):
            return InfoReading(None, f"GET {path}: a JSON {type(info).__name__}, not an object")
        return InfoReading(info)
    return InfoReading(None)
