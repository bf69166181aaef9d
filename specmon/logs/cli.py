"""`specmon log-summary PATH [--json] [--follow]`: the handler, and the printing of --follow."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from typing import TextIO

from specmon import exits
from specmon.inputs import InputError, open_regular
from specmon.logs.acceptance import ServingTail, serving_acceptance
from specmon.logs.follower import DEFAULT_CHUNK_BYTES, LogFollower, LogItem, check_followable, read_items
from specmon.logs.model import StartupState
from specmon.logs.summary import (
    NOT_SGLANG_EXIT,
    ChangePrinter,
    exit_code,
    is_sglang_log,
    print_state,
    summarize_stream,
)
from specmon.logs.tracker import StartupTracker
from specmon.text import printable

FOLLOW_POLL_S = 0.1
FAILURE_GRACE_S = 0.5  # after a failure, keep reading the rest of the traceback until quiet this long
FAILURE_GRACE_MAX_S = 5.0


def run_log_summary(args: argparse.Namespace) -> int:
    """The `log-summary` handler: 0 unless the log shows a failure (1); 2 when the file cannot be read; 3 when
    it holds no SGLang startup line."""
    try:
        if args.follow:
            if args.path != "-":
                check_followable(args.path)
            return _run_follow(args.path, as_json=args.json, out=sys.stdout)
        tracker = StartupTracker()
        tail = ServingTail()
        if args.path == "-":
            summarize_stream(sys.stdin.buffer, tracker, tail=tail)
        else:
            with open_regular(args.path, what="log file") as stream:
                summarize_stream(stream, tracker, tail=tail)
    except InputError as exc:
        print(f"specmon log-summary: {printable(exc)} (pipe a log to stdin: `-`)", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"specmon log-summary: {printable(exc.filename or args.path)}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    state = tracker.state
    if not is_sglang_log(state):
        return _not_sglang(args.path, state.lines_seen, args.json, state)
    print_state(state, args.json, sys.stdout, acceptance=serving_acceptance(tail.lines()))
    return exit_code(state)


def _not_sglang(path: str, lines: int, as_json: bool, state: StartupState) -> int:
    name = "stdin" if path == "-" else path
    if as_json:
        print_state(state, True, sys.stdout)
    print(f"specmon log-summary: no SGLang startup lines in {name} ({lines:,} lines read)", file=sys.stderr)
    return NOT_SGLANG_EXIT


def _run_follow(path: str, as_json: bool, out: TextIO) -> int:
    tracker = StartupTracker()
    printer = ChangePrinter(out, as_json)
    failed_at: float | None = None
    try:
        for items in _follow_batches(path):
            if items:
                ready = _feed_until_ready(tracker, items)
                printer.show(tracker.drain_events(), tracker.state)
                if ready:
                    break
            state = tracker.state.state
            if state == "failed":
                failed_at = failed_at or time.monotonic()
                waited = time.monotonic() - failed_at
                if (not items and waited >= FAILURE_GRACE_S) or waited >= FAILURE_GRACE_MAX_S:
                    break
    except KeyboardInterrupt:
        printer.finish(tracker.state)
        return exits.EXIT_SIGINT
    if path == "-" and not is_sglang_log(tracker.state):  # stdin ended without one SGLang line
        return _not_sglang(path, tracker.state.lines_seen, as_json, tracker.state)
    printer.finish(tracker.state)
    return exit_code(tracker.state)


def _feed_until_ready(tracker: StartupTracker, items: list[LogItem]) -> bool:
    """Feed items up to the one that makes the server ready; True if it did."""
    for kind, text in items:
        if kind == "line":
            tracker.feed_line(text)
            if tracker.status in ("ready", "stopped"):
                return True
        elif kind == "frame":
            tracker.feed_frame(text)
        else:
            tracker.feed_frames(text)  # type: ignore[arg-type]
    return False


def _follow_batches(path: str) -> Iterator[list[LogItem]]:
    """Batches of items as the log grows; an empty batch means "nothing new for a moment"."""
    if path == "-":
        yield from read_items(sys.stdin.buffer, DEFAULT_CHUNK_BYTES, frame_runs=True)
        return
    announced = False
    with LogFollower(path, frame_runs=True) as follower:
        while True:
            items = follower.poll()
            if not follower.is_open and not announced:
                print(f"specmon log-summary: waiting for {printable(path)} to appear…", file=sys.stderr, flush=True)
                announced = True
            yield items
            if not items:
                time.sleep(FOLLOW_POLL_S)
