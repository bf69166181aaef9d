"""The Live view in the app: the 4 key and tab, a big log attached from its end, figures from the log."""

from __future__ import annotations

import pytest

from benchmarks.app_big_log import write_log
from specmon.ports import free_port
from specmon.tui.app import SpecmonApp
from specmon.tui.config import AppConfig
from tests.support.app_harness import READY_LOG, fixture_bytes, screen_text, wait_for


async def test_big_log_is_attached_from_its_end_and_the_live_tab_shows_it(tmp_path):
    log = tmp_path / "week.log"
    write_log(log, 60_000)  # ~11 MiB: above BIG_LOG_BYTES
    app = SpecmonApp(AppConfig(url="http://127.0.0.1:9", log_path=str(log), poll=False))
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_for(pilot, lambda: app.feed.state.state == "ready", timeout=10)
        assert app.feed.lines_fed < 10_000  # the startup and the recent lines, not the 60,000
        await pilot.press("4")
        app.live.refresh()
        await pilot.pause()
        text = screen_text(app)
        assert "Decode tok/s" in text and "log (Decode batch lines)" in text and "2.75" in text
        await pilot.press("1")
        assert await wait_for(pilot, lambda: "MiB of serving log skipped" in screen_text(app)
                              or app.feed.lines_fed > 0, timeout=5)


@pytest.mark.parametrize(("until", "says"), [("Load weight end", "starting"), ("SIGTERM received", "unreachable")])
async def test_the_live_view_says_starting_during_a_startup_and_unreachable_only_after_it(tmp_path, until, says):
    """The app follows a server's log; nothing answers on its port. Mid-startup (its log says so) that is normal:
    the Live view says "starting", as the header does, not "unreachable", which reads as down; once the log said
    ready, no answer is "unreachable"."""
    log = tmp_path / "server.log"
    log.write_bytes(fixture_bytes(READY_LOG, until))
    app = SpecmonApp(AppConfig(url=f"http://127.0.0.1:{free_port()}", log_path=str(log)))
    async with app.run_test(size=(200, 50)) as pilot:
        assert await wait_for(pilot, lambda: f"│ {says} · " in screen_text(app), 30), screen_text(app)  # its head
        assert ("unreachable" in screen_text(app)) == (says == "unreachable")
