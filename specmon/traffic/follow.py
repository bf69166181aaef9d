"""Following SGLang's request records live: the export directory's hourly files and the request log, as they grow.

`TrafficFollower.poll()` (non-blocking; the app calls it from its one poll loop, `loop_thread.PeriodicReader`)
lists the PATHs again, so a new hourly export file or a request log that appears is picked up, and reads each
followed file through the log follower (`specmon.logs.follower.LogFollower`: `tail -F` on a path, a truncated
or replaced file read again from its start, a partial last line held until its newline, each line bounded). A
file is followed once whatever its names (by device and inode: a log rotated to `NAME.log.DATE` is not read
again under its new name). A file last written before `since_ts` is not opened (it holds no request finished
since); the records read are not filtered by time (`window.TrafficWindow` places them). Every line that is not a usable
record is counted in `tally` with its reason; a PATH or file that cannot be read is in `problems` (said again
each poll until it can be read, which it may be later: a server not yet started has written nothing).
"""

from __future__ import annotations

import errno
import os
import stat

from specmon.inputs import InputError, open_regular
from specmon.logs.follower import LogFollower
from specmon.logs.frames import TRUNCATION_MARK
from specmon.text import printable
from specmon.traffic.reader import (
    LONG_LINE,
    MAX_LINE_BYTES,
    PathRefused,
    ReadTally,
    directory_files,
    file_kind,
    record_of,
)
from specmon.traffic.records import RequestRecord

MAX_FOLLOWED = 48
"""Files followed at once: the latest by name (two days of hourly export files); the older ones are left."""
MAX_POLL_BYTES = 16 * 1024 * 1024
"""Bytes one poll reads from one file; a backlog is read over several polls."""
MAX_REMEMBERED = 100_000
"""Identities of files already read, remembered so that a renamed one is not read again."""
WAITING = "not there yet (waiting for it)"


def _why(error: OSError) -> str:
    if error.errno == errno.ELOOP:
        return "a symbolic link loop"
    return error.strerror or str(error)


class TrafficFollower:
    """Follows the record files under `paths` (export directories or files, request logs or their directories)."""

    def __init__(self, paths: list[str], *, since_ts: float | None = None, want_params: bool = True,
                 max_poll_bytes: int = MAX_POLL_BYTES) -> None:
        self.paths = list(paths)
        self.since_ts = since_ts
        self.want_params = want_params
        self.max_poll_bytes = max_poll_bytes
        self.tally = ReadTally()
        self.problems: dict[str, str] = {}
        self._followed: dict[str, tuple[str, LogFollower]] = {}
        self._read: dict[tuple[int, int], None] = {}  # identities read, in order (a bounded set)

    @property
    def files(self) -> int:
        """Files followed now."""
        return len(self._followed)

    def poll(self) -> list[RequestRecord]:
        """The records appended since the last poll (or, first, those the files hold), in file order."""
        self._discover()
        records: list[RequestRecord] = []
        for name, (kind, follower) in list(self._followed.items()):
            items = follower.poll()
            for item in items:
                if item.kind != "line":
                    continue
                text = item.text
                if text.endswith(TRUNCATION_MARK):
                    self.tally.skipped[LONG_LINE] += 1
                    continue
                record = record_of(text, kind, self.tally, None, self.want_params)
                if record is not None:
                    records.append(record)
            if follower.identity is not None:
                self._remember(follower.identity)
            if not items and not os.path.lexists(name):  # deleted and read to its end
                follower.close()
                del self._followed[name]
        return records

    def close(self) -> None:
        """Stop following: every file closed."""
        for _, follower in self._followed.values():
            follower.close()
        self._followed.clear()

    def _remember(self, identity: tuple[int, int]) -> None:
        self._read[identity] = None
        if len(self._read) > MAX_REMEMBERED:
            del self._read[next(iter(self._read))]

    def _discover(self) -> None:
        problems: dict[str, str] = {}
        candidates: list[tuple[str, str]] = []
        for path in self.paths:
            try:
                info = os.stat(path)
            except FileNotFoundError:
                problems[printable(path)] = WAITING
                continue
            except OSError as error:
                problems[printable(path)] = _why(error)
                continue
            if stat.S_ISDIR(info.st_mode):
                try:
                    candidates += directory_files(path)
                except PathRefused as refused:
                    problems[printable(path)] = str(refused).rpartition(": ")[2]
            elif stat.S_ISREG(info.st_mode):
                candidates.append((path, file_kind(path)))
            else:
                problems[printable(path)] = "not a file or directory"
        if len(candidates) > MAX_FOLLOWED:
            self.tally.left_out[f"older files (the latest {MAX_FOLLOWED} are followed)"] = \
                len(candidates) - MAX_FOLLOWED
            candidates = candidates[-MAX_FOLLOWED:]
        followed_ids = {f.identity for _, f in self._followed.values() if f.identity is not None}
        for name, kind in candidates:
            if name in self._followed:
                continue
            why = self._start(name, kind, followed_ids)
            if why:
                problems[printable(name)] = why
        self.problems = problems

    def _start(self, name: str, kind: str, followed_ids: set[tuple[int, int]]) -> str | None:
        """Follow `name` unless it was read already or was last written before `since_ts`; why not, if it cannot
        be read."""
        try:
            with open_regular(name) as handle:
                info = os.fstat(handle.fileno())
        except InputError:
            return "not a regular file"
        except OSError as error:
            return _why(error)
        identity = (info.st_dev, info.st_ino)
        if identity in self._read or identity in followed_ids:
            return None
        if self.since_ts is not None and info.st_mtime < self.since_ts:
            return None
        self._followed[name] = (kind, LogFollower(name, from_start=True, max_poll_bytes=self.max_poll_bytes,
                                                  max_line_bytes=MAX_LINE_BYTES))
        followed_ids.add(identity)
        return None
