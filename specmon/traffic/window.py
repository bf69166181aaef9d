"""The last minutes of production traffic, as the app and `monitor --once` show it: records summarised per slot
of SLOT_S seconds (by the time each request finished, else when it was read), slots older than the window dropped.

Memory is per slot, not per record (a slot is a `TrafficSummary`: running sums, at most BOOTSTRAP_MAX pairs a
class, MAX_OUTLIERS records a kind), so following 1,000 requests a second for an hour costs what a minute does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from specmon.traffic.records import RequestRecord
from specmon.traffic.summary import TrafficSummary

SLOT_S = 10.0
DEFAULT_WINDOW_S = 300.0
MAX_WINDOW_S = 24 * 3600.0
FUTURE_SLACK_S = 60.0
"""A record stamped further ahead of this host's clock than this is counted as read now (its clock is off)."""
BEFORE_WINDOW = "finished before the window"


class TrafficWindow:
    """Records of the last `window_s` seconds; `summary(now)` merges the slots still in it."""

    def __init__(self, window_s: float = DEFAULT_WINDOW_S, by: str | None = None,
                 categorise: Callable[[RequestRecord], str] | None = None) -> None:
        self.window_s = min(MAX_WINDOW_S, max(SLOT_S, window_s))
        self.by = by
        self.categorise = categorise
        self.left_out: Counter = Counter()
        self._slots: dict[int, TrafficSummary] = {}

    def add(self, records: Iterable[RequestRecord], now: float) -> None:
        oldest = self._oldest_slot(now)
        slots = self._slots
        for record in records:
            ts = record.finished_ts
            if ts is None or ts > now + FUTURE_SLACK_S:
                ts = now
            slot = int(ts // SLOT_S)
            if slot < oldest:
                self.left_out[BEFORE_WINDOW] += 1
                continue
            summary = slots.get(slot)
            if summary is None:
                summary = slots[slot] = TrafficSummary(by=self.by, buckets=True, categorise=self.categorise)
            summary.add(record)
        self._drop_old(oldest)

    def summary(self, now: float) -> TrafficSummary:
        """The requests of the window ending `now`, merged in one summary."""
        oldest = self._oldest_slot(now)
        self._drop_old(oldest)
        merged = TrafficSummary(by=self.by, buckets=True, categorise=self.categorise)
        for slot in sorted(self._slots):
            merged.merge(self._slots[slot])
        return merged

    def _oldest_slot(self, now: float) -> int:
        return int((now - self.window_s) // SLOT_S) + 1

    def _drop_old(self, oldest: int) -> None:
        for slot in [s for s in self._slots if s < oldest]:
            del self._slots[slot]
