"""The flush cadence at idle: looked at once a second, and woken at once by the log feed when a stream of lines
begins (a Textual timer's look costs; the app's idle CPU is the sum of such looks)."""

from __future__ import annotations

from specmon.logs.follower import LogItem
from specmon.tui.cadence import SELDOM_FLUSH_S, TRICKLE_LINES, FlushCadence
from specmon.tui.config import AppConfig
from specmon.view.log_feed import LogFeed
from tests.test_log_summary_serving_fast import STARTUP, serving


class _Timer:
    def __init__(self, interval: float, callback) -> None:
        self.interval, self.callback, self.paused = interval, callback, False

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False


def _ready_cadence():
    feed = LogFeed()
    raw = STARTUP.read_bytes()
    startup = raw[: raw.index(b"\n", raw.index(b"The server is fired up")) + 1].decode()
    feed.feed([LogItem("line", line) for line in startup.splitlines()])
    timers: list[_Timer] = []
    woken: list = []
    flushes: list[int] = []
    cadence = FlushCadence(feed, AppConfig(url="http://127.0.0.1:9"))
    cadence.start(lambda interval, callback: timers.append(_Timer(interval, callback)) or timers[-1],
                  lambda: flushes.append(len(feed.take().lines)), lambda callback: woken.append(callback))
    often, seldom = timers
    often.callback()  # the first flush writes the startup; the server is ready, so the often timer pauses
    return feed, cadence, often, seldom, woken, flushes


def test_idle_the_feed_is_looked_at_once_a_second():
    _, cadence, often, seldom, woken, _ = _ready_cadence()
    assert often.paused and not cadence.often_active
    assert seldom.interval == SELDOM_FLUSH_S == 1.0
    assert woken == []


def test_a_stream_of_lines_wakes_the_cadence_once_and_it_flushes_often():
    feed, cadence, often, _, woken, flushes = _ready_cadence()
    lines = serving(1, TRICKLE_LINES // 4 + 1)
    feed.feed([LogItem("line", line) for line in lines[:10]])
    assert woken == []  # a trickle waits for the once-a-second look
    feed.feed([LogItem("line", line) for line in lines[10:]])
    feed.feed([LogItem("line", line) for line in lines])
    assert len(woken) == 1  # one wake, however many lines follow before it runs
    woken[0]()  # on the app's loop
    assert cadence.often_active and not often.paused
    assert flushes[-1] == len(lines) * 2
    feed.feed([LogItem("line", line) for line in lines])
    assert len(woken) == 1  # flushing often: nothing to wake
