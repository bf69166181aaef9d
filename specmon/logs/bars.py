"""How StartupTracker reads tqdm progress bars: frames, the bars' clock, long runs of frames.

Each frame moves a weight load's shards or a capture's batch sizes on; a bar's elapsed time moves the log's clock
on; a long run of one bar's frames (``frames.FrameRun``) is read only where it can change something.

``ProgressBars`` is a part of ``StartupTracker`` (a mixin, a ``parts.TrackerPart``): a frame changes the
tracker's state through the tracker's own helpers (``_capture_for``, ``_next_inferred``, ``_finish_capture``,
``_weight_frame``, ``_capture_event``).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from itertools import islice
from operator import itemgetter, le

from specmon.logs import patterns
from specmon.logs.captures import INFERRED_ORDER, add_sizes
from specmon.logs.frames import FrameRun
from specmon.logs.model import Capture, LineKind
from specmon.logs.parts import TrackerPart

_SKIM_BYTES = 4096  # a shorter run of frames is read frame by frame

_NOT_OF_BAR: dict[str, re.Pattern[bytes]] = {}


def _not_of_bar(prefix: str) -> re.Pattern[bytes]:
    """A frame (after its ``\\r``) that does not begin with a capture bar's description ``prefix``."""
    pattern = _NOT_OF_BAR.get(prefix)
    if pattern is None:
        if len(_NOT_OF_BAR) >= 32:
            _NOT_OF_BAR.clear()
        pattern = _NOT_OF_BAR[prefix] = re.compile(b"\r(?!" + re.escape(prefix.encode()) + b")")
    return pattern


_SIZES_OF_BAR: dict[str, re.Pattern[bytes]] = {}


def _sizes_of_bar(prefix: str) -> re.Pattern[bytes]:
    """The batch sizes of a capture bar's frames (after their ``\\r``) whose description begins with ``prefix``."""
    pattern = _SIZES_OF_BAR.get(prefix)
    if pattern is None:
        if len(_SIZES_OF_BAR) >= 32:
            _SIZES_OF_BAR.clear()
        pattern = _SIZES_OF_BAR[prefix] = re.compile(
            b"\r" + re.escape(prefix.encode()) + rb"(\d+) avail_mem=-?\d+(?:\.\d+)? GB\): *\d+%\|"
        )
    return pattern


_COUNTERS: dict[str, re.Pattern[bytes]] = {}


def _counts_up(data: bytes, start: int, end: int, total: str) -> bool:
    """Whether each frame of ``data[start:end]`` (joined by ``\\r``) shows one counter of ``total`` with its
    elapsed time, and neither the count nor the time ever goes back, below ``total`` but in the last frame (so no
    frame but the last can end the capture or restart the bar's clock). Found on the bytes, not frame by frame."""
    pattern = _COUNTERS.get(total)
    if pattern is None:
        if len(_COUNTERS) >= 32:
            _COUNTERS.clear()
        pattern = _COUNTERS[total] = re.compile(rb"\| *(\d{1,12})/" + re.escape(total.encode()) + rb" \[([\d:]{1,12})[<\]]")
    found = pattern.findall(data, start, end)
    if len(found) != data.count(b"\r", start, end) + 1:
        return False
    counts = list(map(int, map(itemgetter(0), found)))
    if counts[-1] > int(total) or (len(counts) > 1 and counts[-2] >= int(total)):
        return False
    texts = list(map(itemgetter(1), found))
    clocks: dict[bytes, float] = {}
    for text in set(texts):
        clock = patterns.clock_seconds(text.decode())
        if clock is None:
            return False
        clocks[text] = clock
    seconds = list(map(clocks.__getitem__, texts))
    return all(map(le, counts, islice(counts, 1, None))) and all(map(le, seconds, islice(seconds, 1, None)))


