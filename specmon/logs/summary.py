"""An SGLang startup log, summarised (the core of `specmon log-summary`; its handler is in logs/cli.py).

Reads the log through the ``LineSplitter`` in large chunks (nothing is kept per line, so memory does not
grow with the log), feeds the ``StartupTracker`` and prints its state: as aligned plain text, or as the
``StartupState.to_json()`` shape. ``--follow`` prints the changes as the log grows and stops at ready (0)
or failure (1). Headless: no Textual.
"""

from __future__ import annotations

import io
import re
import shutil
import textwrap
import time
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import BinaryIO, TextIO

from specmon.logs.acceptance import ServingAcceptance, ServingTail
from specmon.logs.follower import DEFAULT_CHUNK_BYTES, LineSplitter
from specmon.logs.model import (
    CLOCK_ONLY_YEAR,
    CaptureProgressed,
    PhaseChanged,
    ServerBecameReady,
    ServerStopped,
    StartupFailed,
    StartupState,
    TrackerEvent,
    WeightsProgressed,
)
from specmon.logs.tracker import STEADY_WHEN_OVER, STEADY_WHEN_READY, StartupTracker
from specmon.text import aligned_rows, printable, strict_json
from specmon.units import format_seconds

PROGRESS_EVERY_S = 1.0  # --follow prints capture/shard progress at most this often per graph or model

STATE_TITLES = {"starting": "STARTING", "ready": "READY", "failed": "FAILED", "stopped": "STOPPED"}


NOT_SGLANG_EXIT = 3  # the exit code for a file with no SGLang startup line (random bytes, another program's log)


def exit_code(state: StartupState) -> int:
    """1 when the log shows a failure, else 0."""
    return 1 if state.state == "failed" else 0


def is_sglang_log(state: StartupState) -> bool:
    """Whether any line was recognised as SGLang's (a bare `Killed` or another program's traceback is not)."""
    return state.lines_recognized > 0


def summarize_stream(
    stream: BinaryIO,
    tracker: StartupTracker | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    tail: ServingTail | None = None,
) -> StartupState:
    """Read a whole binary stream into a tracker (a new one by default) and return its state; ``tail`` (when
    given) keeps the stream's last bytes, for what the serving's last minute says (``serving_acceptance``).

    Reads ``chunk_bytes`` at a time. Until the server is ready (or the startup over), the chunk goes through the
    ``LineSplitter`` (16 KiB at a time, larger while inside a progress bar's line; a long run of its frames is one
    ``FrameRun``) and every line to the tracker. From then on, runs of steady serving lines (the tracker's
    ``steady_lines``) are found with one regex search over the raw bytes, counted and skipped (only each run's
    last line is decoded and fed, for the clock); the lines between runs are fed one by one, so the state is the
    same as feeding every line.
    """
    tracker = tracker or StartupTracker()
    splitter = LineSplitter(frame_runs=True)
    read = getattr(stream, "read1", stream.read)
    piece = _STARTUP_PIECE
    while chunk := read(chunk_bytes):
        if tail is not None:
            tail.feed(chunk)
        start = 0
        while tracker.steady_lines is None and start < len(chunk):  # the startup: in pieces, to notice ready
            items = splitter.feed(chunk[start : start + piece] if start or piece < len(chunk) else chunk)
            _feed(tracker, items)
            start += piece
            # inside a progress bar's line (a long capture) in larger pieces; lines, where ready may come, in small ones
            piece = min(2 * piece, _STARTUP_PIECE_MAX) if splitter.redrawing else _STARTUP_PIECE
        if start < len(chunk):
            _feed_ready(tracker, splitter, chunk[start:] if start else chunk)
    _feed(tracker, splitter.flush())
    return tracker.state


_STARTUP_PIECE = 16 * 1024
_STARTUP_PIECE_MAX = 256 * 1024
# each of the tracker's ``steady_lines`` patterns: (a steady line, the next line end not followed by one, the
# next line end followed by one)
_STEADY = {
    pattern: (re.compile(pattern), re.compile(rb"\n(?!" + pattern + rb")"), re.compile(rb"\n(?=" + pattern + rb")"))
    for pattern in (STEADY_WHEN_READY, STEADY_WHEN_OVER)
}


