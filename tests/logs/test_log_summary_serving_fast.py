"""`summarize_stream` skips runs of steady serving lines once ready: the state must be exactly the one that
feeding every line gives (issue 12, log-summary at ≥ 0.25 of a bare loop's speed)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from specmon.logs.follower import read_items
from specmon.logs.summary import summarize_stream
from specmon.logs.tracker import STEADY_WHEN_OVER, STEADY_WHEN_READY, StartupTracker

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
STARTUP = LOGS / "03-laguna-int4-dflash-v0.5.16-ready.log"
DECODE = (
    "Decode batch, #running-req: 1, #full token: 181, full token usage: 0.00, #swa token: 181, swa token usage: "
    "0.00, accept len: 2.75, accept rate: 0.12, cuda graph: True, gen throughput (token/s): 17.39, #queue-req: 0"
)
PREFILL = "Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, full token usage: 0.00, #running-req: 0"
ACCESS = 'INFO:     127.0.0.1:34504 - "POST /generate HTTP/1.1" 200 OK'


def reference(data: bytes) -> dict:
    """Every line through the splitter and ``feed_line``: the behaviour the fast path must keep."""
    tracker = StartupTracker()
    for items in read_items(io.BytesIO(data), chunk_bytes=4096):
        tracker.feed_items(items)
        tracker.drain_events()
    return _facts(tracker)


def fast(data: bytes, chunk_bytes: int) -> dict:
    tracker = StartupTracker()
    summarize_stream(io.BytesIO(data), tracker, chunk_bytes=chunk_bytes)
    return _facts(tracker)


def _facts(tracker: StartupTracker) -> dict:
    state = tracker.state
    return {"json": state.to_json(), "recognized": state.lines_recognized, "clock": tracker.clock}


def serving(minute: int, n: int) -> list[str]:
    out = []
    for i in range(n):
        ts = f"[2026-08-01 23:{minute:02d}:{i % 60:02d}]"
        out += [f"{ts} {PREFILL}", f"{ts} {DECODE}", f"{ts} {DECODE}", f"{ts} {ACCESS}"]
    return out


def mixed_log() -> bytes:
    """A real startup, then serving lines with every kind of line the fast path must not skip among them."""
    odd = [
        "[2026-08-01 23:50:01] WARNING: a warning while serving",
        "[2026-08-01 23:50:02 TP0] Decode batch, #running-req: 1, cuda graph: True",
        "[2026-08-01 23:50:03.123 DP0 TP0 EP0] INFO:     127.0.0.1:1 - \"GET /health HTTP/1.1\" 200 OK",
        "[23:50:04] Decode batch, a short clock",
        "[TP0] Decode batch, tags only",
        "Decode batch, no prefix at all",
        "[2026-08-01 23:50:05] INFO:",
        "[2026-08-01 23:50:06]  Decode batch, two spaces",
        "[2026-08-01 23:50:07]Decode batch, no space",
        "[2026-08-01 23:50:08] INFO scheduler.py:12: an INFO line of the newer format",
        "[2026-08-01 23:50:09] \x1b[32mDecode batch\x1b[0m, coloured",
        "[2026-08-01 23:50:10] Decode batch, invalid utf-8 \xff\xfe",
        "[2026-08-01 23:50:11] ERROR: something went wrong",
        "[2026-08-01 23:50:12] Decode batch, " + "x" * 70_000,
        "Traceback (most recent call last):",
        '  File "/sglang/srt/managers/scheduler.py", line 1, in run',
        "RuntimeError: boom after ready",
        "",
        "[2026-08-01 23:50:13] Decode batch, progress\r 50%|#####     | 5/10\r100%|##########| 10/10",
        "[2026-08-02 00:00:00] Decode batch, the next day",
    ]
    lines = serving(46, 40)
    for k, line in enumerate(odd):
        lines += [line, *serving(47 + k % 10, 3)]
    lines += serving(58, 20) + ["[2026-08-02 00:01:00] SIGTERM received. signum=None frame=None"] + serving(59, 5)
    lines += ["[2026-08-02 00:01:01] kill_process_tree called"] + serving(59, 2)
    body = "\n".join(lines).encode().replace("\xff\xfe".encode(), b"\xff\xfe")  # real invalid UTF-8
    raw = STARTUP.read_bytes()  # the startup to its ready line (the fixture goes on to a shutdown)
    startup = raw[: raw.index(b"\n", raw.index(b"The server is fired up")) + 1]
    return startup + body + b"\n"


@pytest.mark.parametrize("chunk_bytes", [1, 7, 113, 4096, 1 << 20])
def test_the_fast_path_gives_the_state_of_feeding_every_line(chunk_bytes, monkeypatch):
    data = mixed_log()
    assert b"\xff\xfe" in data
    skipped = []
    original = StartupTracker.skip_steady_lines
    monkeypatch.setattr(
        StartupTracker, "skip_steady_lines", lambda self, n, *time: (skipped.append(n), original(self, n, *time))[1]
    )
    assert fast(data, chunk_bytes) == reference(data)
    if chunk_bytes == 1 << 20:
        assert sum(skipped) > 300  # most of the ~560 serving lines were skipped


FIXTURES = Path(__file__).parents[1] / "fixtures"
# every SGLang server log under tests/ (the NCCL worker log of the GPU rehearsal is not one)
SGLANG_LOGS = sorted([*FIXTURES.glob("logs/**/*.log"), *FIXTURES.glob("real-sglang-*/**/*.log")])


@pytest.mark.parametrize("path", SGLANG_LOGS, ids=lambda p: str(p.relative_to(FIXTURES))[:60])
def test_every_fixture_log_gives_the_same_state(path):
    data = path.read_bytes()
    assert fast(data, 4096) == reference(data)
    no_newline = data.rstrip(b"\n") + b"\n" + "\n".join(serving(50, 30)).encode()  # an unfinished last line
    assert fast(no_newline, 1000) == reference(no_newline)


@pytest.mark.parametrize("chunk_bytes", [997, 1 << 20])
def test_all_fixture_logs_in_one_give_the_same_state(chunk_bytes):
    """Each log's `server_args` line begins a launch of its own (the state is the last one's, the earlier ones
    are counted): startups, failures and stops one after another, with the lines that must still be read
    (errors, tracebacks, kills) among steady lines that are skipped."""
    data = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in SGLANG_LOGS)
    expected = reference(data)
    launches = len(re.findall(rb"^\[[^]\n]*\] ?server_args=(?:ServerArgs\(|\{)", data, re.MULTILINE))
    assert launches > 30 and expected["json"]["earlier_launches"]["count"] == launches - 1
    assert expected["json"]["earlier_launches"]["failed"] >= 5
    assert fast(data, chunk_bytes) == expected
    for start in range(1, len(SGLANG_LOGS), 7):  # other orders: another log ends the startup
        rotated = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in SGLANG_LOGS[start:] + SGLANG_LOGS[:start])
        assert fast(rotated, chunk_bytes) == reference(rotated)


@pytest.mark.parametrize("end", [
    "[2026-08-01 23:50:00] SIGTERM received. signum=None frame=None",  # stopped
    "[2026-08-01 23:50:00] Scheduler hit an exception: Traceback (most recent call last):\nRuntimeError: boom",  # failed
])
def test_steady_lines_after_the_end_change_nothing_but_the_count_and_clock(end):
    """What ``STEADY_WHEN_OVER`` matches is read after a failure or a stop as nothing but a line at its time."""
    raw = STARTUP.read_bytes()
    startup = raw[: raw.index(b"\n", raw.index(b"The server is fired up")) + 1].decode()
    every, skipping = StartupTracker(), StartupTracker()
    for tracker in (every, skipping):
        for line in (startup + end).splitlines():
            tracker.feed_line(line)
        assert tracker.steady_lines == STEADY_WHEN_OVER, tracker.status
    over = re.compile(STEADY_WHEN_OVER)
    lines = [f"[2026-08-01 23:51:0{i}] {text}" for i, text in enumerate(
        [DECODE, PREFILL, "Decode batch, Traceback (most recent call last):", "Prefill batch, Killed",
         "Decode batch, CUDA error: an illegal memory access was encountered", "Decode batch, exit code -9"])]
    lines += ["[2026-08-01 23:51:09.5 DP0 TP0 EP0] Decode batch, address already in use"]
    for line in lines:
        assert over.match(line.encode())
        assert every.feed_line(line) is None
        every.drain_events()
    skipping.skip_steady_lines(len(lines) - 1)
    skipping.feed_line(lines[-1])
    assert _facts(every) == _facts(skipping)
    assert every.state.last_ts.minute == 51
    for line in [f"[2026-08-01 23:51:00] {ACCESS}", "[23:51:00] Decode batch", "[2026-08-01 23:51:00]  Decode batch"]:
        assert over.match(line.encode()) is None, line


def test_steady_lines_are_a_subset_of_what_the_tracker_ignores_once_ready():
    steady = re.compile(STEADY_WHEN_READY)
    for line in serving(1, 2):
        assert steady.match(line.encode())
    for line in ["[2026-08-01 23:50:05] INFO:", "[23:50:04] Decode batch", "[TP0] Decode batch", "Decode batch",
                 "[2026-08-01 23:50:06]  Decode batch", "[2026-08-01 23:50:01] WARNING: x"]:
        assert steady.match(line.encode()) is None, line


def test_the_time_of_a_skipped_run_is_the_time_its_last_line_is_read_at():
    """A run of steady lines is counted, and the clock set from its last line's match: the time that
    ``parse_prefix`` reads from the same line."""
    from specmon.logs.patterns import parse_prefix

    heads = ["[2026-08-01 23:50:03]", "[2026-08-01 23:50:03] ", "[2026-08-01 23:50:03.123 DP0 TP0 EP0] ",
             "[2026-08-01 23:50:03,5 TP1] ", "[2026-08-01 23:50:03.123456 gpu_id=3] ", "[2026-08-01 23:50:03 TP0]"]
    for pattern in (STEADY_WHEN_READY, STEADY_WHEN_OVER):
        for head in heads:
            line = head + DECODE
            assert re.compile(pattern).match(line.encode()) is not None
            assert StartupTracker.steady_time(b"x\n" + line.encode(), 2) == parse_prefix(line)[0], line
