"""SGLang's `Decode batch` and `Prefill batch` lines (0.4.x `Decode batch.` and 0.5.x `Decode batch,` shapes)
as numbers: what the Live view reads when a server has no /metrics, and what `log-summary` reads of its serving."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

_PREFIX = re.compile(r"\[(?:(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)?)?\s*([^\]]*)\]\s*")
_DP = re.compile(r"DP(\d+)")
_TP = re.compile(r"TP(\d+)")
_MAX_FIELDS = 24

# field name in the line -> attribute
_DECODE_KEYS = {
    "#running-req": "running", "#queue-req": "queued", "#token": "used", "#full token": "used",
    "token usage": "usage", "full token usage": "usage", "accept len": "accept_len", "accept rate": "accept_rate",
    "gen throughput (token/s)": "tok_s",
}
_PREFILL_KEYS = {
    "#new-seq": "new_seq", "#new-token": "new_tokens", "#cached-token": "cached_tokens", "#running-req": "running",
    "#queue-req": "queued", "token usage": "usage", "full token usage": "usage",
}


@dataclass(slots=True)
class BatchLine:
    """One `Decode batch` (kind "decode") or `Prefill batch` (kind "prefill") line; absent fields are None.

    `ts` is the line's timestamp (seconds since the epoch, local time) when it has one; `dp` its DP rank.
    """

    kind: str
    ts: float | None
    dp: int
    running: float | None = None
    queued: float | None = None
    used: float | None = None
    usage: float | None = None
    accept_len: float | None = None
    accept_rate: float | None = None
    tok_s: float | None = None
    new_seq: float | None = None
    new_tokens: float | None = None
    cached_tokens: float | None = None
    at: float | None = None
    """When the line arrived (wall time), when the reader says."""


def _timestamp(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%d %H:%M:%S").timestamp()
    except (ValueError, OverflowError, OSError):
        return None


_HEAD_CACHE_MAX = 64
_heads: dict[str, tuple[float | None, int] | None] = {}
"""A line's prefix (``[date time TAGS] ``) -> (timestamp, DP rank), or None for a prefix to skip. SGLang's stamps
repeat within a second and its tags per rank, so a prefix is parsed once (``strptime`` costs more than the rest of
a line), not once per line."""


def _read_head(head: str) -> tuple[float | None, int] | None:
    try:
        return _heads[head]
    except KeyError:  # a prefix not read yet (None is one read: a prefix to skip)
        pass
    read: tuple[float | None, int] | None = (None, 0)
    if head.strip():
        prefix = _PREFIX.match(head)
        if prefix is None:
            read = None
        else:
            ranks = prefix.group(2) or ""
            tp = _TP.search(ranks)
            if tp is not None and tp.group(1) != "0":
                read = None  # TP ranks > 0 repeat TP0's numbers
            else:
                match = _DP.search(ranks)
                read = (_timestamp(prefix.group(1)), int(match.group(1)) if match else 0)
    if len(_heads) >= _HEAD_CACHE_MAX:
        _heads.clear()  # a new second (or a hostile log's endless prefixes): bounded either way
    _heads[head] = read
    return read


def batch_kind(line: str) -> tuple[str, int, int] | None:
    """("decode" or "prefill", where the word begins, where " batch" is) for a line that may be a batch line."""
    at = line.find(" batch")
    if at < 6 or len(line) > 4096:
        return None
    if line.startswith("Decode", at - 6):
        return "decode", at - 6, at
    if line.startswith("Prefill", at - 7):
        return "prefill", at - 7, at
    return None


def parse_batch_line(line: str) -> BatchLine | None:
    """A `Decode batch` / `Prefill batch` line as numbers, or None for any other line (never raises)."""
    found = batch_kind(line)
    if found is None:
        return None
    kind, word, at = found
    keys = _DECODE_KEYS if kind == "decode" else _PREFILL_KEYS
    read = _read_head(line[:word])
    if read is None:
        return None
    values: dict[str, float] = {}
    for field in line[at + 6:].split(", ", _MAX_FIELDS)[:_MAX_FIELDS]:
        name, sep, value = field.partition(": ")
        attr = keys.get(name)
        if attr is None:
            if not sep:
                continue
            attr = keys.get(name.strip(" .,"))
            if attr is None:
                continue
        if attr in values:
            continue
        try:
            number = float(value)
        except ValueError:
            try:
                number = float(value.strip().rstrip(","))
            except ValueError:
                continue
        if number == number and abs(number) != float("inf"):
            values[attr] = number
    if not values:
        return None
    return BatchLine(kind, read[0], read[1], **values)