def _feed_ready(tracker: StartupTracker, splitter: LineSplitter, chunk: bytes) -> None:
    """A chunk read once the server is ready: its complete lines without the splitter where it can (not a
    line carried over from the last chunk, not a line with a ``\r``, not the incomplete last line)."""
    pos, size = 0, len(chunk)
    while pos < size and tracker.steady_lines is not None:
        if splitter.idle:
            cr = chunk.find(b"\r", pos)
            end = chunk.rfind(b"\n", pos, cr if cr >= 0 else size)  # the last line end before any \r
            if end >= 0:
                _feed_serving(tracker, splitter, chunk, pos, end)
                pos = end + 1
                continue
        cut = chunk.find(b"\n", pos) + 1  # the splitter takes one line: carried over, or with a \r
        if not cut:
            break
        _feed(tracker, splitter.feed(chunk[pos:cut]))
        pos = cut
    if pos < size:
        _feed(tracker, splitter.feed(chunk[pos:] if pos else chunk))


def _feed(tracker: StartupTracker, items: list) -> None:
    if items:
        tracker.feed_items(items)
        tracker.drain_events()  # nobody listens here; don't let them pile up


def _count_lines(data: bytes) -> int:
    """The number of ``\n`` in ``data``, which ends with one (``BytesIO``'s readline finds them with memchr:
    3× faster than ``bytes.count``, which looks at each byte)."""
    return len(io.BytesIO(data).readlines())


def _feed_serving(tracker: StartupTracker, splitter: LineSplitter, data: bytes, pos: int, end: int) -> None:
    """Feed the complete lines of ``data[pos:end]`` (no ``\r``; ``data[end]`` is their last ``\n``)."""
    while True:
        steady = tracker.steady_lines
        if steady is not None and _STEADY[steady][0].match(data, pos, end) is not None:
            m = _STEADY[steady][1].search(data, pos, end)
            stop = m.start() if m is not None else end  # the run of steady lines ends here
            j = data.rfind(b"\n", pos, stop)
            last = pos if j < 0 else j + 1
            count = _count_lines(data[pos:last]) + 1 if last > pos else 1
            tracker.skip_steady_lines(count, tracker.steady_time(data, last))
        elif steady is not None:  # the lines up to the next steady one, decoded at once
            m = _STEADY[steady][2].search(data, pos, end)
            stop = m.start() if m is not None else end
            feed_line = tracker.feed_line
            for text in splitter.lines_text(data, pos, stop):
                feed_line(text)
        else:
            nl = data.find(b"\n", pos, end)
            stop = end if nl < 0 else nl
            tracker.feed_line(splitter.line_text(data[pos:stop]))
        tracker.drain_events()
        if stop >= end:
            return
        pos = stop + 1


# --- --follow ------------------------------------------------------------------------------------


