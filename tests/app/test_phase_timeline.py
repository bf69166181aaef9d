"""The phase strip: a phase (mark, label, time) never breaks across lines, at any width."""

from __future__ import annotations

import pytest
from textual.app import App

from specmon.logs.tracker import StartupTracker
from specmon.widgets.phase_timeline import PhaseTimeline, phase_labels
from tests.support.app_harness import READY_LOG, fixture_bytes, wait_for


def _ready_phases():
    tracker = StartupTracker()
    for line in fixture_bytes(READY_LOG, until="SIGTERM received").decode().splitlines():
        tracker.feed_line(line)
    return tracker.state.phases


def _phase_texts(timeline: PhaseTimeline) -> list[str]:
    return [phase.plain for phase in timeline.row.phases]


class _TimelineApp(App):
    def compose(self):
        yield PhaseTimeline()


async def test_each_line_holds_whole_phases_at_every_width():
    phases = _ready_phases()
    assert len(phases) > 6
    app = _TimelineApp()
    async with app.run_test(size=(120, 20)):
        timeline = app.query_one(PhaseTimeline)
        timeline.show(phases)
        whole = _phase_texts(timeline)
        assert any(" " in text.split(" ", 1)[1] for text in whole), "some phase has a label and a time"
        widest = max(len(text) for text in whole)
        for width in range(widest, 121):
            lines = [line.plain for line in timeline.row.lines(width)]
            assert all(len(line) <= width for line in lines), (width, lines)
            rebuilt = [part for line in lines for part in line.split("  ")]
            assert rebuilt == whole, (width, lines)


async def test_the_widget_is_as_tall_as_its_lines_at_80_columns():
    app = _TimelineApp()
    async with app.run_test(size=(80, 20)) as pilot:
        timeline = app.query_one(PhaseTimeline)
        timeline.show(_ready_phases())

        def shown() -> list[str]:
            return [strip.text.rstrip() for strip in app.screen._compositor.render_strips()][: timeline.size.height]

        def rebuilt() -> list[str]:
            return [part for line in shown() for part in line.split("  ")]

        assert await wait_for(pilot, lambda: rebuilt() == _phase_texts(timeline)), shown()
        assert len(shown()) >= 2 and all(shown()), shown()


def _state(log: str):
    tracker = StartupTracker()
    for line in fixture_bytes(log).decode(errors="replace").splitlines():
        tracker.feed_line(line)
    return tracker.state


@pytest.mark.parametrize(
    ("log", "shown"),
    [
        ("h200-0.5.16-standalone-ready.log", "verify graphs"),  # "Capture cuda graph begin" names target verify
        ("h200-0.5.16-plain-ready.log", "decode graphs"),
        ("01-qwq32b-tp4-l4-v0.4.3-ready.log", "target graphs"),  # an older log does not say which
    ],
)
async def test_the_target_capture_is_named_from_what_the_log_says(log, shown):
    state = _state(log)
    app = _TimelineApp()
    async with app.run_test(size=(200, 10)):
        timeline = app.query_one(PhaseTimeline)
        timeline.show(state.phases, labels=phase_labels(state))
        target = [text for text in _phase_texts(timeline) if text.startswith("✔ ") and "graphs" in text]
        assert any(text.startswith(f"✔ {shown} ") for text in target), target
        assert not any(text.startswith("✔ graphs") for text in target), target


async def test_time_past_the_log_redraws_only_a_running_phase():
    """The app passes the seconds since the log's newest stamp every second; with no phase running they change
    nothing, and redrawing (a layout of the whole screen) would cost CPU every second on an idle server."""
    ready = _ready_phases()
    assert not any(p.status == "running" for p in ready)
    app = _TimelineApp()
    async with app.run_test(size=(120, 20)):
        timeline = app.query_one(PhaseTimeline)
        updates = []
        original = timeline.update
        timeline.update = lambda content: (updates.append(content), original(content))
        timeline.show(ready, running_extra_s=0.0)
        timeline.show(ready, running_extra_s=1.0)
        timeline.show(ready, running_extra_s=2.0)
        assert len(updates) == 1
        running = [*ready[:-1], type(ready[-1])(**{**ready[-1].__dict__, "status": "running", "elapsed_s": 1.0})]
        timeline.show(running, running_extra_s=1.0)
        timeline.show(running, running_extra_s=2.0)
        assert len(updates) == 3
        assert "3.0s" in timeline.row.lines(200)[-1].plain
