"""Reading SGLang's request records from paths: an export directory, an export file or a request log.

Each file is opened once, when the paths are listed (so a file renamed by an hourly rotation while it is read is
read to its end, and listed twice is read once: by device and inode). Lines are read in bounded chunks: a line
over MAX_LINE_BYTES is skipped without being held; a last line without its newline is counted as partial (it is
still being written). Every line that is not a usable record is counted with its reason.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from specmon.inputs import InputError, open_regular
from specmon.text import printable
from specmon.traffic.records import (
    EXPORT_FILE,
    LaunchedShape,
    RequestRecord,
    Unusable,
    is_finish_line,
    launched_shape,
    parse_export,
    parse_log_line,
)

MAX_LINE_BYTES = 8 * 1024 * 1024
"""An export line holds the prompt's text and ids: a 128k-token prompt is ~1.5 MB. Longer lines are skipped."""
CHUNK_BYTES = 1024 * 1024
assert CHUNK_BYTES < MAX_LINE_BYTES  # a line within one chunk is never too long (see `lines`)
MAX_LAUNCH_SHAPES = 64
"""Distinct launch configurations kept from the logs read (a log holds one per restart)."""
MAX_FILES = 10_000
"""A directory of more files than this is refused (a day is 24 export files; a month 720)."""
LONG_LINE = f"line over {MAX_LINE_BYTES // (1024 * 1024)} MiB"
PARTIAL = "partial last line (still being written?)"
HEALTH_CHECKS = "health checks"
OLD_FILES = "files last written before --since"


class PathRefused(Exception):
    """A PATH given that cannot be read at all (missing, unreadable, a loop, not a file or directory)."""


@dataclass
class ReadTally:
    """What the reading met besides usable records: skipped records by reason, files it could not read."""

    skipped: Counter = field(default_factory=Counter)
    left_out: Counter = field(default_factory=Counter)  # not records by design: health checks, before --since
    unreadable: list[str] = field(default_factory=list)
    files: int = 0
    launches: Counter[LaunchedShape] = field(default_factory=Counter)  # the `server_args` lines of the logs read


def _why(error: OSError) -> str:
    if error.errno == errno.ELOOP:
        return "a symbolic link loop"
    return error.strerror or str(error)


def _open(path: str) -> BinaryIO:
    try:
        return open_regular(path)
    except InputError:  # a FIFO, a device, a directory: said as one unreadable file among the others
        raise PathRefused(f"{printable(path)}: not a regular file") from None


def directory_files(path: str) -> list[tuple[str, str]]:
    """(path, kind) of a directory's record files: its export files in hour order, else every `*.log*` file
    as a request log (a --log-requests-target directory: `HOST_RANK.log` and its rotated `.log.DATE` files)."""
    try:
        with os.scandir(path) as entries:
            names = []
            for entry in entries:
                names.append(entry.name)
                if len(names) > MAX_FILES:
                    raise PathRefused(f"{printable(path)}: more than {MAX_FILES:,} files")
    except OSError as error:
        raise PathRefused(f"{printable(path)}: {_why(error)}") from None
    exports = sorted(name for name in names if EXPORT_FILE.match(name))
    if exports:
        return [(os.path.join(path, name), "export") for name in exports]
    return [(os.path.join(path, name), "log") for name in sorted(names) if ".log" in name]


def file_kind(path: str) -> str:
    """"export" for an export file (by its name), else "log"."""
    return "export" if EXPORT_FILE.match(os.path.basename(path)) else "log"