class ChangePrinter:
    """Prints tracker events as they happen: phase changes, throttled progress, ready and failure.

    With ``as_json`` each change prints the whole state as one compact JSON line (JSON Lines); the last
    line printed is the final state.
    """

    def __init__(self, out: TextIO | None, as_json: bool = False) -> None:
        self.out = out
        self.as_json = as_json
        self._last_progress: dict[tuple[str, str], tuple[float, tuple[str, object]]] = {}

    @property
    def _stream(self) -> TextIO:
        assert self.out is not None, "a ChangePrinter made without a stream only makes ``lines``"
        return self.out

    def lines(self, events: Sequence[TrackerEvent], state: StartupState) -> list[str]:
        """The lines these events print (a phase change, throttled capture and weight progress, ready,
        failure), as plain text; also what `start --wait`, `switch` and `sweep` print while a server starts."""
        return [printable(line) for event in events if (line := self._describe(event, state)) is not None]

    def show(self, events: Sequence[TrackerEvent], state: StartupState) -> None:
        lines = [line for event in events if (line := self._describe(event, state)) is not None]
        if not lines:
            return
        if self.as_json:
            print_state(state, True, self._stream, compact=True)
        else:
            self._stream.write(printable("".join(line + "\n" for line in lines), newlines=True))
            self._stream.flush()

    def finish(self, state: StartupState) -> None:
        if self.as_json:
            print_state(state, True, self._stream, compact=True)
        else:
            self._stream.write("\n" + printable(format_summary(state), newlines=True))
            self._stream.flush()

    def _describe(self, event: TrackerEvent, state: StartupState) -> str | None:
        if isinstance(event, PhaseChanged):
            phase = event.phase
            if phase.status == "running":
                return f"{_clock(phase.started)}  {phase.name:<22} started"
            return f"{_clock(phase.ended)}  {phase.name:<22} {phase.status} {_paren(format_seconds(phase.elapsed_s))}"
        if isinstance(event, CaptureProgressed):
            capture = event.capture
            # A finished bar is not the end: SGLang's end line, with its own elapsed time, follows.
            status = "running" if capture.status == "done" and capture.awaiting_end else capture.status
            progress = f"{capture.done}/{capture.total}" if capture.total else str(capture.done)
            if not self._due(("capture", capture.graph + capture.label), (status, capture.done)):
                return None
            bs = f"  bs={capture.current_bs}" if capture.current_bs is not None and status == "running" else ""
            took = f" {_paren(format_seconds(capture.elapsed_s))}" if status != "running" else ""
            name = capture.label or capture.graph
            return f"{_clock(capture.ended or state.last_ts)}  capture {name:<14} {status:<7} {progress}{bs}{took}"
        if isinstance(event, WeightsProgressed):
            weights = event.weights
            shards = f"{weights.shards_done}/{weights.shards_total}" if weights.shards_total else ""
            if not self._due(("weights", weights.model), (weights.status, weights.shards_done)):
                return None
            detail = [shards]
            if weights.status == "done":
                detail += [weights.type or "", _gb("usage", weights.mem_usage_gb), _gb("avail", weights.avail_gb)]
            text = "  ".join(d for d in detail if d)
            return f"{_clock(weights.ended or state.last_ts)}  weights {weights.model:<14} {weights.status:<7} {text}".rstrip()
        if isinstance(event, ServerBecameReady):
            return f"{_clock(event.at)}  READY after {format_seconds(event.after_s) or '?'}"
        if isinstance(event, StartupFailed):
            error = event.error
            return f"{_clock(error.at)}  FAILED: {error.kind}: {error.message}"
        if isinstance(event, ServerStopped):
            return f"{_clock(event.at)}  stopped"
        return None

    def _due(self, key: tuple[str, str], status: tuple[str, object]) -> bool:
        """Status changes always print; progress within a status at most every PROGRESS_EVERY_S."""
        now = time.monotonic()
        last = self._last_progress.get(key)
        if last is not None:
            last_time, last_status = last
            if last_status == status:
                return False
            if status[0] == "running" == last_status[0] and now - last_time < PROGRESS_EVERY_S:
                return False
        self._last_progress[key] = (now, status)
        return True


# --- the readable summary ------------------------------------------------------------------------


