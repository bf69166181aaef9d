"""The app's log feed counts steady serving lines once ready, as `log-summary` does: the tracker's state and each
line's highlight kind must be exactly those of feeding every line (the app follows 10,000 lines a second)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specmon.logs.follower import read_items
from specmon.logs.tracker import StartupTracker
from specmon.view import log_feed
from specmon.view.log_feed import LogFeed, SteadyLines, with_poll_kind
from tests.logs.test_log_summary_serving_fast import mixed_log, serving

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"


def every_line(data: bytes, chunk_bytes: int) -> tuple[dict, list]:
    tracker, kinds = StartupTracker(), []
    for items in read_items(io.BytesIO(data), chunk_bytes=chunk_bytes):
        kinds += [(text, with_poll_kind(text, kind)) for text, kind in tracker.feed_items(items)]
    return {"json": tracker.state.to_json(), "recognized": tracker.state.lines_recognized, "clock": tracker.clock}, kinds


def through_feed(data: bytes, chunk_bytes: int) -> tuple[dict, list]:
    feed, kinds = LogFeed(max_pending=1 << 20), []
    for items in read_items(io.BytesIO(data), chunk_bytes=chunk_bytes):
        feed.feed(items)
        batch = feed.take()
        kinds += list(zip(batch.lines, batch.kinds, strict=True))
    tracker = feed.tracker
    return {"json": tracker.state.to_json(), "recognized": tracker.state.lines_recognized, "clock": tracker.clock}, kinds


@pytest.mark.parametrize("chunk_bytes", [1, 113, 4096, 1 << 20])
def test_counting_steady_lines_keeps_state_and_kinds(chunk_bytes, monkeypatch):
    skipped = []
    original = StartupTracker.skip_steady_lines
    monkeypatch.setattr(StartupTracker, "skip_steady_lines", lambda self, n: (skipped.append(n), original(self, n))[1])
    data = mixed_log()
    assert through_feed(data, chunk_bytes) == every_line(data, chunk_bytes)
    if chunk_bytes == 1 << 20:
        assert sum(skipped) > 300  # most serving lines were only counted


@pytest.mark.parametrize("path", sorted(LOGS.glob("*.log")), ids=lambda p: p.name[:40])
def test_every_fixture_log_then_serving_lines(path):
    data = path.read_bytes().rstrip(b"\n") + b"\n" + "\n".join(serving(50, 30)).encode() + b"\n"
    assert through_feed(data, 4096) == every_line(data, 4096)


def test_the_kinds_compared_include_the_apps_own_polling():
    _, kinds = through_feed(mixed_log(), 1 << 20)
    assert any(kind == "poll" for _, kind in kinds)


HEAD_PIECES = st.sampled_from([
    "[2026-08-01 23:50:03] ", "[2026-08-01 23:50:04]", "[2026-08-01 23:50:03.123 DP0 TP0 EP0] ", "[2026-08-01 23:5",
    "[2026-08-01 23:50:03 DP1 TP0] ", "[2026-08-01 23:50:03 gpu_id=3] ", "Decode batch", "Prefill batch", "Decode",
    "INFO:     ", "INFO:\t", "INFO server_args.py:12: ", "INFO", ", #running-req: 1", "server_args=ServerArgs(", " ",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(HEAD_PIECES, max_size=5).map("".join), st.integers(0, 6)).map(
    lambda cut: cut[0][: len(cut[0]) - cut[1]]), max_size=30))  # pieces, and their prefixes
def test_remembered_heads_tell_steady_lines_as_the_pattern_does(texts):
    steady = SteadyLines()
    for text in texts:
        assert (text.startswith(steady.heads) or steady.match(text)) == (log_feed._STEADY.match(text) is not None)
        assert len(steady.heads) <= SteadyLines.KEPT


def test_the_pattern_runs_once_per_head_not_once_per_line(monkeypatch):
    calls = []
    pattern = log_feed._STEADY
    monkeypatch.setattr(log_feed, "_STEADY", type("Counted", (), {"match": lambda self, t: (calls.append(t), pattern.match(t))[1]})())
    lines = [f"[2026-08-01 23:50:0{i // 4} DP{i % 2} TP0] Decode batch, #running-req: {i}" for i in range(40)]
    steady = SteadyLines()
    assert all(text.startswith(steady.heads) or steady.match(text) for text in lines)
    assert len(calls) == 20  # 10 seconds, 2 ranks


@pytest.mark.parametrize("line", [
    "[2026-08-01 23:50:03] Decode batch, #running-req: 1",
    "[2026-08-01 23:50:03.123 DP0 TP0 EP0] Prefill batch, #new-seq: 1",
    '[2026-08-01 23:50:03 gpu_id=3] INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK',
    "[2026-08-01 23:50:03] INFO server_args.py:12: anything",
])
def test_no_shorter_line_passes_for_steady_by_a_remembered_head(line):
    for cut in range(len(line) + 1):
        steady = SteadyLines()
        assert steady.match(line)
        text = line[:cut] + "x"
        assert (text.startswith(steady.heads) or steady.match(text)) == (log_feed._STEADY.match(text) is not None)