class ProgressBars(TrackerPart):
    """The progress-bar side of ``StartupTracker``, which it is a base of (see the module docstring). Its own
    fields are set by ``_init_bars``; what it uses of the tracker and of the other parts is declared by
    ``parts.TrackerPart``."""

    def _init_bars(self) -> None:
        self._bar_line = -2  # lines_seen when an SGLang bar's frame last came (with it, that line is SGLang's)
        self._frame_ts: datetime | None = None  # the log's time by the elapsed clock of progress bars
        self._bars: dict[int, tuple[int, float, datetime | None]] = {}  # total -> (n, elapsed, last timestamp at start)
        self._starts_line = -1  # lines_seen when the described capture bars counted in _starts began at 0
        self._starts = 0  # ... how many did on that physical line (more than one: bars of several processes)

    def feed_frame(self, frame: str) -> None:
        """Feed one ``\\r``-redrawn progress frame (tqdm)."""
        if self._over or self._ready or "%" not in frame:
            return
        try:
            self._on_frame(frame)
        except (ValueError, IndexError, OverflowError):
            return

    def feed_frames(self, run: FrameRun) -> None:
        """Feed a run of progress frames of one physical line (``FrameRun``): the same state and events as
        ``feed_frame`` on each of them, reading only those that can change them (see ``_skim``)."""
        if self._over or self._ready:
            return
        if run.end - run.start < _SKIM_BYTES or not self._skim(run):
            feed_frame = self.feed_frame
            for text in run.texts():
                feed_frame(text)

    def _glued(self, line: str) -> LineKind | None:
        """A tqdm frame, possibly with a log line glued after it on the same physical line."""
        m = patterns.tqdm_counter(line)
        if m is None:
            return self._feed_message_only(line)
        self.feed_frame(line[: m.end])
        rest = line[m.end :].lstrip(" ")
        if rest and not rest.isspace():
            self._state.lines_seen -= 1
            return self.feed_line(rest)
        self._count_recognized(None)
        return None

    def _feed_message_only(self, line: str) -> LineKind | None:
        ts_text, tags, level, msg = patterns.parse_prefix(line)
        return self._message(self._count_recognized(ts_text), tags, level, msg)

    def _on_frame(self, frame: str) -> None:
        m = patterns.tqdm_counter(frame)
        if m is None:
            return
        n, total, elapsed = int(m.n), int(m.total), m.elapsed
        if total <= 0 or n > total:
            return
        head = frame[: m.start]
        if patterns.is_weight_bar(head):
            self._bar_line = self._state.lines_seen
            self._bar_clock(n, total, patterns.clock_seconds(elapsed))
            self._weight_frame(n, total)
            return
        desc = patterns.CAPTURE_DESC.search(head)
        bare = not head.strip(" :")
        if desc is None and not bare:
            return
        if desc is not None:
            lines_seen = self._bar_line = self._state.lines_seen
            if n == 0:  # a described bar (re)starts: more than one on a line are bars of several processes
                if self._starts_line != lines_seen:
                    self._starts_line, self._starts = lines_seen, 0
                self._starts += 1
        seconds = patterns.clock_seconds(elapsed)
        self._bar_clock(n, total, seconds)
        capture = self._capture
        if bare and capture is not None and capture.status == "done" and capture.total is None:
            capture.total = capture.done = total  # an old bar flushed after its capture's end line: its total
            self._capture_event(capture)
            return
        if desc is not None and desc.group(2) is not None:
            if capture is None or capture.graph != "prefill":
                capture = self._capture_for("prefill", "target", "target prefill", None)
        elif capture is None or (
            capture.status == "done" and (n < capture.done or (n == 0 and capture.done == capture.total))
        ):
            if desc is None:
                return  # a bare bar starts nothing by itself; its "Capturing ..." frame follows
            capture = self._next_inferred()
            if capture is None:
                return
        elif capture.status != "running":
            return
        capture.total = total
        capture.done = n
        if desc is not None:
            size = desc.group(1) or desc.group(3)
            if size is not None:
                capture.current_bs = int(size)
                key = (capture.graph, capture.role)
                sizes = capture.batch_sizes
                if key not in self._bs_from_line and capture.current_bs not in sizes and len(sizes) < 4096:
                    sizes.append(capture.current_bs)
                    sizes.sort()
            capture.avail_gb = float(desc.group(4))
        if seconds is not None:
            capture.elapsed_s = seconds
        elif capture.started is not None and self._ts is not None:
            capture.elapsed_s = (self._ts - capture.started).total_seconds()
        if n >= total > 0:
            capture.done = total
            if capture.status == "running":
                capture.status = "done"
                capture.ended = self._ts
            capture.eta_s = 0.0
        elif n > 0 and capture.elapsed_s:  # tqdm's elapsed is whole seconds: 0 says nothing about the rate
            capture.eta_s = capture.elapsed_s / n * (total - n)
        else:
            capture.eta_s = None
        self._capture_event(capture)

    def _bar_clock(self, n: int, total: int, elapsed: float | None) -> None:
        """Move the log's clock on by a bar's elapsed time, counted from the last timestamp before the bar began.

        Bars are told apart by their totals (interleaved bars do not restart each other); a bar counting back
        or its clock going back is a new one. Never ahead of the real time: a bar begins after that timestamp.
        """
        if elapsed is None:
            return  # no clock in this frame (or a frame cut before it)
        bars = self._bars
        bar = bars.get(total)
        if bar is None or n < bar[0] or elapsed < bar[1]:
            if bar is None and len(bars) >= 16:
                bars.clear()
            bar = (n, elapsed, self._ts)
        start = bar[2]
        bars[total] = (n, elapsed, start)
        if elapsed and start is not None:
            at = start + timedelta(seconds=elapsed)
            if self._frame_ts is None or at > self._frame_ts:
                self._frame_ts = at

    # --- a long run of one bar's frames -------------------------------------------------------------------

    def _skim(self, run: FrameRun) -> bool:
        """Feed a long run of capture-bar frames reading only its first frames (up to the bar's last start, at
        0), its last ones (from its first at total/total on), and not those between when they can change nothing
        the frame after them does not set again. False, having fed nothing, when the run is not such.

        The frames skipped are checked as bytes, not parsed: each begins with the last frame's description (up to
        its batch size) and none shows the bar at 0 (tqdm draws a bar's 0 first: `| 0/`). So they are one tqdm bar
        counting up (its count and elapsed time never go back), and the frame after them sets what each of them
        would have: the capture's count, batch size, memory, elapsed time and ETA, and the bar's clock (its
        elapsed time is the largest). What they could add is checked on the state (``_skippable``): a batch size
        the capture's line did not list, a capture they would start. Bars of several processes interleaved on
        one line (more than one bar begun at 0 there) are read frame by frame.
        """
        data, start, end = run.data, run.start, run.end
        last_at = data.rfind(b"\r", start, end) + 1
        last = run.text(last_at, end) if last_at else None
        if last is None:
            return False
        m = patterns.tqdm_counter(last)
        if m is None or not m.bar:
            return False
        desc = patterns.CAPTURE_DESC.search(last, 0, m.start)
        if desc is None or (desc.group(1) or desc.group(3)) is None:
            return False
        prefix = last[: desc.start(1) if desc.group(1) is not None else desc.start(3)]
        if not prefix.isascii():
            return False
        total = m.total
        if len(total) > 12:
            return False  # no capture has that many batch sizes: frame by frame, where a fault is caught
        complete = f"{total}/{total}".encode()
        tail_at = last_at  # the first of the last frames that show the bar complete (tqdm draws it again at close)
        for _ in range(8):
            if data.find(complete, tail_at, end) < 0:
                break
            before = data.rfind(b"\r", start, tail_at - 1) + 1
            if before == 0 or data.find(complete, before, tail_at - 1) < 0:
                break
            tail_at = before
        head_end = data.find(b"\r", max(data.rfind(b"| 0/", start, tail_at), start), end)  # after its last start
        if head_end < 0 or tail_at - 1 <= head_end:
            return False
        if _not_of_bar(prefix).search(data, head_end, tail_at - 1) is not None:
            return False  # a frame between is not this bar's
        next_cr = data.find(b"\r", tail_at, end)
        after_end = next_cr if next_cr >= 0 else end
        if not _counts_up(data, max(data.rfind(b"\r", start, head_end) + 1, start), after_end, total):
            return False  # from the last start to the frame after those skipped, the bar never counts back
        after = run.text(tail_at, after_end)
        feed_frame = self.feed_frame
        for text in run.texts(start, head_end):
            feed_frame(text)
        skip = after is not None and self._skippable(after, prefix, total, desc.group(2) is not None)
        if skip and skip is not True:  # a capture whose batch sizes its frames list: those of the frames skipped
            add_sizes(skip, _sizes_of_bar(prefix).findall(data, head_end, tail_at - 1))
        for text in run.texts(tail_at if skip else head_end + 1, end):
            feed_frame(text)
        return True

    def _skippable(self, after: str, prefix: str, total: str, prefill: bool) -> Capture | bool:
        """Whether the frames before ``after`` (of the bar with this description ``prefix`` and ``total``, counting
        up, below total) change nothing that ``after`` does not set again, in the state the tracker is in; or the
        capture they would add their batch sizes to (its line listed none), which is all they change."""
        if self._over or self._ready:
            return True  # every frame is ignored
        if self._starts_line == self._state.lines_seen and self._starts > 1:
            return False  # two bars begun on this line: their counts interleave
        m = patterns.tqdm_counter(after)
        if m is None or not m.bar or m.total != total or int(m.n) > int(total):
            return False
        if patterns.clock_seconds(m.elapsed) is None or not after.startswith(prefix):
            return False  # ``after`` must set the elapsed time and batch size each frame between sets
        desc = patterns.CAPTURE_DESC.search(after, 0, m.start)
        if desc is None or (desc.group(1) or desc.group(3)) is None or (desc.group(2) is not None) != prefill:
            return False
        st = self._state
        capture = self._capture
        if prefill:  # the prefill capture's figures, whatever its status
            if capture is None or capture.graph != "prefill":
                capture = st.capture("prefill", "target")
            if capture is None:
                return False
            return True if (capture.graph, capture.role) in self._bs_from_line else capture
        if capture is not None and capture.status == "running":
            return True if (capture.graph, capture.role) in self._bs_from_line else capture
        # no running capture: each frame is ignored (bar clock aside) unless it would start an inferred one
        return all(st.capture(graph, role) is not None for graph, role in INFERRED_ORDER)
