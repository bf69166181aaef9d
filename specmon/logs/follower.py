"""Reading a log as it grows: bytes -> lines and ``\\r`` progress frames, and ``tail -F`` on a path.

``LineSplitter`` is pure (bytes in, ``LogItem`` out; the items and ``FrameRun`` are ``specmon.logs.frames``'s)
and is shared by the file follower, stdin reading and the app's child-process pipe. ``LogFollower`` polls a path
without blocking and follows truncation and rotation. Nothing here imports Textual.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable, Iterator
from itertools import repeat
from typing import BinaryIO

from specmon.logs.frames import (
    DEFAULT_MAX_LINE_BYTES,
    TRUNCATION_MARK,
    FrameRun,
    LogItem,
    clean_text,
    frame_text,
)
from specmon.logs.waiter import IDLE_POLL_S, LogWaiter

DEFAULT_CHUNK_BYTES = 1024 * 1024
FINGERPRINT_BYTES = 256  # the file's first bytes, kept to notice a truncate-and-refill between two polls
FRAME_RUN_BYTES = 2048
"""Frames in a row on one physical line, this long or longer, are one ``FrameRun`` (with ``frame_runs=True``)."""


class LineSplitter:
    """Turns a byte stream into lines and progress frames, the way a terminal would show them.

    * A line is delivered only once its ``\\n`` arrives (``\\r\\n`` counts as one line end).
    * Within a line, each ``\\r``-terminated segment is a progress frame (tqdm redraws); the text after
      the last ``\\r`` when the ``\\n`` comes is the bar's final state and is delivered once, as a line.
      Blank frames, and a blank final segment after frames, are dropped.
    * At most ``max_line_bytes`` of any segment are kept (then ``…``); the rest is discarded as it arrives.
    * Invalid UTF-8 is replaced, ANSI escapes and control characters are stripped.

    Output does not depend on how the input is chunked. ``flush()`` ends the stream: it delivers the
    held incomplete line, if any.
    """

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, *, frame_runs: bool = False) -> None:
        self.max_line_bytes = max(1, max_line_bytes)
        self.frame_runs = frame_runs  # long runs of frames as one ``FrameRun`` item (see ``LogItem``)
        self._carry = b""  # the incomplete segment (at most max_line_bytes + 1 bytes)
        self._in_frames = False  # the incomplete line has had a \r
        self._overflow = False  # the carried segment was cut: discard until its \r or \n
        self._held_cr = False  # input ended on \r: it may be half of \r\n

    def pending_frame(self) -> str | None:
        """The latest, possibly still growing, frame of an incomplete redrawn line (for live progress)."""
        if not self._in_frames or not self._carry.strip():
            return None
        return self._segment_text(self._carry)

    @property
    def redrawing(self) -> bool:
        """Whether the incomplete line is a progress bar being redrawn (it has had a ``\\r``)."""
        return self._in_frames

    @property
    def idle(self) -> bool:
        """Whether nothing is held: the next byte starts a new line (a reader may then take complete lines
        itself, see ``summary.summarize_stream``)."""
        return not self._carry and not self._in_frames and not self._overflow and not self._held_cr

    def line_text(self, raw: bytes) -> str:
        """One complete line without ``\r`` as ``feed`` delivers it (decoded, cleaned, cut at the limit)."""
        return self._segment_text(raw)

    def lines_text(self, data: bytes, start: int, end: int) -> list[str]:
        """The complete lines of ``data[start:end]`` (no ``\r`` in it, nothing carried) as ``feed`` delivers them."""
        block = data[start:end]
        if len(block) <= self.max_line_bytes or _longest(block) <= self.max_line_bytes:
            return clean_text(block).split("\n")
        return [self._segment_text(line) for line in block.split(b"\n")]

    def feed(self, chunk: bytes) -> list[LogItem]:
        """Consume bytes; return the lines and frames they complete."""
        items: list[LogItem] = []
        self.feed_into(chunk, items)
        return items

    def feed_into(self, chunk: bytes, items: list[LogItem]) -> None:
        """Like ``feed``, appending to ``items`` (saves a list per chunk on hot paths)."""
        if self._held_cr:
            chunk = b"\r" + chunk
            self._held_cr = False
        if chunk.endswith(b"\r"):
            chunk = chunk[:-1]
            self._held_cr = True
        if not chunk:
            return
        if _has_crlf(chunk):
            chunk = chunk.replace(b"\r\n", b"\n")
        pos = 0
        if self._overflow:
            pos = _first_break(chunk, 0)
            if pos < 0:
                return
            self._overflow = False
        if self._carry:
            cut = _first_break(chunk, pos)  # the carried segment ends here: complete it, then go on from there
            data = self._carry + chunk[pos : None if cut < 0 else cut + 1]
            self._carry = b""
            self._split(data, 0, items)
            if cut < 0:
                return
            pos = cut + 1
        self._split(chunk, pos, items)

    def _split(self, data: bytes, start: int, items: list[LogItem]) -> None:
        """Deliver what ``data[start:]`` completes (nothing carried before it) and carry its incomplete segment."""
        last_nl = data.rfind(b"\n", start)
        if last_nl >= 0:
            self._emit_lines(data, start, last_nl, items)
            start = last_nl + 1
        cut = data.rfind(b"\r", start)
        if cut >= 0:
            self._emit_frames(data, start, cut, items)
            self._in_frames = True
            start = cut + 1
        cap = self.max_line_bytes
        if len(data) - start > cap:
            self._carry = data[start : start + cap + 1]
            self._overflow = True
        else:
            self._carry = data[start:]

    def flush(self) -> list[LogItem]:
        """End of stream: deliver the incomplete line (and a held ``\\r``) as if a ``\\n`` followed."""
        items: list[LogItem] = []
        if self._held_cr:
            self._held_cr = False
            self._overflow = False
            self.feed_into(b"\r\n", items)  # a lone trailing \r ends the line like \r\n would
        elif self._carry or self._in_frames:
            self._overflow = False
            self.feed_into(b"\n", items)
        self.reset()
        return items

    def reset(self) -> None:
        """Forget any incomplete line (e.g. after the file was truncated)."""
        self._carry = b""
        self._in_frames = False
        self._overflow = False
        self._held_cr = False

    def _emit_lines(self, data: bytes, start: int, end: int, items: list[LogItem]) -> None:
        """Deliver ``data[start:end]``: complete lines joined by ``\\n`` (the first may continue a carried line)."""
        while True:
            if not self._in_frames:  # the lines before the next one with a \r, as one block
                cr = data.find(b"\r", start, end)
                plain = end if cr < 0 else data.rfind(b"\n", start, cr)
                if plain >= start:
                    self._emit_plain(data[start:plain], items)
                    if cr < 0:
                        return
                    start = plain + 1
            # the line with a \r (its frames, then its last segment), or the rest of a carried line that had one
            nl = data.find(b"\n", start, end)
            stop = end if nl < 0 else nl
            cut = data.rfind(b"\r", start, stop)
            if cut >= 0:
                self._emit_frames(data, start, cut, items)
            last = self._segment_text(data[max(cut + 1, start) : stop])
            if last.strip():
                items.append(LogItem("line", last))
            self._in_frames = False
            if nl < 0:
                return
            start = nl + 1

    def _emit_plain(self, block: bytes, items: list[LogItem]) -> None:
        """Deliver ``block``: complete lines joined by ``\\n``, none with a ``\\r``, nothing carried into them."""
        if len(block) <= self.max_line_bytes or _longest(block) <= self.max_line_bytes:
            items.extend(map(_new_tuple, repeat(LogItem), zip(repeat("line"), clean_text(block).split("\n"))))
        else:
            items.extend([LogItem("line", self._segment_text(line)) for line in block.split(b"\n")])

    def _emit_frames(self, data: bytes, start: int, end: int, items: list[LogItem]) -> None:
        """Deliver ``data[start:end]``: frames joined by ``\\r`` (as one ``FrameRun`` when long and asked for)."""
        if self.frame_runs and end - start >= FRAME_RUN_BYTES:
            items.append(LogItem("frames", FrameRun(data, start, end, self.max_line_bytes)))  # type: ignore[arg-type]
            return
        cap = self.max_line_bytes
        for segment in data[start:end].split(b"\r"):
            text = frame_text(segment, cap)
            if text is not None:
                items.append(LogItem("frame", text))

    def _segment_text(self, segment: bytes) -> str:
        if len(segment) > self.max_line_bytes:
            return clean_text(segment[: self.max_line_bytes]) + TRUNCATION_MARK
        return clean_text(segment)


def _has_crlf(data: bytes) -> bool:
    """Whether ``data`` holds ``\\r\\n``. In a run of progress frames, where ``\\r`` is everywhere and a search for
    the pair is slow, its few line ends are looked at instead (each found with memchr)."""
    if b"\r" not in data:
        return False
    nl = data.find(b"\n")
    for _ in range(16):
        if nl < 0:
            return False
        if nl and data[nl - 1] == 13:
            return True
        nl = data.find(b"\n", nl + 1)
    return data.find(b"\r\n", nl - 1) >= 0


_new_tuple = tuple.__new__  # LogItems made in C: ``LogItem(kind, text)`` is a Python call each


def _first_break(data: bytes, start: int) -> int:
    nl, cr = data.find(b"\n", start), data.find(b"\r", start)
    if nl < 0:
        return cr
    return nl if cr < 0 else min(nl, cr)


def _longest(block: bytes) -> int:
    return max(map(len, block.split(b"\n")))


def read_items(
    stream: BinaryIO,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    *,
    frame_runs: bool = False,
) -> Iterator[list[LogItem]]:
    """Read a binary stream (a file, stdin, a pipe) to its end, yielding the items of each chunk.

    Uses ``read1`` when the stream has it, so a pipe's data is delivered as it arrives.
    """
    splitter = LineSplitter(max_line_bytes, frame_runs=frame_runs)
    read = getattr(stream, "read1", stream.read)
    while True:
        chunk = read(chunk_bytes)
        if not chunk:
            break
        items = splitter.feed(chunk)
        if items:
            yield items
    tail = splitter.flush()
    if tail:
        yield tail


def check_followable(path: str | os.PathLike[str]) -> None:
    """Raise OSError unless ``path`` can be followed: it may not exist yet (it is waited for), but a directory,
    a FIFO, a device, a file that cannot be read or a symlink loop is an error now, not something to wait for
    (a pipe is read from stdin: `... | specmon log-summary -`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
        if not stat.S_ISREG(mode):
            kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
            raise OSError(errno.EINVAL, f"{kind}, not a log file (pipe a log to stdin: `-`)", os.fspath(path))
    finally:
        os.close(fd)


class LogFollower:
    """Follows a log file like ``tail -F``: non-blocking ``poll()`` returns what was appended since.

    * A file that does not exist yet is waited for (``poll()`` returns nothing until it appears).
    * ``from_start=False`` skips what the file holds when the follower is created; a file that appears
      later, a file that replaces it (rotation: a new inode at the path) and a truncated file are read
      from their start.
    * An incomplete line is held until its ``\\n``; while a progress bar is being redrawn, its latest
      frame is delivered once per change, even before the next ``\\r``.
    * One ``poll()`` reads at most ``max_poll_bytes``, so a huge backlog is delivered over several polls.
    * A file truncated and written again between two polls, even past the old size, is noticed (its first
      bytes changed) and read from its start, so no line of the new content is lost.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        from_start: bool = True,
        *,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        max_poll_bytes: int = 8 * DEFAULT_CHUNK_BYTES,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        frame_runs: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        self.from_start = from_start
        self.chunk_bytes = chunk_bytes
        self.max_poll_bytes = max_poll_bytes
        self.splitter = LineSplitter(max_line_bytes, frame_runs=frame_runs)
        self.truncations = 0
        self.rotations = 0
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None
        self._position = 0
        self._head = b""  # the file's first bytes as read (up to FINGERPRINT_BYTES)
        self._regular = False
        self._last_live_frame: str | None = None
        self._skip_existing = not from_start
        if self._skip_existing:
            self._open()  # the starting point is the end of the file as it is now
            self._skip_existing = False

    @property
    def is_open(self) -> bool:
        """Whether the file has been found and is being read."""
        return self._fd is not None

    @property
    def identity(self) -> tuple[int, int] | None:
        """(device, inode) of the file being read (None before it is found)."""
        return self._identity

    def poll(self) -> list[LogItem]:
        """Read whatever was appended (or the file that replaced it) without blocking."""
        items: list[LogItem] = []
        if self._fd is None and not self._open():
            return items
        if self._regular and self._rewritten():
            self._restart(items)
        budget = self.max_poll_bytes
        while budget > 0:
            got = self._read_available(items, budget)
            budget -= got
            if got:
                continue
            if not self._check_replaced(items):
                break
        self._add_live_frame(items)
        return items

    def close(self) -> None:
        """Stop following and release the file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._identity = None

    def __enter__(self) -> LogFollower:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open(self) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return False
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # a FIFO or /dev/zero would be read forever: only files are followed
            os.close(fd)
            return False
        self._fd = fd
        self._identity = (st.st_dev, st.st_ino)
        self._position = 0
        self._head = b""
        self._regular = stat.S_ISREG(st.st_mode)
        if self._skip_existing:
            self._position = os.lseek(fd, 0, os.SEEK_END)
            if self._regular:
                self._head = os.pread(fd, min(FINGERPRINT_BYTES, self._position), 0)
        return True

    def _rewritten(self) -> bool:
        """Whether the open file was truncated (and maybe refilled) since the last read: it is shorter than
        what was read, or its first bytes are not the ones read."""
        assert self._fd is not None
        if os.fstat(self._fd).st_size < self._position:
            return True
        head = self._head
        return bool(head) and os.pread(self._fd, len(head), 0) != head

    def _restart(self, items: list[LogItem]) -> None:
        """Read the (truncated) file again from its start."""
        assert self._fd is not None
        self.truncations += 1
        items.extend(self.splitter.flush())
        self._position = os.lseek(self._fd, 0, os.SEEK_SET)
        self._head = b""

    def _read_available(self, items: list[LogItem], budget: int) -> int:
        """Read up to ``budget`` bytes from the open file; return how many were read."""
        assert self._fd is not None
        total = 0
        while total < budget:
            try:
                chunk = os.read(self._fd, min(self.chunk_bytes, budget - total))
            except BlockingIOError:  # a FIFO with a writer but no data yet
                break
            if not chunk:
                break
            total += len(chunk)
            if self._position < FINGERPRINT_BYTES and len(self._head) == self._position:
                self._head += chunk[: FINGERPRINT_BYTES - self._position]
            self._position += len(chunk)
            self.splitter.feed_into(chunk, items)
        return total

    def _check_replaced(self, items: list[LogItem]) -> bool:
        """At end of file: follow a truncation or a rotation. True if there is a new file to read."""
        assert self._fd is not None
        if self._regular and self._rewritten():
            self._restart(items)
            return True
        try:
            st = os.stat(self.path)
        except OSError:
            return False  # renamed away and not recreated yet: keep reading the old file
        if (st.st_dev, st.st_ino) == self._identity:
            return False
        self._read_available(items, 1 << 62)  # the rest of the old file
        items.extend(self.splitter.flush())
        self.close()
        self.rotations += 1
        return self._open()

    def _add_live_frame(self, items: list[LogItem]) -> None:
        live = self.splitter.pending_frame()
        if items and self._last_live_frame is not None:
            # The carried segment is always the first thing delivered once it completes.
            first = items[0]
            if first == ("frame", self._last_live_frame):
                del items[0]
            elif first.kind == "frames":
                run: FrameRun = first.text  # type: ignore[assignment]
                if run.first_text() == self._last_live_frame:
                    rest = run.after_first()
                    if rest is None:
                        del items[0]
                    else:
                        items[0] = LogItem("frames", rest)  # type: ignore[arg-type]
            self._last_live_frame = None
        if live is not None and live != self._last_live_frame:
            items.append(LogItem("frame", live))
            self._last_live_frame = live


def follow(
    path: str | os.PathLike[str],
    on_items: Callable[[list[LogItem]], None],
    stop_event: threading.Event,
    interval: float = 0.05,
    from_start: bool = True,
    max_interval: float = IDLE_POLL_S,
    frame_runs: bool = False,
) -> None:
    """Follow ``path`` until ``stop_event`` is set, calling ``on_items`` with each non-empty batch.

    Polls every ``interval`` while the log grows; between, it sleeps until the file changes (``LogWaiter``: inotify
    on Linux, else each empty poll waits half as long again, up to ``max_interval``). Meant to be a thread's
    target; ``on_items`` runs on that thread (post a message from it).
    """
    with LogFollower(path, from_start=from_start, frame_runs=frame_runs) as follower, \
            LogWaiter(path, interval, max_interval) as waiter:
        poll_until_stopped(follower, waiter, on_items, stop_event)


def poll_until_stopped(follower: LogFollower, waiter: LogWaiter, on_items: Callable[[list[LogItem]], None],
                       stop_event: threading.Event) -> None:
    """Hand each non-empty poll of ``follower`` to ``on_items``, sleeping between polls as ``waiter`` says, until
    ``stop_event`` is set."""
    while not stop_event.is_set():
        waiter.clear()
        items = follower.poll()
        if items:
            on_items(items)
        waiter.sleep(stop_event, bool(items))
