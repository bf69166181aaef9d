"""Property-based fuzzing: no input makes the tracker raise, and its state stays coherent."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specmon.logs.tracker import StartupTracker

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
REAL_PIECES = sorted(
    {
        piece
        for path in [*LOGS.glob("*.log"), *(LOGS / "synthetic").glob("*.log")]
        for line in path.read_text(encoding="utf-8", errors="replace").split("\n")
        for piece in line.split("\r")
        if piece.strip()
    }
)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check(tracker: StartupTracker) -> None:
    state = tracker.state
    data = state.to_json()
    json.dumps(data)
    assert data["state"] in ("starting", "ready", "failed", "stopped")
    assert (state.state == "failed") == (state.error is not None)
    names = [p.name for p in state.phases]
    assert len(names) == len(set(names))
    assert sum(p.status == "running" for p in state.phases) <= 1
    for capture in state.captures:
        assert capture.total is None or 0 <= capture.done <= capture.total
    assert len({(c.graph, c.role) for c in state.captures}) == len(state.captures)
    assert len({w.model for w in state.weights}) == len(state.weights)
    tracker.drain_events()


@FUZZ
@given(st.lists(st.tuples(st.booleans(), st.text(max_size=300)), max_size=40))
def test_arbitrary_text_never_raises(items: list[tuple[bool, str]]) -> None:
    tracker = StartupTracker()
    for is_frame, text in items:
        if is_frame:
            tracker.feed_frame(text)
        else:
            tracker.feed_line(text)
    check(tracker)


@FUZZ
@given(
    st.lists(
        st.tuples(
            st.sampled_from(REAL_PIECES),
            st.integers(min_value=0, max_value=400),
            st.integers(min_value=0, max_value=400),
            st.sampled_from(["line", "frame", "glued"]),
        ),
        max_size=60,
    )
)
def test_mixes_of_real_line_fragments_never_raise(items: list[tuple[str, int, int, str]]) -> None:
    tracker = StartupTracker()
    previous = ""
    for piece, start, stop, how in items:
        fragment = piece[min(start, stop) : max(start, stop)] if start != stop else piece
        if how == "frame":
            tracker.feed_frame(fragment)
        elif how == "glued":
            tracker.feed_line(previous + fragment)
        else:
            tracker.feed_line(fragment)
        previous = fragment
        check(tracker)


@FUZZ
@given(
    st.lists(
        st.builds(
            "Capturing batches (bs={} avail_mem={} GB): {}%|{}| {}/{} [{}<{}, {}]".format,
            st.integers(-5, 10**6), st.floats(allow_nan=True), st.integers(0, 100), st.text(max_size=12),
            st.integers(-5, 10**12), st.integers(-5, 10**12), st.text(max_size=8), st.text(max_size=8),
            st.text(max_size=8),
        ),  # fmt: skip
        max_size=30,
    )
)
def test_arbitrary_progress_frames_never_raise(frames: list[str]) -> None:
    tracker = StartupTracker()
    tracker.feed_line("[2025-10-01 12:00:00] Capture cuda graph begin. This can take up to several minutes. avail mem=1.00 GB")
    for frame in frames:
        tracker.feed_frame(frame)
        tracker.feed_line(frame)
    check(tracker)
