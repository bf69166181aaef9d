"""LogWaiter: how a log follower sleeps between two polls of its file.

On Linux the file's folder is watched with inotify (``inotify_simple``): an idle server's log is not polled at all,
the follower wakes when the file is written, created, moved or deleted, and at least every ``WATCHED_WAIT_S`` to
look at its stop event (and in case the file system sends no events: NFS, a FUSE mount). Each wake of a sleeping
thread costs ~0.1–0.25 ms of CPU here, far more than the poll itself (~10 µs), so an idle app's follower went from
4–8 wakes a second to one. Elsewhere, or without inotify (no instance left, a folder that does not exist yet), it
polls as before: every ``interval`` while the log grows, each empty poll waiting half as long again, up to
``max_interval``.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

IDLE_POLL_S = 0.25
"""Polling without inotify: the longest wait between two polls of a log that does not grow."""
WATCHED_WAIT_S = 1.0
"""Watched with inotify: the longest sleep (the stop event is looked at, and the file polled, this often)."""
STREAM_GAP_S = 0.25
"""Watched with inotify: lines that come closer together than this are a stream, polled every ``interval`` (one
read for many lines); lines further apart wake the follower one at a time."""

try:  # Linux only; an optional speed-up, never a requirement
    from inotify_simple import INotify
    from inotify_simple import flags as inotify_flags
except (ImportError, OSError):  # pragma: no cover - not Linux, or no libc
    INotify = None

_MASK = 0
if INotify is not None:
    _MASK = int(
        inotify_flags.MODIFY | inotify_flags.CREATE | inotify_flags.MOVED_TO | inotify_flags.MOVED_FROM
        | inotify_flags.DELETE | inotify_flags.ATTRIB | inotify_flags.CLOSE_WRITE | inotify_flags.DELETE_SELF
        | inotify_flags.MOVE_SELF
    )


class LogWaiter:
    """Sleeps between a follower's polls of ``path`` (see the module's docstring). Call ``clear()`` just before each
    poll, then ``sleep()`` with whether that poll brought anything."""

    def __init__(self, path: str | os.PathLike[str], interval: float = 0.05, max_interval: float = IDLE_POLL_S,
                 watch: bool = True) -> None:
        self.interval = interval
        self.max_interval = max(interval, max_interval)
        self._wait = interval
        self._items_at = -STREAM_GAP_S
        self._streaming = False
        self._names: set[str] = set()
        self._inotify = _watch(Path(path), self._names) if watch and INotify is not None else None

    @property
    def watching(self) -> bool:
        """Whether inotify wakes this follower (else it polls with back-off)."""
        return self._inotify is not None

    def clear(self) -> None:
        """Forget the file's changes seen so far (the poll that follows reads them). Not while a stream is read:
        its changes are read at the end of it (one wake more, then the sleep)."""
        if self._inotify is not None and not self._streaming:
            try:
                self._inotify.read(timeout=0)
            except OSError:  # pragma: no cover - the instance broke: poll instead
                self.close()

    def sleep(self, stop_event: threading.Event, got_items: bool) -> None:
        """Sleep until it is time to poll again (or ``stop_event`` is set)."""
        if self._inotify is None:
            if got_items:
                self._wait = self.interval
            stop_event.wait(self._wait)
            if not got_items:
                self._wait = min(self.max_interval, self._wait * 1.5)
            return
        now = time.monotonic()
        if got_items:  # lines again within STREAM_GAP_S: a stream, read every interval, many lines a read
            self._streaming = now - self._items_at < STREAM_GAP_S
            self._items_at = now
            if self._streaming:
                stop_event.wait(self.interval)
            return  # a lone line: poll again at once (most likely nothing more), then sleep until the next
        if self._streaming and now - self._items_at < STREAM_GAP_S:
            stop_event.wait(self.interval)  # a stream that paused a moment (a burst of lines at a time)
            return
        self._streaming = False
        self._sleep_until_changed(stop_event)

    def _sleep_until_changed(self, stop_event: threading.Event) -> None:
        deadline = time.monotonic() + WATCHED_WAIT_S
        while not stop_event.is_set() and self._inotify is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            try:
                events = self._inotify.read(timeout=max(1, int(left * 1000)))
            except OSError:  # pragma: no cover - the instance broke: poll instead
                self.close()
                return
            if any(not event.name or event.name in self._names for event in events):
                return  # the file (or its folder itself) changed; another file of the folder does not wake it

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None

    def __enter__(self) -> LogWaiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _watch(path: Path, names: set[str]) -> INotify | None:
    """An inotify instance watching the folders of ``path`` and of what it links to; None where that fails."""
    targets = {path.absolute()}
    with contextlib.suppress(OSError):
        targets.add(Path(os.path.realpath(path)))
    try:
        inotify = INotify()
    except OSError:  # no instance left (fs.inotify.max_user_instances), or no inotify here
        return None
    try:
        for target in targets:
            inotify.add_watch(target.parent, _MASK)
            names.add(target.name)
    except OSError:  # a folder that does not exist (yet), no permission, no watch left
        inotify.close()
        return None
    return inotify