def format_summary(state: StartupState, acceptance: ServingAcceptance | None = None) -> str:
    """The whole state as aligned plain text, the error (with its hint) and a symptom of the serving first."""
    out: list[str] = [_headline(state)]
    if state.error is not None:
        error = state.error
        where = f" during {error.phase}" if error.phase else ""
        out += ["", f"!! ERROR  {error.kind}{where}", *_wrap(error.message, "   ")]
        if error.hint:
            out += _wrap(error.hint, "   hint: ", "         ")
    if acceptance is not None and acceptance.alert is not None:
        algorithm = f" ({state.speculative_algorithm})" if state.speculative_algorithm else ""
        out += ["", f"!! ACCEPTANCE  {acceptance.alert}", *_wrap(
            f"Speculation{algorithm} was serving; {_window(acceptance)}, read as the Live view reads them.", "   "
        )]
    out += _earlier(state)
    if state.phases:
        rows = [
            [p.name, p.status, _clock(p.started), _clock(p.ended), format_seconds(p.elapsed_s)] for p in state.phases
        ]
        out += ["", "Phases", *_table(["phase", "status", "started", "ended", "took"], rows, right={4})]
    if state.weights:
        rows = [
            [
                w.model,
                w.status,
                w.type or "",
                (w.dtype or "").removeprefix("torch."),
                _shards(w.shards_done, w.shards_total),
                _num(w.mem_usage_gb, " GB"),
                _num(w.avail_gb, " GB"),
                format_seconds(w.elapsed_s),
            ]
            for w in state.weights
        ]
        header = ["weights", "status", "type", "dtype", "shards", "mem usage", "avail", "took"]
        out += ["", "Weights", *_table(header, rows, right={4, 5, 6, 7})]
    if state.captures:
        rows = [
            [
                c.label or c.graph,
                c.status,
                f"{c.done}/{c.total}" if c.total else str(c.done),
                _batch_sizes(c.batch_sizes),
                _num(c.mem_usage_gb, " GB"),
                _num(c.avail_gb, " GB"),
                format_seconds(c.elapsed_s),
            ]
            for c in state.captures
        ]
        header = ["CUDA graphs", "status", "progress", "batch sizes", "mem usage", "avail", "took"]
        out += ["", "Captures", *_table(header, rows, right={2, 4, 5, 6})]
    if state.kv_pools:
        rows = [
            [
                k.model,
                f"{k.tokens:,}" if k.tokens is not None else "",
                _num(k.k_size_gb, " GB"),
                _num(k.v_size_gb, " GB"),
                _num(k.total_gb, " GB"),
                (k.dtype or "").removeprefix("torch."),
            ]
            for k in state.kv_pools
        ]
        header = ["pool", "#tokens", "K size", "V size", "total", "dtype"]
        out += ["", "KV cache", *_table(header, rows, right={1, 2, 3, 4})]
    if state.memory:
        rows = [[m.step, _clock(m.at), _num(m.avail_gb, " GB")] for m in state.memory]
        out += ["", "Memory", *_table(["after step", "at", "avail"], rows, right={2})]
    facts = []
    if state.max_total_num_tokens is not None:
        facts.append(("max_total_num_tokens", f"{state.max_total_num_tokens:,}"))
    if state.ready_after_s is not None:
        ready = format_seconds(state.ready_after_s) + " from the log's first line"
        if state.ready_after_server_args_s not in (None, state.ready_after_s):
            ready += f" ({format_seconds(state.ready_after_server_args_s)} from server_args)"
        facts.append(("time to ready", ready))
    if state.sglang_timings:
        shown = ", ".join(f"{name} {format_seconds(seconds)}" for name, seconds in state.sglang_timings.items())
        facts.append(("SGLang's own timings", shown))
    if state.sglang_versions:
        facts.append(("SGLang version", f"{state.sglang_versions} (the versions whose lines these are)"))
    if state.weights_committed_s is not None:
        facts.append(("real weights", f"committed in {format_seconds(state.weights_committed_s)} after the capture"))
    if acceptance is not None:
        facts.append(("acceptance", f"{acceptance.accept_length:.2f} tokens per verify step ({_window(acceptance)})"))
    if facts:
        width = max(len(name) for name, _ in facts)
        out += [""] + [f"{name:<{width}}  {value}" for name, value in facts]
    return "\n".join(out) + "\n"


def _headline(state: StartupState) -> str:
    title = STATE_TITLES.get(state.state, state.state.upper())
    parts = [f"SGLang startup: {title}"]
    if state.state == "ready" and state.ready_after_s is not None:
        parts.append(f"after {format_seconds(state.ready_after_s)}")
    elif state.state == "stopped":
        notes = []
        if state.stop_cause == "died":
            notes.append("ended without a shutdown: the server died")
        if state.ready_after_s is not None:
            notes.append(f"had been ready after {format_seconds(state.ready_after_s)}")
        if notes:
            parts.append(f"({'; '.join(notes)})")
    elif state.state == "failed" and state.ready_after_s is not None:
        parts.append(f"(while serving; had been ready after {format_seconds(state.ready_after_s)})")
    elif state.state == "starting" and state.current_phase is not None:
        parts.append(f"(last phase: {state.current_phase.name}, {state.current_phase.status})")
    if state.first_ts is not None:
        dated = state.first_ts.year != CLOCK_ONLY_YEAR  # a clock-only log never said its date
        span = state.first_ts.strftime("%Y-%m-%d %H:%M:%S" if dated else "%H:%M:%S")
        end = state.ready_at or state.last_ts
        if end is not None and end != state.first_ts:
            span += f" → {end.strftime('%H:%M:%S')}"
        parts.append(f"  [log {span}]")
    parts.append(f"  {state.lines_seen:,} lines")
    return " ".join(parts)


