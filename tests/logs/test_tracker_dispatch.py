"""The tracker's dispatcher hands each milestone to the part that reads it, and lines that share a literal head
stay told apart: `patterns.WARMUP_FAILED` holds both the Python server's `Initialization failed. warmup error`
(whose traceback follows it and says why) and 0.5.22+'s Rust server's one line `startup warmup failed`."""

from __future__ import annotations

import pytest

from specmon.logs import patterns
from specmon.logs.tracker import StartupTracker

TS = "[2025-10-01 12:00:00]"
SERVING = [
    f"{TS} server_args=ServerArgs(model_path='m')",
    f"{TS} Load weight begin. avail mem=70.00 GB",
    f"{TS} max_total_num_tokens=1000, avail mem=10.00 GB",
    f"{TS} INFO:     Uvicorn running on http://127.0.0.1:30000",
]
PYTHON_HEAD = f"{TS} Initialization failed. warmup error: Traceback (most recent call last):"
RUST_LINE = f"{TS} startup warmup failed status=502 error=upstream connect error"


def feed(*lines: str) -> StartupTracker:
    tracker = StartupTracker()
    for line in (*SERVING, *lines):
        tracker.feed_line(line)
    return tracker


def test_both_servers_lines_share_the_heads_the_dispatcher_tells_apart():
    heads = patterns.WARMUP_FAILED
    assert any(head.startswith("Initialization failed. warmup error") for head in heads)
    assert any(head.startswith("startup warmup") for head in heads)


@pytest.mark.parametrize(
    "traceback",
    [
        ["ValueError: boom"],  # no frame: only the open traceback makes this line its error
        ['  File "/x/server.py", line 1, in f', "    g()", "ValueError: boom"],
        ['  File "/x/server.py", line 1, in f', "", "ValueError: boom", "Killed"],
    ],
    ids=["no-frame", "frames", "then-killed"],
)
def test_the_python_servers_warmup_failure_is_its_tracebacks_error(traceback):
    error = feed(PYTHON_HEAD, *traceback).state.error
    assert error is not None
    assert (error.kind, error.message, error.phase) == ("warmup_failed", "ValueError: boom", "warmup")


def test_the_python_servers_warmup_failure_without_a_traceback_is_the_line():
    line = f"{TS} Initialization failed. warmup error: connection refused"
    error = feed(line).state.error
    assert error is not None
    assert (error.kind, error.phase) == ("warmup_failed", "warmup")
    assert error.message.startswith("Initialization failed. warmup error: connection refused")


def test_the_rust_servers_warmup_failure_is_its_one_line_and_opens_no_traceback():
    tracker = feed(RUST_LINE, "ValueError: not this server's")
    error = tracker.state.error
    assert error is not None
    assert (error.kind, error.phase) == ("warmup_failed", "warmup")
    assert error.message == RUST_LINE.removeprefix(f"{TS} ")
    assert [phase.name for phase in tracker.state.phases][-1] == "warmup"
