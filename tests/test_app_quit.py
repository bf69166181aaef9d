"""Quitting while attached to a server found by `specmon ps` asks: leave it running (the default) or stop it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import psutil

from specmon.tui.screens.quit_dialog import QuitDialog
from tests.support.app_harness import READY_LOG, fixture_app


@dataclass
class FakeServer:
    id: str = "abc123"
    preset: str | None = "eagle3-10"
    url: str = "http://127.0.0.1:30000"
    alive: bool = True
    foreign: str | None = None
    pid: int = field(default_factory=os.getpid)  # alive: the app does not go looking for another server
    port: int = 30000
    create_time: float | None = field(default_factory=lambda: psutil.Process().create_time())  # proven alive
    log: str | None = None
    record: None = None
    launched_by_specmon: bool = False

    def why_not_signalable(self) -> str | None:
        return self.foreign


async def test_quit_without_an_attached_server_just_quits():
    app = fixture_app(READY_LOG)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running or not isinstance(app.screen, QuitDialog)


async def test_quit_asks_and_leaves_the_server_running_by_default(monkeypatch):
    stopped = []
    monkeypatch.setattr("specmon.oncall.stopper.stop_server", lambda server: stopped.append(server))
    app = fixture_app(READY_LOG, attached=FakeServer())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")
        await pilot.pause()
        assert isinstance(app.screen, QuitDialog)
        await pilot.press("escape")  # cancel: still running
        await pilot.pause()
        assert not isinstance(app.screen, QuitDialog) and app.is_running
        await pilot.press("q")
        await pilot.pause()
        await pilot.press("enter")  # the default: leave it running
        await pilot.pause()
    assert stopped == []


async def test_quit_can_stop_the_server(monkeypatch):
    stopped = []
    monkeypatch.setattr("specmon.oncall.stopper.stop_server", lambda server: stopped.append(server.id))
    app = fixture_app(READY_LOG, attached=FakeServer())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")
        await pilot.pause()
        await pilot.press("down", "enter")
        for _ in range(50):
            await pilot.pause(0.05)
            if stopped:
                break
    assert stopped == ["abc123"]


async def test_stopping_another_users_server_is_not_offered():
    app = fixture_app(READY_LOG, attached=FakeServer(foreign="pid 7 belongs to user bob"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")
        await pilot.pause()
        options = app.screen.query_one("OptionList")
        assert options.get_option("stop").disabled
