"""A log's pieces as read: lines and progress frames (LogItem), and runs of frames (FrameRun).

A frame is a ``\\r``-redrawn progress bar's state; its text is cleaned as a line's is (``clean_text``). This module
is below both the follower, which makes the pieces (``follower.LineSplitter``), and the tracker, which reads them
(``StartupTracker.feed_items``; a run's frames, ``bars.ProgressBars.feed_frames``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Literal, NamedTuple

ItemKind = Literal["line", "frame", "frames"]

DEFAULT_MAX_LINE_BYTES = 64 * 1024
TRUNCATION_MARK = "…"

# ANSI/VT escape sequences (CSI, OSC, two-byte ESC forms), a lone ESC, and the other C0 controls except TAB.
_CONTROL = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b\n\r]*(?:\x07|\x1b\\)?|[@-Z\\-_])?"
    r"|[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]"
)
_CONTROL_BYTES = bytes(range(0x20)).replace(b"\t", b"").replace(b"\n", b"").replace(b"\r", b"") + b"\x7f"
_CONTROL_BYTE = re.compile(b"[" + re.escape(_CONTROL_BYTES) + b"]")
_CLEAN_WHOLE_BYTES = 4096  # a longer block with few control bytes has only their lines cleaned by the regex
_CLEAN_LINES_MAX = 64  # (this many at most: more, and the block goes through it whole)


class LogItem(NamedTuple):
    """One piece of a log: a complete ``line``, or a ``frame`` (a ``\\r``-redrawn progress bar state).

    A splitter made with ``frame_runs=True`` delivers a long run of frames of one physical line as one ``frames``
    item whose ``text`` is a ``FrameRun`` (its frames decoded only when read).
    """

    kind: ItemKind
    text: str


def clean_text(raw: bytes) -> str:
    """Decode log bytes (invalid UTF-8 replaced) and strip ANSI escapes and control characters."""
    controls = len(raw) - len(raw.translate(None, _CONTROL_BYTES))
    if not controls:
        return raw.decode("utf-8", "replace")
    if len(raw) <= _CLEAN_WHOLE_BYTES or controls > _CLEAN_LINES_MAX:
        return _CONTROL.sub("", raw.decode("utf-8", "replace"))
    # A block of lines with a few coloured ones: only the lines with a control byte go through the regex (no
    # escape sequence it strips spans a line end).
    pieces: list[str] = []
    pos = 0
    for m in _CONTROL_BYTE.finditer(raw):
        at = m.start()
        if at < pos:
            continue  # on a line already cleaned
        start = raw.rfind(b"\n", pos, at) + 1 or pos
        end = raw.find(b"\n", at)
        end = len(raw) if end < 0 else end
        pieces += [raw[pos:start].decode("utf-8", "replace"), _CONTROL.sub("", raw[start:end].decode("utf-8", "replace"))]
        pos = end
    pieces.append(raw[pos:].decode("utf-8", "replace"))
    return "".join(pieces)


def frame_text(segment: bytes, max_line_bytes: int) -> str | None:
    """One ``\\r``-terminated segment as the frame the splitter delivers (decoded, cleaned, cut at the limit), or
    None for a blank one (dropped). A cut frame is never blank, like a cut final line: only its first
    ``max_line_bytes + 1`` bytes may decide, since that is all a splitter keeps of a segment split across reads."""
    if len(segment) > max_line_bytes:
        return clean_text(segment[:max_line_bytes]) + TRUNCATION_MARK
    if not segment.strip():
        return None
    text = clean_text(segment)
    return text if text.strip() else None


class FrameRun:
    """Progress frames in a row on one physical line (a tqdm bar redrawn with ``\\r``), kept as their bytes.

    ``data[start:end]`` holds the frames' segments joined by ``\\r``, as written (``data`` is the chunk read, not
    copied). A frame is decoded only when it is read, exactly as ``LineSplitter`` delivers a single frame
    (``frame_text``), so a reader that needs only some of them (the tracker: a bar's first and last frames, see
    ``StartupTracker.feed_frames``) does not pay for the rest.
    """

    __slots__ = ("data", "start", "end", "max_line_bytes")

    def __init__(self, data: bytes, start: int = 0, end: int | None = None,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.data = data
        self.start = start
        self.end = len(data) if end is None else end
        self.max_line_bytes = max_line_bytes

    @property
    def raw(self) -> bytes:
        """The run's bytes (a copy)."""
        return self.data[self.start : self.end]

    def texts(self, start: int | None = None, end: int | None = None) -> Iterator[str]:
        """The frames whose segments lie in ``data[start:end]`` (offsets in ``data``, by default the run's;
        ``start`` a segment's first byte, ``end`` the ``\\r`` after one or the run's end), blank ones left out."""
        cap = self.max_line_bytes
        for segment in self.data[self.start if start is None else start : self.end if end is None else end].split(
            b"\r"
        ):
            text = frame_text(segment, cap)
            if text is not None:
                yield text

    def text(self, start: int, end: int) -> str | None:
        """The frame whose segment is ``data[start:end]``, or None when it is blank."""
        return frame_text(self.data[start:end], self.max_line_bytes)

    def after_first(self) -> FrameRun | None:
        """The run without its first frame (None when it has only one)."""
        cut = self.data.find(b"\r", self.start, self.end)
        return None if cut < 0 else FrameRun(self.data, cut + 1, self.end, self.max_line_bytes)

    def first_text(self) -> str | None:
        """The run's first frame (None when it is blank)."""
        cut = self.data.find(b"\r", self.start, self.end)
        return self.text(self.start, self.end if cut < 0 else cut)

    def __repr__(self) -> str:
        return f"FrameRun({self.data[self.start : self.start + 40]!r}..., {self.end - self.start} bytes)"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FrameRun) and (self.raw, self.max_line_bytes) == (other.raw, other.max_line_bytes)

    __hash__ = None  # type: ignore[assignment]
