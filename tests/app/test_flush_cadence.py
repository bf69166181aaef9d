"""The flush cadence at idle: no timer runs; the log feed wakes it when lines arrive, at once for a stream of lines,
else a one-shot timer flushes a trickle when it is due (a Textual timer's look costs; the app's idle CPU is the sum
of such looks)."""

from __future__ import annotations

import time

from specmon.logs.follower import LogItem
from specmon.tui.cadence import DUE_SLACK_S, RETRY_S, TRICKLE_LINES, FlushCadence
from specmon.tui.config import AppConfig
from specmon.view.log_feed import LogFeed
from tests.logs.test_log_summary_serving_fast import STARTUP, serving


class _Timer:
    def __init__(self, interval: float, callback) -> None:
        self.interval, self.callback, self.paused, self.stopped = interval, callback, False, False

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def stop(self) -> None:
        self.stopped = True


def _ready_cadence(take=None):
    feed = LogFeed()
    raw = STARTUP.read_bytes()
    startup = raw[: raw.index(b"\n", raw.index(b"The server is fired up")) + 1].decode()
    feed.feed([LogItem("line", line) for line in startup.splitlines()])
    timers: list[_Timer] = []
    one_shots: list[_Timer] = []
    woken: list = []
    flushes: list[int] = []
    cadence = FlushCadence(feed, AppConfig(url="http://127.0.0.1:9"))

    def flush() -> None:
        if take is None or take():
            flushes.append(len(feed.take().lines))
            cadence.written()

    cadence.start(lambda interval, callback: timers.append(_Timer(interval, callback)) or timers[-1],
                  lambda delay, callback: one_shots.append(_Timer(delay, callback)) or one_shots[-1],
                  flush, lambda callback: woken.append(callback))
    (often,) = timers
    often.callback()  # the first flush writes the startup; the server is ready, so the often timer pauses
    return feed, cadence, often, one_shots, woken, flushes


def test_idle_no_timer_looks_at_the_feed():
    _, cadence, often, one_shots, woken, flushes = _ready_cadence()
    assert often.paused and not cadence.often_active
    assert one_shots == [] and woken == [] and not cadence.due_set
    assert len(flushes) == 1


def test_a_trickle_is_flushed_once_by_a_one_shot_when_it_is_due():
    feed, cadence, often, one_shots, woken, flushes = _ready_cadence()
    lines = serving(1, 3)
    feed.feed([LogItem("line", lines[0])])
    assert len(woken) == 1
    woken.pop()()  # on the app's loop: a trickle, so no flush yet but a one-shot for when it is due
    assert often.paused and len(flushes) == 1 and cadence.due_set
    (trickle,) = one_shots
    assert cadence.config.trickle_s - 0.5 < trickle.interval <= cadence.config.trickle_s + DUE_SLACK_S
    for line in lines[1:]:
        feed.feed([LogItem("line", line)])
    assert woken == []  # the one-shot is set: more of the trickle wakes nothing
    cadence.written_at = time.monotonic() - cadence.config.trickle_s  # it is due
    trickle.callback()
    assert flushes[-1] == len(lines) and not cadence.due_set and len(one_shots) == 1


def test_a_trickle_the_screen_could_not_take_is_tried_again_later():
    ready = [True]
    feed, cadence, _, one_shots, woken, flushes = _ready_cadence(take=lambda: ready[0])
    ready[0] = False
    feed.feed([LogItem("line", serving(1, 1)[0])])
    woken.pop()()
    cadence.written_at = 0.0
    one_shots[-1].callback()
    assert len(flushes) == 1 and len(one_shots) == 2 and one_shots[-1].interval >= RETRY_S
    ready[0] = True
    one_shots[-1].callback()
    assert flushes[-1] == 1 and not cadence.due_set


def test_a_stream_of_lines_brings_its_one_shot_forward_and_wakes_the_cadence_once():
    feed, cadence, often, one_shots, woken, flushes = _ready_cadence()
    lines = serving(1, TRICKLE_LINES // 4 + 1)
    feed.feed([LogItem("line", line) for line in lines[:10]])
    woken.pop()()  # a trickle: a one-shot for trickle_s after the last write
    (trickle,) = one_shots
    feed.feed([LogItem("line", line) for line in lines[10:]])
    feed.feed([LogItem("line", line) for line in lines])
    assert len(woken) == 1  # one wake, however many lines follow before it runs
    woken.pop()()  # on the app's loop: a stream, due busy_flush_s after the last write
    assert trickle.stopped and cadence.due_set and often.paused
    stream = one_shots[-1]
    assert stream.interval <= cadence.config.busy_flush_s + DUE_SLACK_S < trickle.interval
    feed.feed([LogItem("line", line) for line in lines])
    assert woken == []  # its flush is set: nothing to wake
    cadence.written_at = time.monotonic() - cadence.config.busy_flush_s
    stream.callback()
    assert flushes[-1] == len(lines) * 3 and not cadence.due_set and often.paused


def test_a_startup_is_flushed_at_flush_hz():
    feed, cadence, often, one_shots, woken, flushes = _ready_cadence()
    raw = STARTUP.read_bytes()
    feed.reset()  # another log begins (a switch): its startup shows as it comes
    feed.feed([LogItem("line", line) for line in raw[:4096].decode(errors="replace").splitlines()[:5]])
    assert len(woken) == 1
    woken.pop()()
    assert cadence.often_active and not often.paused and not cadence.due_set


async def test_a_ready_servers_trickle_reaches_the_log_pane_through_the_one_shot(tmp_path):
    """In the app: the one-shot is set from the follower's wake (Textual's timers need the app's context there)."""
    from specmon.tui.app import SpecmonApp
    from tests.support.app_harness import wait_for

    raw = STARTUP.read_bytes()
    log_path = tmp_path / "server.log"
    log_path.write_bytes(raw[: raw.index(b"\n", raw.index(b"The server is fired up")) + 1])
    app = SpecmonApp(AppConfig(url="http://127.0.0.1:9", log_path=str(log_path), poll=False, trickle_s=0.5))
    async with app.run_test(size=(80, 24)) as pilot:
        log = app.screen.query_one("#log")
        assert await wait_for(pilot, lambda: app.cadence.due_set is False and app.cadence._often is not None
                              and not app.cadence.often_active and app.feed.pending == 0
                              and any("fired up" in line for line in log.lines[-5:]))  # the startup shown, paused
        for i in range(3):
            with log_path.open("a") as out:
                out.write(f'[2026-12-02 13:30:0{i}] INFO:     127.0.0.1:4{i} - "POST /generate HTTP/1.1" 200 OK\n')
            assert await wait_for(pilot, lambda i=i: f":4{i} - " in (log.lines or [""])[-1]), (
                log.lines[-3:], app.feed.pending, app.cadence.often_active, app.cadence.due_set, app.cadence._woken,
                app.feed.lines_fed, app.feed.state.state)
            assert not app.cadence.often_active  # a trickle: flushed by the one-shot, not by waking the often timer