def _earlier(state: StartupState) -> list[str]:
    """The launches the log held before the one summarised: how many, how many failed, and the last few."""
    count = state.earlier_launches
    if not count:
        return []
    kept = state.earlier
    failed = f", {state.earlier_failed:,} failed" if state.earlier_failed else ""
    last = f"; the last {len(kept)}" if len(kept) < count else ""
    rows = []
    for launch in kept:
        if launch.error is not None:
            where = f" during {launch.error.phase}" if launch.error.phase else ""
            what = f"{launch.error.kind}{where}: {launch.error.message}"
        else:
            what = f"had been ready after {format_seconds(launch.ready_after_s)}" if launch.ready_after_s else ""
        rows.append([_clock(launch.launched_at), launch.state, what[:160]])
    title = f"Earlier launches in this log: {count:,}{failed} (the summary is the last launch's){last}"
    return ["", title, *_table(["launched", "ended", "how"], rows)]


def _window(acceptance: ServingAcceptance) -> str:
    """The decode lines an acceptance was read over: how many, their times, and the window they are the end of."""
    count = acceptance.decode_lines
    text = f"{count:,} decode line{'s' if count != 1 else ''}"
    if acceptance.first is not None and acceptance.last is not None:
        text += f", {_clock(acceptance.first)} → {_clock(acceptance.last)}"
    return f"{text}: the last {format_seconds(acceptance.window_s)} of them"


def _wrap(text: str, first: str, rest: str | None = None) -> list[str]:
    width = min(max(shutil.get_terminal_size((100, 24)).columns, 60), 120)
    return textwrap.wrap(
        text, width, initial_indent=first, subsequent_indent=rest if rest is not None else first,
        break_long_words=False, break_on_hyphens=False,
    ) or [first.rstrip()]


def _table(header: list[str], rows: list[list[str]], right: Collection[int] = ()) -> list[str]:
    """Aligned columns (two spaces apart), indented by two; columns in ``right`` are right-aligned."""
    return aligned_rows([header, *rows], right=right, indent="  ")


def _clock(ts: datetime | None) -> str:
    return ts.strftime("%H:%M:%S") if ts is not None else "--:--:--"


def _paren(text: str) -> str:
    return f"({text})" if text else ""


def _num(value: float | None, unit: str = "") -> str:
    return f"{value:.2f}{unit}" if value is not None else ""


def _gb(label: str, value: float | None) -> str:
    return f"{label} {value:.2f} GB" if value is not None else ""


def _shards(done: int | None, total: int | None) -> str:
    if total:
        return f"{done or 0}/{total}"
    return ""


def _batch_sizes(sizes: list[int]) -> str:
    if not sizes:
        return ""
    if len(sizes) <= 8:
        return ", ".join(map(str, sizes))
    return f"{len(sizes)} sizes, {min(sizes)}…{max(sizes)}"


def print_state(
    state: StartupState,
    as_json: bool,
    out: TextIO,
    compact: bool = False,
    acceptance: ServingAcceptance | None = None,
) -> None:
    """The summary as text or JSON: ``StartupState.to_json()`` with the serving's ``acceptance`` (or null)."""
    if as_json:
        doc = state.to_json()
        doc["acceptance"] = acceptance.to_json() if acceptance is not None else None
        out.write(strict_json(doc, indent=None if compact else 2) + "\n")
    else:
        out.write(printable(format_summary(state, acceptance), newlines=True))
    out.flush()
