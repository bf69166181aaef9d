"""A progress bar's frames each replace the last frame's event: the tracker copies a capture (or weight load) for
its event once, when another event follows or the events are drained, not once per frame (log-summary --follow
on capture frames)."""

from __future__ import annotations

import io
from dataclasses import replace
from pathlib import Path

import pytest

from specmon.logs import tracker as tracker_module
from specmon.logs.follower import read_items
from specmon.logs.model import CaptureProgressed, WeightsProgressed
from specmon.logs.tracker import StartupTracker

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
BEGIN = ("[2026-08-01 23:43:38] Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=16, "
         "bs=[{sizes}], avail mem=7.27 GB")


def frame(bs: int, done: int, total: int) -> str:
    return f"Capturing batches (bs={bs} avail_mem={7 - done / 100:.2f} GB):  {100 * done // total}%| | {done}/{total} [00:0{done % 10}<00:02,  2.37it/s]"


def _capturing(total: int) -> StartupTracker:
    tracker = StartupTracker()
    tracker.feed_line(BEGIN.format(sizes=", ".join(str(b) for b in range(1, total + 1))))
    return tracker


def test_one_copy_per_drain_not_per_frame(monkeypatch):
    copies = []
    real = tracker_module.replace
    monkeypatch.setattr(tracker_module, "replace", lambda obj, **kw: copies.append(type(obj).__name__) or real(obj, **kw))
    tracker = _capturing(500)
    tracker.drain_events()
    copies.clear()
    for done in range(400):
        tracker.feed_frame(frame(500 - done, done, 500))
    events = tracker.drain_events()
    assert copies == ["Capture"]
    progress = [e for e in events if isinstance(e, CaptureProgressed)]
    assert len(progress) == 1 and progress[0].capture.done == 399 and progress[0].capture.current_bs == 101


def test_drained_events_are_snapshots_of_their_moment():
    tracker = _capturing(8)
    tracker.feed_frame(frame(8, 3, 8))
    first = [e for e in tracker.drain_events() if isinstance(e, CaptureProgressed)][-1].capture
    tracker.feed_frame(frame(5, 6, 8))
    assert first.done == 3 and first.current_bs == 8  # the later frame changed the live capture, not the event
    second = [e for e in tracker.drain_events() if isinstance(e, CaptureProgressed)][-1].capture
    assert second.done == 6 and second is not tracker.state.captures[-1]
    assert second.batch_sizes is not tracker.state.captures[-1].batch_sizes


class _CopyPerFrame(StartupTracker):
    """The tracker as it was: a copy for every progress event, at once."""

    def _capture_event(self, capture):
        event = CaptureProgressed(capture=replace(capture, batch_sizes=list(capture.batch_sizes)))
        events = self._events
        if events and isinstance(events[-1], CaptureProgressed):
            last = events[-1].capture
            if last.graph == capture.graph and last.role == capture.role:
                events[-1] = event
                return
        self._emit(event)

    def _weights_event(self, weight):
        event = WeightsProgressed(weights=replace(weight))
        events = self._events
        if events and isinstance(events[-1], WeightsProgressed) and events[-1].weights.model == weight.model:
            events[-1] = event
            return
        self._emit(event)


@pytest.mark.parametrize("chunk_bytes", [64, 4096])
@pytest.mark.parametrize("path", sorted(LOGS.glob("*.log")), ids=lambda p: p.name[:40])
def test_the_events_are_those_of_a_copy_per_frame(path, chunk_bytes):
    data = path.read_bytes()
    lazy, eager = StartupTracker(), _CopyPerFrame()
    for items in read_items(io.BytesIO(data), chunk_bytes=chunk_bytes):
        lazy.feed_items(items)
        eager.feed_items(items)
        assert lazy.drain_events() == eager.drain_events()
