"""SGLang's `Decode batch` and `Prefill batch` lines (0.4.x `Decode batch.` and 0.5.x `Decode batch,` shapes)
as numbers, and a bounded window of the recent ones (the live source when the server has no /metrics)."""

from __future__ import annotations

import itertools
import re
from collections import deque
from collections.abc import Callable, Sequence
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
    known = _heads.get(head, False)
    if known is not False:
        return known
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


def _batch_kind(line: str) -> tuple[str, int, int] | None:
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
    found = _batch_kind(line)
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


@dataclass(frozen=True)
class LogFigures:
    """Live figures read from recent batch lines over a window (None: the lines cannot say)."""

    decode_tok_s: float | None
    running: float | None
    queued: float | None
    kv_used: float | None
    kv_usage: float | None
    accept_length: float | None
    accept_rate: float | None
    cache_hit_rate: float | None
    lines: int
    newest_ts: float | None
    own_tok_s: float | None = None
    """specmon's own generation over the same lines' intervals, already left out of `decode_tok_s`."""


class BatchLog:
    """The recent batch lines of one run (bounded), by arrival; figures over a window of log time.

    A line is parsed when it is read (``lines``, ``latest``, ``last_line``, ``figures``: every 2 s in the app),
    not when it arrives: at 10,000 lines a second only the ``max_lines`` newest are ever kept, so only those are
    parsed."""

    def __init__(self, max_lines: int = 4096) -> None:
        self._lines: deque[BatchLine] = deque(maxlen=max_lines)
        self._unparsed: deque[tuple[str, float | None]] = deque(maxlen=max_lines)
        self._latest: dict[int, BatchLine] = {}
        self._last_line: str | None = None
        self._last_line_at: float | None = None

    def feed(self, line: str, arrived_at: float | None = None) -> bool:
        """Keep ``line`` if it looks like a batch line (it is parsed when read); whether it was kept."""
        if _batch_kind(line) is None:
            return False
        self._unparsed.append((line, arrived_at))
        return True

    def feed_many(self, lines: Sequence[str], arrived_at: float | None = None) -> None:
        """Keep those of ``lines`` that have `` batch`` (in one pass, with no call a line: following 1,000 lines a
        second, a call a line showed). The rest of ``feed``'s test waits for the parse: a line kept here that is
        no batch line is dropped then."""
        self._unparsed.extend([(line, arrived_at) for line in lines if " batch" in line])

    def _parse_unparsed(self) -> None:
        unparsed = self._unparsed
        while unparsed:
            line, arrived_at = unparsed.popleft()
            parsed = parse_batch_line(line)
            if parsed is None:
                continue
            parsed.at = arrived_at
            self._lines.append(parsed)
            self._latest[parsed.dp] = parsed
            self._last_line = line
            self._last_line_at = arrived_at if arrived_at is not None else parsed.ts

    @property
    def lines(self) -> deque[BatchLine]:
        """The newest parsed batch lines (at most ``max_lines``), oldest first."""
        self._parse_unparsed()
        return self._lines

    @property
    def latest(self) -> dict[int, BatchLine]:
        """The newest decode-or-prefill line per DP rank (running/queued/KV now)."""
        self._parse_unparsed()
        return self._latest

    @property
    def last_line(self) -> str | None:
        self._parse_unparsed()
        return None if self._last_line is None else self._last_line[:400]

    @property
    def last_line_at(self) -> float | None:
        """When (time.monotonic of the feeder, or the line's ts) the last batch line arrived."""
        self._parse_unparsed()
        return self._last_line_at

    def usual_gap_s(self, last: int = 16) -> float:
        """The median gap between the timestamps of the last batch lines (0 when they cannot say)."""
        stamps = [ln.ts for ln in reversed(list(itertools.islice(reversed(self.lines), last))) if ln.ts is not None]
        gaps = sorted(b - a for a, b in zip(stamps, stamps[1:], strict=False) if b >= a)
        return gaps[len(gaps) // 2] if gaps else 0.0

    def newest_ts(self) -> float | None:
        for line in reversed(self.lines):
            if line.ts is not None:
                return line.ts
        return None

    def figures(self, window_s: float, now: float | None = None,
                own: Callable[[float, float], float] | None = None) -> LogFigures:
        """Figures over the lines of the last `window_s` seconds of log time, ending at `now` (default: the
        newest line's timestamp); lines without a timestamp count as recent.

        `own(start, end)`: specmon's own tokens generated between two wall times. Each decode line's rate is
        over the steps since its DP rank's line before, so specmon's own rate is taken over the same span (the
        two lines' arrival times) and left out: `own_tok_s` apart."""
        self._parse_unparsed()
        newest = self.newest_ts()
        end = now if now is not None else newest
        start = None if end is None else end - window_s
        count = decoded = prefilled = 0
        tok_by_dp: dict[int, list[float]] = {}  # per DP rank: [sum of tok/s, lines]
        own_by_dp: dict[int, list[float]] = {}  # per DP rank: [sum of specmon's own tok/s over its lines, lines]
        arrived: dict[int, float] = {}  # per DP rank: when its last decode line arrived
        accept_sum = accept_weight = rate_sum = 0.0
        accepts = rates = 0
        new = cached = 0.0
        for ln in self.lines:  # one pass, no intermediate lists: this runs every refresh over up to 4096 lines
            since = None
            if own is not None and ln.kind == "decode" and ln.at is not None:
                since = arrived.get(ln.dp)
                arrived[ln.dp] = ln.at
            if ln.ts is not None and start is not None and ln.ts < start:
                continue
            count += 1
            if ln.kind == "decode":
                decoded += 1
                if ln.tok_s is not None:
                    pair = tok_by_dp.setdefault(ln.dp, [0.0, 0])
                    pair[0] += ln.tok_s
                    pair[1] += 1
                    if since is not None and ln.at is not None and ln.at > since and own is not None:
                        pair = own_by_dp.setdefault(ln.dp, [0.0, 0])
                        pair[0] += own(since, ln.at) / (ln.at - since)
                        pair[1] += 1
                if ln.accept_len is not None:
                    weight = ln.tok_s or 1.0
                    accept_sum += ln.accept_len * weight
                    accept_weight += weight
                    accepts += 1
                if ln.accept_rate is not None:
                    rate_sum += ln.accept_rate
                    rates += 1
            elif ln.kind == "prefill":
                prefilled += 1
                new += ln.new_tokens or 0.0
                cached += ln.cached_tokens or 0.0
        decode_tok_s = sum(total / n for total, n in tok_by_dp.values()) if tok_by_dp else None
        # every DP rank's lines span the same time: each rank's mean is specmon's whole own rate over it
        own_tok_s = sum(total / n for total, n in own_by_dp.values()) / len(own_by_dp) if own_by_dp else None
        if decode_tok_s is not None and own_tok_s is not None:
            decode_tok_s = max(0.0, decode_tok_s - own_tok_s)
        accept_length = accept_sum / accept_weight if accepts and accept_weight > 0 else None
        latest = list(self.latest.values())
        return LogFigures(
            decode_tok_s=decode_tok_s if decoded or end is None else 0.0,
            running=_sum(ln.running for ln in latest),
            queued=_sum(ln.queued for ln in latest),
            kv_used=_sum(ln.used for ln in latest),
            kv_usage=_mean(ln.usage for ln in latest),
            accept_length=accept_length,
            accept_rate=rate_sum / rates if rates else None,
            cache_hit_rate=cached / (new + cached) if prefilled and new + cached > 0 else None,
            lines=count,
            newest_ts=newest,
            own_tok_s=own_tok_s,
        )


def _sum(values) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _mean(values) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None
