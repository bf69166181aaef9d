"""The app's log feed counts steady serving lines once ready, as `log-summary` does: the tracker's state and each
line's highlight kind must be exactly those of feeding every line (the app follows 10,000 lines a second)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from specmon.logs.follower import read_items
from specmon.logs.tracker import StartupTracker
from specmon.view.log_feed import LogFeed
from tests.test_log_summary_serving_fast import mixed_log, serving

LOGS = Path(__file__).parent / "fixtures" / "logs"


def every_line(data: bytes, chunk_bytes: int) -> tuple[dict, list]:
    tracker, kinds = StartupTracker(), []
    for items in read_items(io.BytesIO(data), chunk_bytes=chunk_bytes):
        kinds += tracker.feed_items(items)
    return {"json": tracker.state.to_json(), "recognized": tracker.state.lines_recognized, "clock": tracker.clock}, kinds


def through_feed(data: bytes, chunk_bytes: int) -> tuple[dict, list]:
    feed, kinds = LogFeed(max_pending=1 << 20), []
    for items in read_items(io.BytesIO(data), chunk_bytes=chunk_bytes):
        feed.feed(items)
        batch = feed.take()
        kinds += [(text, kind if kind != "poll" else None) for text, kind in zip(batch.lines, batch.kinds, strict=True)]
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
