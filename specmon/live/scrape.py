"""Reading /metrics and /server_info for the live view: bounded (a hostile server cannot make specmon keep
more than MAX_TEXT_CHARS), never raising, and never generating (specmon's reads are not traffic)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from specmon.serving.prom import MAX_TEXT_CHARS, Scrape, parse_scrape


@dataclass(frozen=True)
class Reading:
    """One /metrics read: `scrape` (None when absent or unreachable), `absent` (HTTP 404: no --enable-metrics),
    `unreachable` (nothing answered)."""

    scrape: Scrape | None
    absent: bool = False
    unreachable: bool = False
    error: str | None = None


async def _bounded_get(http: httpx.AsyncClient, path: str) -> tuple[int, bytes]:
    async with http.stream("GET", path) as response:
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_TEXT_CHARS:
                break
        return response.status_code, bytes(body[: MAX_TEXT_CHARS])


async def read_metrics(http: httpx.AsyncClient, taken_at: float) -> Reading:
    """GET /metrics and parse it (see `parse_scrape`)."""
    try:
        status, body = await _bounded_get(http, "/metrics")
    except httpx.HTTPError as exc:
        return Reading(None, unreachable=isinstance(exc, httpx.TransportError), error=type(exc).__name__)
    if status == 404:
        return Reading(None, absent=True)
    if status != 200:
        return Reading(None, error=f"GET /metrics: HTTP {status}")
    return Reading(parse_scrape(body.decode("utf-8", "replace"), taken_at))


async def read_server_info(http: httpx.AsyncClient) -> dict[str, Any] | None:
    """GET /server_info (falling back to /get_server_info); None when neither answers a JSON object."""
    for path in ("/server_info", "/get_server_info"):
        try:
            status, body = await _bounded_get(http, path)
        except httpx.HTTPError:
            return None
        if status == 404:
            continue
        if status != 200:
            return None
        try:
            info = json.loads(body)
        except ValueError:
            return None
        return info if isinstance(info, dict) else None
    return None