def open_paths(paths: list[str], tally: ReadTally, since_ts: float | None = None) -> list[tuple[str, str, BinaryIO]]:
    """Every PATH opened now: (shown name, kind, stream). PathRefused for a PATH that cannot be read at all; a
    file inside a directory that cannot be read goes to `tally.unreadable`. A file last written before `since_ts`
    (which holds no request finished since) is left out."""
    opened: list[tuple[str, str, BinaryIO]] = []
    seen: set[tuple[int, int]] = set()
    try:
        for path in paths:
            try:
                info = os.stat(path)
            except OSError as error:
                raise PathRefused(f"{printable(path)}: {_why(error)}") from None
            if stat.S_ISDIR(info.st_mode):
                listed, inside = directory_files(path), True
            elif stat.S_ISREG(info.st_mode):
                listed, inside = [(path, file_kind(path))], False
            else:
                raise PathRefused(f"{printable(path)}: not a file or directory")
            for name, kind in listed:
                try:
                    stream = _open(name)
                except (OSError, PathRefused) as error:
                    if not inside:
                        raise PathRefused(f"{printable(name)}: {_why(error) if isinstance(error, OSError) else error}"
                                          ) from None
                    tally.unreadable.append(
                        f"{printable(name)}: {_why(error) if isinstance(error, OSError) else 'not a regular file'}")
                    continue
                key = os.fstat(stream.fileno())
                if (key.st_dev, key.st_ino) in seen:
                    stream.close()
                    continue
                if since_ts is not None and key.st_mtime < since_ts:
                    stream.close()
                    tally.left_out[OLD_FILES] += 1
                    continue
                seen.add((key.st_dev, key.st_ino))
                opened.append((name, kind, stream))
    except BaseException:
        for _, _, stream in opened:
            stream.close()
        raise
    return opened


def lines(stream: BinaryIO, tally: ReadTally) -> Iterator[bytes]:
    """The complete, non-blank lines of a stream, each at most MAX_LINE_BYTES (longer ones counted and passed
    over without being held)."""
    buffer = b""
    too_long = False
    while True:
        try:
            chunk = stream.read(CHUNK_BYTES)
        except OSError as error:
            tally.unreadable.append(f"{getattr(stream, 'name', '?')}: {_why(error)}")
            return
        if not chunk:
            break
        parts = chunk.split(b"\n")
        rest = parts.pop()
        if parts:  # the first part ends the line carried over; the others are whole lines shorter than a chunk
            if too_long:
                parts[0], too_long = b"", False
            elif buffer:
                first = buffer + parts[0]
                if len(first) > MAX_LINE_BYTES:
                    tally.skipped[LONG_LINE] += 1
                    first = b""
                parts[0] = first
            buffer = b""
            for line in parts:
                if line and not line.isspace():
                    yield line
        if not too_long:
            buffer += rest
            if len(buffer) > MAX_LINE_BYTES:
                tally.skipped[LONG_LINE] += 1
                too_long, buffer = True, b""
    if buffer.strip() and not too_long:
        tally.skipped[PARTIAL] += 1


def record_of(line: str | bytes, kind: str, tally: ReadTally, since_ts: float | None = None,
              want_params: bool = True) -> RequestRecord | None:
    """The usable record of one complete line of a file of `kind` ("export" or "log"), else None with the reason
    counted in `tally` (a log's other lines are not records and are not counted)."""
    if kind == "log":
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        if not is_finish_line(line):
            if "server_args" in line:
                launched = launched_shape(line)
                if launched is not None and (launched in tally.launches or len(tally.launches) < MAX_LAUNCH_SHAPES):
                    tally.launches[launched] += 1
            return None
    try:
        record = parse_export(line, want_params) if kind == "export" else parse_log_line(
            line if isinstance(line, str) else line.decode("utf-8", "replace"))
    except Unusable as why:
        tally.skipped[str(why)] += 1
        return None
    if record is None:
        tally.left_out[HEALTH_CHECKS] += 1
        return None
    if since_ts is not None:
        if record.finished_ts is None:
            tally.skipped["no time (needed for --since)"] += 1
            return None
        if record.finished_ts < since_ts:
            tally.left_out["before --since"] += 1
            return None
    return record


def read_records(paths: list[str], tally: ReadTally, since_ts: float | None = None,
                 want_params: bool = True) -> Iterator[RequestRecord]:
    """Every usable record under `paths`, in file order; the rest counted in `tally`. PathRefused first when a
    PATH cannot be read."""
    opened = open_paths(paths, tally, since_ts)
    try:
        for _name, kind, stream in opened:
            tally.files += 1
            for line in lines(stream, tally):
                record = record_of(line, kind, tally, since_ts, want_params)
                if record is not None:
                    yield record
            stream.close()
    finally:
        for _, _, stream in opened:
            stream.close()
