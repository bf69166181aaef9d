"""Preset switching from the app: the picker, a real supervised child process, the log pane following anew."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from specmon.launch.presets import Preset
from specmon.launch.supervisor import ServerSupervisor
from specmon.ports import free_port
from specmon.tui.app import AppConfig, SpecmonApp
from specmon.tui.screens.preset_picker import PresetPicker
from tests.support.app_harness import screen_text, wait_for


def unchecked_supervisor(*args, **kwargs) -> ServerSupervisor:
    """A supervisor without the preflight: these presets launch test scripts, not SGLang."""
    return ServerSupervisor(*args, preflight=None, **kwargs)

CHILD = (
    "import os, sys, time\n"
    "name = sys.argv[sys.argv.index('--served-model-name') + 1]\n"
    "print(f'[2026-11-29 10:00:00] hello from {name}', flush=True)\n"
    "gate = sys.argv[sys.argv.index('--ready-when') + 1] if '--ready-when' in sys.argv else None\n"
    "while gate and not os.path.exists(gate):\n"
    "    time.sleep(0.05)\n"
    "if gate:\n"
    "    print('[2026-11-29 10:00:01] The server is fired up and ready to roll!', flush=True)\n"
    "time.sleep(120)\n"
)


def _preset(name: str, ready_when: Path | None = None) -> Preset:
    """A child that says hello, then (given `ready_when`) that it is ready once that file exists."""
    args = {"served-model-name": name} | ({"ready-when": str(ready_when)} if ready_when else {})
    return Preset(
        name=name,
        description=f"test child {name}",
        launcher=(sys.executable, "-c", CHILD),
        args=args,
    )


async def test_preset_picker_restarts_the_server_and_follows_the_new_log(tmp_path):
    """...and says "Switched to" once the new server is ready, not as it is launched."""
    presets = {name: _preset(name, tmp_path / f"{name}.ready") for name in ("alpha", "beta")}
    supervisor = unchecked_supervisor(presets["alpha"], tmp_path / "alpha.log", free_port())
    first_log = supervisor.start()
    first_pid = supervisor.pid
    app = SpecmonApp(
        AppConfig(
            url=f"http://127.0.0.1:{supervisor.port}",
            log_path=str(first_log),
            preset=presets["alpha"],
            presets=presets,
            supervisor=supervisor,
            poll=False,
        )
    )
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            log = app.screen.query_one("#log")
            assert await wait_for(pilot, lambda: any("hello from alpha" in line for line in log.lines))
            await pilot.press("p")
            assert isinstance(app.screen, PresetPicker)
            await pilot.press("enter")  # it opens on a preset other than the running one
            assert app.server_state.switching_to == "beta" or app.server_state.preset.name == "beta"
            assert await wait_for(pilot, lambda: any("hello from beta" in line for line in log.lines), 10)
            assert not any("hello from alpha" in line for line in log.lines), "the log pane starts over"
            assert supervisor.preset.name == "beta" and supervisor.pid != first_pid
            assert app.server_state.preset.name == "beta" and app.server_state.switching_to is None
            assert not any("Switched to" in str(n.message) for n in app._notifications), "not ready yet"
            (tmp_path / "beta.ready").touch()
            assert await wait_for(pilot, lambda: any("Switched to beta" in str(n.message)
                                                     for n in app._notifications), 10)
            assert await wait_for(pilot, lambda: "beta" in screen_text(app).splitlines()[0])
    finally:
        supervisor.stop()
    assert supervisor.returncode is not None


async def test_escape_closes_the_picker_without_switching(tmp_path):
    presets = {name: _preset(name) for name in ("alpha", "beta")}
    supervisor = unchecked_supervisor(presets["alpha"], tmp_path / "alpha.log", free_port())
    supervisor.start()
    pid = supervisor.pid
    app = SpecmonApp(AppConfig(url="http://127.0.0.1:9", presets=presets, supervisor=supervisor,
                               preset=presets["alpha"], poll=False))
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("p")
            assert isinstance(app.screen, PresetPicker)
            await pilot.press("escape")
            assert not isinstance(app.screen, PresetPicker)
            assert supervisor.pid == pid and app.server_state.switching_to is None
            titles = {c.title for c in app.get_system_commands(app.screen)}
            assert {"Switch preset: alpha", "Switch preset: beta"} <= titles
    finally:
        supervisor.stop()


async def test_attached_mode_offers_no_preset_switching():
    app = SpecmonApp(AppConfig(url="http://127.0.0.1:9", poll=False))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("p")
        assert not isinstance(app.screen, PresetPicker)
        assert "Preset" not in screen_text(app).splitlines()[-1]


class _FakeBench:
    """A benchmark run that goes on until it is cancelled; then it ends as BenchRun does: "cancelled"."""

    def __init__(self) -> None:
        import threading

        from specmon.bench.model import BenchResult

        self.cancelled = threading.Event()
        self.result = BenchResult(run_id="r1", preset="alpha", url="http://x", started_at=0.0)

    def cancel(self) -> None:
        self.result.status = "cancelled"
        self.cancelled.set()

    def wait(self, timeout: float | None = None) -> bool:
        return self.cancelled.wait(timeout)


class _FakeSupervisor:
    def __init__(self, bench: _FakeBench) -> None:
        self.bench, self.restarts, self.returncode, self.is_running, self.log_path = bench, [], None, True, None

    def restart_with(self, preset: Preset) -> None:
        self.restarts.append((preset.name, self.bench.cancelled.is_set()))


async def test_switching_preset_while_a_benchmark_runs_asks_first_and_cancels_it():
    from specmon.tui.screens.confirm import Confirm

    presets = {name: _preset(name) for name in ("alpha", "beta")}
    bench = _FakeBench()
    supervisor = _FakeSupervisor(bench)
    app = SpecmonApp(AppConfig(url="http://127.0.0.1:9", preset=presets["alpha"], presets=presets,
                               supervisor=supervisor, poll=False, sanity_check=False))
    app.sources.start_bench = lambda preset, on_update: bench
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("b")
        assert app.bench_running
        app.switch_preset("beta")
        assert await wait_for(pilot, lambda: isinstance(app.screen, Confirm))
        await pilot.press("n")
        assert await wait_for(pilot, lambda: not isinstance(app.screen, Confirm))
        assert supervisor.restarts == [] and app.bench_running and not bench.cancelled.is_set()
        app.switch_preset("beta")
        assert await wait_for(pilot, lambda: isinstance(app.screen, Confirm))
        await pilot.press("y")
        assert await wait_for(pilot, lambda: supervisor.restarts and not app.bench_running)
        assert supervisor.restarts == [("beta", True)], "the run is cancelled before the server goes"
        assert app.bench_results[-1].status == "cancelled"
        assert await wait_for(pilot, lambda: any("cancelled" in str(n.message) for n in app._notifications))


def _fake_supervised_app(current: str = "beta", exited: bool = False) -> tuple[SpecmonApp, _FakeSupervisor]:
    presets = {name: _preset(name) for name in ("alpha", "beta", "gamma")}
    supervisor = _FakeSupervisor(_FakeBench())
    if exited:
        supervisor.returncode, supervisor.is_running = 1, False
    app = SpecmonApp(AppConfig(url="http://127.0.0.1:9", preset=presets[current], presets=presets,
                               supervisor=supervisor, poll=False, sanity_check=False))
    return app, supervisor


async def test_the_picker_opens_on_another_preset_and_choosing_the_running_one_asks_first():
    """p then Enter must not restart what runs on the preset it already runs: the cursor opens on another preset
    (the first one that is not running), and choosing the running one, by the picker or the palette, asks."""
    from specmon.tui.screens.confirm import Confirm

    app, supervisor = _fake_supervised_app("alpha")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("p")
        assert isinstance(app.screen, PresetPicker)
        assert app.screen.query_one("OptionList").highlighted_option.id == "beta"
        await pilot.press("escape")
        for choose in ("picker", "palette"):
            if choose == "picker":
                await pilot.press("p")
                await pilot.press("up", "enter")  # back onto alpha, the running one
            else:
                command = next(c for c in app.get_system_commands(app.screen) if c.title == "Switch preset: alpha")
                assert "It runs now" in command.help
                command.callback()
            assert await wait_for(pilot, lambda: "already runs alpha" in screen_text(app))
            await pilot.press("enter" if choose == "picker" else "n")  # a second Enter typed ahead says no
            assert await wait_for(pilot, lambda: not isinstance(app.screen, Confirm))
            assert supervisor.restarts == [] and app.server_state.switching_to is None
        app.switch_preset("alpha")
        assert await wait_for(pilot, lambda: isinstance(app.screen, Confirm))
        await pilot.press("y")
        assert await wait_for(pilot, lambda: supervisor.restarts == [("alpha", False)])


@pytest.mark.parametrize(("exited", "target"), [(False, "gamma"), (True, "beta")])
async def test_another_preset_switches_without_a_question_and_a_stopped_server_restarts_on_its_own(exited, target):
    from specmon.tui.screens.confirm import Confirm

    app, supervisor = _fake_supervised_app("beta", exited)
    async with app.run_test(size=(80, 24)) as pilot:
        if exited:
            assert await wait_for(pilot, lambda: app.current_state() == "stopped")
        app.switch_preset(target)
        assert await wait_for(pilot, lambda: supervisor.restarts == [(target, False)])
        assert not isinstance(app.screen, Confirm)
