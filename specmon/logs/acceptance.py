"""What `log-summary` says of a speculative server's serving: its acceptance length over the Live view's window
(the last minute of its `Decode batch` lines), judged by the Live view's rule (`specmon.acceptance`).

Read from the log's last bytes only (``ServingTail``): reading the `accept len` of every decode line of a long
serving log would cost more than the rest of `log-summary` (see docs/PERFORMANCE.md).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from datetime import datetime

from specmon.acceptance import WINDOW_S, low_acceptance
from specmon.logs.batchlines import parse_batch_line

TAIL_BYTES = 4 * 1024 * 1024
"""How much of the log's end is kept: a minute of decode lines of a busy server, with its access-log lines."""
MAX_LINES = 4096
"""At most this many decode lines are read (as the Live view keeps)."""


class ServingTail:
    """The last ``TAIL_BYTES`` or more of a log as it is read, kept as the chunks read (no copy per chunk)."""

    def __init__(self, limit: int = TAIL_BYTES) -> None:
        self._limit = limit
        self._chunks: deque[bytes] = deque()
        self._size = 0
        self._cut = False  # the last chunk dropped ended inside a line: the first kept line is its end

    def feed(self, chunk: bytes) -> None:
        """Keep ``chunk``, the next bytes read."""
        if not chunk:
            return
        chunks = self._chunks
        chunks.append(chunk)
        self._size += len(chunk)
        while self._size - len(chunks[0]) >= self._limit:
            dropped = chunks.popleft()
            self._size -= len(dropped)
            self._cut = not dropped.endswith(b"\n")

    def lines(self) -> list[bytes]:
        """The whole lines kept, oldest first (without the end of a line whose start was dropped)."""
        data = b"".join(self._chunks)
        if self._cut:
            data = data[data.find(b"\n") + 1 :]
        return data.splitlines()


@dataclass(frozen=True)
class ServingAcceptance:
    """The acceptance length over the last ``window_s`` of a log's decode lines, and what the rule says of it."""

    accept_length: float
    decode_lines: int
    window_s: float
    first: datetime | None
    last: datetime | None
    alert: str | None

    def to_json(self) -> dict:
        return {
            "accept_length": round(self.accept_length, 3),
            "decode_lines": self.decode_lines,
            "window_s": self.window_s,
            "first": self.first.isoformat() if self.first is not None else None,
            "last": self.last.isoformat() if self.last is not None else None,
            "alert": self.alert,
        }


def serving_acceptance(lines: list[bytes], window_s: float = WINDOW_S) -> ServingAcceptance | None:
    """The acceptance length of the decode lines of the last ``window_s`` of log time (weighted by their
    throughput, as the Live view weighs them), or None when no decode line says one.

    SGLang writes `accept len` only when speculation is on, so a line with one is a speculative server's; a line
    without a timestamp counts as recent, as in the Live view."""
    newest: float | None = None
    weighted = weight = 0.0
    count = 0
    oldest: float | None = None
    for raw in reversed(lines):
        if b"Decode batch" not in raw or b"accept len" not in raw:
            continue
        line = parse_batch_line(raw.decode("utf-8", "replace"))
        if line is None or line.kind != "decode" or line.accept_len is None:
            continue
        if line.ts is not None:
            if newest is None:
                newest = line.ts
            elif line.ts < newest - window_s:
                break
            oldest = line.ts
        share = line.tok_s or 1.0
        weighted += line.accept_len * share
        weight += share
        count += 1
        if count >= MAX_LINES:
            break
    if not count or weight <= 0:
        return None
    accept = weighted / weight
    return ServingAcceptance(
        accept_length=accept,
        decode_lines=count,
        window_s=window_s,
        first=_local(oldest),
        last=_local(newest),
        alert=low_acceptance(accept, True, None, None),
    )


def _local(ts: float | None) -> datetime | None:
    """A batch line's timestamp (seconds since the epoch, read as local time) as the log's wall-clock time."""
    if ts is None:
        return None
    try:
        return datetime.fromtimestamp(ts)
    except (OverflowError, OSError, ValueError):
        return None
