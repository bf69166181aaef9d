"""Quitting while attached to a server found by `specmon ps` asks: leave it running (the default) or stop it."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import dataclass, field

import psutil
import pytest
from textual.widget import Widget

from specmon.ports import free_port
from specmon.tui.messages import GpuSampled
from specmon.tui.screens.quit_dialog import QuitDialog
from specmon.widgets.phase_timeline import PhaseTimeline
from tests.support.app_harness import READY_LOG, fixture_app, ready_app, wait_for
from tests.support.gpu_fixtures import load
from tests.support.tmux import Tmux, needs_tmux


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


async def test_a_server_that_exits_while_the_dialog_is_open_is_said_to_have_exited(monkeypatch):
    """Stopped from another shell while the dialog asks: the dialog says so and offers nothing to stop."""
    import subprocess

    from textual.widgets import Label, OptionList

    stopped = []
    monkeypatch.setattr("specmon.oncall.stopper.stop_server", lambda server: stopped.append(server.id))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        server = FakeServer(pid=sleeper.pid, create_time=psutil.Process(sleeper.pid).create_time())
        app = fixture_app(READY_LOG, attached=server)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("q")
            assert await wait_for(pilot, lambda: isinstance(app.screen, QuitDialog))
            dialog = app.screen
            assert "may be serving traffic" in str(dialog.query_one(Label).render())
            sleeper.kill()
            sleeper.wait()
            assert await wait_for(pilot, lambda: "has exited" in str(dialog.query_one(Label).render()), timeout=10)
            options = dialog.query_one(OptionList)
            assert options.get_option("stop").disabled and not options.get_option("leave").disabled
            await pilot.press("down", "enter")  # the disabled stop cannot be chosen: the quit leaves
            await pilot.pause()
        assert stopped == [] and not app.is_running
    finally:
        sleeper.kill()
        sleeper.wait()


async def test_stopping_another_users_server_is_not_offered():
    app = fixture_app(READY_LOG, attached=FakeServer(foreign="pid 7 belongs to user bob"))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("q")
        await pilot.pause()
        options = app.screen.query_one("OptionList")
        assert options.get_option("stop").disabled


class TeardownProbe(Widget):
    """A child of the Server pane that, as the app shuts down, waits for the phase timeline beside it to go, then
    renders the server state as a flush timer or a poller's message still may at that moment."""

    timeline_gone = False

    async def on_unmount(self) -> None:
        pane = self.app.main.server_pane
        for _ in range(1000):
            if not pane.query(PhaseTimeline):
                break
            await asyncio.sleep(0.01)
        self.timeline_gone = not pane.query(PhaseTimeline)
        self.app.flush_feed(force=True)
        self.app.render_state()


async def test_renders_during_shutdown_leave_the_panes_that_are_going_alone():
    app = ready_app()
    probe = TeardownProbe()
    async with app.run_test(size=(200, 50)) as pilot:
        assert await wait_for(pilot, lambda: app.current_state() == "ready")
        await app.main.server_pane.mount(probe)
    assert probe.timeline_gone, "the probe rendered after the Server pane's timeline was removed"


class LateGpuSnapshot(Widget):
    """Beside the panes: as the app shuts down, waits for them to go, then delivers a GPU snapshot of a new shape
    (which re-lays the wide grid out) as the GPU sampler's thread may at that moment."""

    panes_gone = False

    async def on_unmount(self) -> None:
        for _ in range(1000):
            if not self.screen.query("#panes"):
                break
            await asyncio.sleep(0.01)
        self.panes_gone = not self.screen.query("#panes")
        self.app._gpu_sampled(GpuSampled(load("h200x8-sglang-tp8.json")))


async def test_a_gpu_snapshot_during_shutdown_leaves_the_panes_that_are_going_alone():
    app = ready_app()
    late = LateGpuSnapshot()
    async with app.run_test(size=(200, 50)) as pilot:
        assert await wait_for(pilot, lambda: app.current_state() == "ready")
        await app.main.mount(late)
    assert late.panes_gone, "the snapshot came after the panes were removed"
    assert app.oncall.gpus is not None and len(app.oncall.gpus.gpus) == 8, "the on-call wiring still has it"


@needs_tmux
@pytest.mark.timeout(120)
@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("command", ["monitor", "fleet"])
def test_a_signal_ends_the_app_as_q_does_and_gives_the_terminal_back(tmp_path, command, signum):
    """`kill -HUP` (or the SSH link's end), SIGTERM or SIGINT: the app ends with 128 + the signal and leaves the
    terminal as it found it: cursor shown, mouse reporting off, the main screen back (tmux says which modes are
    on). The monitor and the fleet app alike, each against a port where nothing answers."""
    argv = {"monitor": ["monitor", "--url", f"http://127.0.0.1:{free_port()}"],
            "fleet": ["fleet", "--prometheus", f"http://127.0.0.1:{free_port()}"]}[command]
    term = Tmux([sys.executable, "-m", "specmon", *argv], (80, 24),
                {"XDG_STATE_HOME": str(tmp_path), "TERM": "xterm-256color"})
    try:
        term.wait_for(lambda s: "q Quit" in s, what="the app")
        assert term.terminal() == {"cursor": False, "mouse": True, "alternate": True}
        os.kill(term.command_pid(), signum)
        assert term.exit_code() == 128 + signum
        assert term.terminal() == {"cursor": True, "mouse": False, "alternate": False}
        assert "Traceback" not in term.screen()
    finally:
        term.kill()


@needs_tmux
@pytest.mark.timeout(180)
def test_stop_it_on_quit_prints_what_the_stop_did_and_nothing_else(tmp_path):
    """Attached to a server `specmon start` launched, q then "Stop it": the server is stopped, and the terminal
    shows `specmon stop`'s summary (it printed a RuntimeWarning from a source closed twice instead), exit 0."""
    from specmon.ports import free_port_pair
    from tests.support.oncall import Oncall, gone

    oc = Oncall(tmp_path)
    try:
        started = oc.json("start", "fast-a", "--port", str(free_port_pair()), "--wait")
        env = {k: v for k, v in oc.env.items() if k in ("SPECMON_STATE_DIR", "XDG_STATE_HOME")}
        term = Tmux([sys.executable, "-m", "specmon", "monitor", "--server", started["id"]], (80, 24),
                    {**env, "TERM": "xterm-256color"})
        try:
            term.wait_for(lambda s: "ready" in s.splitlines()[0] if s else False, what="the attached app")
            term.send("q")
            term.wait_for(lambda s: "Stop it" in s, what="the quit dialog")
            term.send("Down", "Enter")
            assert term.exit_code(90) == 0
            shown = term.screen()
            assert f"stopped server {started['id']} (fast-a" in shown and "GPUs free after" in shown, shown
            assert "Warning" not in shown and "Traceback" not in shown, shown
            assert gone(started["pid"])
        finally:
            term.kill()
    finally:
        oc.cleanup()
