"""Attaching to a big log: find the last startup by searching backwards from the end, read that startup,
then only the recent lines. The middle (days of serving) is never read."""

from __future__ import annotations

import mmap
import os
from dataclasses import dataclass

from specmon.inputs import open_regular

STARTUP_MARKER = b"server_args="
READY_MARKER = b"The server is fired up and ready to roll!"
PREAMBLE_BYTES = 32 * 1024
"""Lines printed before `server_args=` (the launch command, warnings) are read back this far."""
STARTUP_MAX_BYTES = 8 * 1024 * 1024
TAIL_BYTES = 1024 * 1024
BIG_LOG_BYTES = 4 * 1024 * 1024
"""Logs smaller than this are simply read from their start."""
_SERVING = (b" batch", b"HTTP/1.1\"")


@dataclass(frozen=True)
class AttachPlan:
    """Byte ranges to read: the startup [startup_start, startup_end), then the tail [tail_start, size)."""

    size: int
    startup_start: int
    startup_end: int
    tail_start: int

    @property
    def skipped(self) -> int:
        return max(0, self.tail_start - self.startup_end)


def _line_start(mm, offset: int) -> int:
    return mm.rfind(b"\n", 0, offset) + 1


def plan_attach(path: str, size: int | None = None) -> AttachPlan:
    """Where the last startup of ``path`` begins and ends, and where its recent lines begin (never raises for
    an empty file; OSError for an unreadable one)."""
    with open_regular(path, what="log file") as f:
        size = os.fstat(f.fileno()).st_size if size is None else size
        if size == 0:
            return AttachPlan(0, 0, 0, 0)
        with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mm:
            marker = mm.rfind(STARTUP_MARKER, 0, size)
            start = 0
            if marker >= 0:
                start = _line_start(mm, marker)
                floor = max(0, start - PREAMBLE_BYTES)
                serving = max(mm.rfind(word, floor, start) for word in _SERVING)
                if serving >= 0:  # the previous run's last serving line: the preamble begins after it
                    start = mm.find(b"\n", serving) + 1
                elif floor > 0:
                    start = mm.find(b"\n", floor) + 1
                else:
                    start = 0
            limit = min(size, start + STARTUP_MAX_BYTES)
            ready = mm.find(READY_MARKER, start, limit)
            end = mm.find(b"\n", ready) + 1 if ready >= 0 else limit
            end = end if end > 0 else limit
            tail = 0
            if size > TAIL_BYTES:
                newline = mm.find(b"\n", size - TAIL_BYTES)
                tail = newline + 1 if newline >= 0 else size
            tail = max(end, tail)
            return AttachPlan(size, start, end, tail)


def read_range(path: str, start: int, end: int) -> bytes:
    with open_regular(path, what="log file") as f:
        f.seek(start)
        return f.read(max(0, end - start))


def skipped_note(plan: AttachPlan) -> str:
    """The line the log pane shows where the middle of a big log was skipped."""
    mib = plan.skipped / (1024 * 1024)
    return f"[specmon] … {mib:,.1f} MiB of serving log skipped (attached to a big log: the last startup, then the " \
           f"recent lines) …"


def read_items_between(path: str, start: int, end: int) -> list:
    """The log items (lines, progress frames) of bytes [start, end) of ``path``."""
    from specmon.logs.follower import LineSplitter, LogItem

    splitter = LineSplitter(frame_runs=True)
    items: list[LogItem] = []
    with open_regular(path, what="log file") as f:
        f.seek(start)
        left = end - start
        while left > 0:
            chunk = f.read(min(left, 1024 * 1024))
            if not chunk:
                break
            left -= len(chunk)
            splitter.feed_into(chunk, items)
    items.extend(splitter.flush())
    return items


def follow_attached(path: str, on_items, stop_event, interval: float = 0.05) -> None:
    """Follow a big log: its last startup and its recent lines first (the middle skipped, with a note),
    then what is appended, as ``follower.follow`` does. Meant to be a thread's target."""
    from specmon.logs.follower import LogFollower, LogItem, poll_until_stopped
    from specmon.logs.waiter import LogWaiter

    size = os.path.getsize(path)
    # Lines appended between this stat and the follower's open (microseconds) are not shown.
    with LogFollower(path, from_start=False, frame_runs=True) as follower, LogWaiter(path, interval) as waiter:
        plan = plan_attach(path, size=size)
        on_items(read_items_between(path, plan.startup_start, plan.startup_end))
        if plan.skipped:
            on_items([LogItem("line", skipped_note(plan))])
        tail = read_items_between(path, plan.tail_start, plan.size)
        if tail:
            on_items(tail)
        poll_until_stopped(follower, waiter, on_items, stop_event)
