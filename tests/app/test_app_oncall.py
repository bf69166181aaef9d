"""The app attached to a detached server (as `specmon monitor` without --url): it follows a switch made from
another terminal, switches presets itself through `specmon switch`'s core, and shows stored results."""

from __future__ import annotations

import asyncio

import pytest

from specmon.launch.presets import load_presets
from specmon.oncall.discovery import find_servers
from specmon.ports import free_port_pair
from specmon.tui.app import AppConfig, SpecmonApp
from specmon.tui.screens.preset_picker import PresetPicker
from specmon.tui.screens.sweep_picker import SweepPicker
from tests.support.app_harness import screen_text, wait_for
from tests.support.oncall import Oncall, gone, write_preset

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def oc(tmp_path, monkeypatch):
    env = Oncall(tmp_path)
    for name in ("SPECMON_STATE_DIR", "XDG_STATE_HOME"):  # the app's own look-ups use the test's state
        monkeypatch.setenv(name, env.env[name])
    yield env
    env.cleanup()


def attached_app(oc: Oncall, server_id: str) -> SpecmonApp:
    """The app as `specmon monitor --server ID --presets DIR` builds it (no GPU sampling)."""
    found = find_servers(with_gpus=False).find(server_id)
    preset_set = load_presets([oc.presets])
    presets = {n: p for n, p in preset_set.presets.items() if p.demo}
    config = AppConfig(url=found.url, log_path=found.log, preset=presets.get(found.preset), presets=presets,
                       attached=found, emulator=True, sanity_check=False)  # fmt: skip
    return SpecmonApp(config)


def header_text(app: SpecmonApp) -> str:
    return str(app.screen.query_one("#header").render())


async def test_the_attached_app_follows_a_switch_made_from_another_terminal(oc):
    port = free_port_pair()
    first = oc.json("start", "fast-a", "--port", str(port), "--wait")
    app = attached_app(oc, first["id"])
    async with app.run_test(size=(200, 50)) as pilot:
        assert await wait_for(pilot, lambda: app.current_state() == "ready", 30)
        done = await asyncio.to_thread(oc.run, "switch", "fast-b", "--yes", "--requests", "0", "--from",
                                       first["id"])  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        assert await wait_for(pilot, lambda: app.server_state.preset is not None and app.server_state.preset.name == "fast-b",
                              30), "the app took the new server's preset"  # fmt: skip
        assert app.log_path != first["log"] and app.config.attached.pid != first["pid"]
        assert await wait_for(pilot, lambda: app.current_state() == "ready", 30), app.current_state()
        assert len(app.feed.history) >= 1, "the earlier run stays in history"
        assert "fast-b" in header_text(app)


async def test_switching_an_attached_server_in_the_app_shows_each_step_and_before_after(oc):
    port = free_port_pair()
    first = oc.json("start", "fast-a", "--port", str(port), "--wait")
    app = attached_app(oc, first["id"])
    async with app.run_test(size=(200, 50)) as pilot:
        assert await wait_for(pilot, lambda: app.current_state() == "ready", 30)
        assert app.check_action("pick_preset", ())
        await pilot.press("p")
        assert isinstance(app.screen, PresetPicker)
        assert "last: no result yet" in screen_text(app)
        await pilot.press("escape")
        app.switch_preset("fast-b")
        seen: set[str] = set()

        def finished() -> bool:
            switch = app.oncall.switch
            if switch is not None:
                seen.update(name for name, _, _ in switch.steps)
            return switch is not None and switch.finished

        assert await wait_for(pilot, finished, 120)
        assert {"stopping", "gpus free", "port free", "launching", "startup", "sanity"} <= seen
        assert app.log_path == app.config.attached.log != first["log"], "the new log is followed"
        notes = " ".join(text for text, _ in app.oncall.switch.notes())
        assert "before → after" in notes and "decode tok/s" in notes, notes
        assert "stopping" in screen_text(app) and "before → after" in screen_text(app)
        assert app.server_state.preset.name == "fast-b" and app.server_state.switching_to is None
        assert gone(first["pid"]) and app.config.attached.pid != first["pid"]
        assert await wait_for(pilot, lambda: app.current_state() == "ready", 30), app.current_state()


async def test_re_attaching_loads_the_benchmark_history_and_the_picker_shows_last_results(oc):
    port = free_port_pair()
    first = oc.json("start", "fast-a", "--port", str(port), "--wait")
    done = oc.run("bench", "--presets", str(oc.presets), "--url", first["url"], "--preset", "fast-a",
                  "--requests", "2", "--warmup", "1", "--max-new-tokens", "24", "--json")  # fmt: skip
    assert done.returncode in (0, 1), done.stderr[-2000:]
    app = attached_app(oc, first["id"])
    async with app.run_test(size=(200, 50)) as pilot:
        assert await wait_for(pilot, lambda: bool(app.bench_results), 20), "the stored run is loaded"
        assert [r.preset for r in app.bench_results] == ["fast-a"]
        assert await wait_for(pilot, lambda: _first_row_has(app, "fast-a"))
        await pilot.press("p")
        assert isinstance(app.screen, PresetPicker)
        text = screen_text(app)
        assert "tok/s · accept" in text and "just now" in text and "last: no result yet" in text, text


def sweep_app(oc: Oncall) -> SpecmonApp:
    """The app attached to fast-a, offered a baseline and two EAGLE3 presets to sweep."""
    write_preset(oc.presets, "fast-base", "demo-baseline")
    port = free_port_pair()
    first = oc.json("start", "fast-a", "--port", str(port), "--wait")
    app = attached_app(oc, first["id"])
    app.config.presets = {n: app.config.presets[n] for n in ("fast-base", "fast-a", "fast-b")}
    return app


def recorded(app: SpecmonApp, method: str) -> list:
    """Everything the main screen's ``method`` is given from now on, in order (it still shows each)."""
    calls: list = []
    show = getattr(app.main, method)
    setattr(app.main, method, lambda value: (calls.append(value), show(value)))
    return calls


async def test_a_sweep_from_the_palette_shows_progress_runs_and_the_recommendation(oc):
    app = sweep_app(oc)
    async with app.run_test(size=(200, 50)) as pilot:
        assert await wait_for(pilot, lambda: app.current_state() == "ready", 30)
        assert "Sweep presets…" in [c.title for c in app.get_system_commands(app.screen)]
        app.oncall.sweeps.ask()
        assert await wait_for(pilot, lambda: isinstance(app.screen, SweepPicker))
        assert await wait_for(pilot, lambda: "baseline (no speculation)" in screen_text(app)), screen_text(app)
        assert "EAGLE3 · draft tokens 5" in screen_text(app)
        notes, progress = recorded(app, "show_bench_note"), recorded(app, "show_bench_progress")
        await pilot.press("s")
        assert await wait_for(pilot, lambda: not app.oncall.sweeps.running, 200)
        shown = {p.preset for p in progress}  # coalesced: a fast run may show only its last update
        assert shown == {"fast-base", "fast-a", "fast-b"}, f"each run's progress reaches the Benchmark pane: {notes}"
        assert any("switching" in n for n in notes) and any("measured" in n for n in notes), notes
        assert "recommended" in str(app.screen.query_one("#bench-progress").render())
        assert "recommended" in notes[-1] and "left serving" in notes[-1], notes[-1]
        assert sorted({r.preset for r in app.bench_results}) == ["fast-a", "fast-b", "fast-base"]
        assert len([r for r in app.bench_results if r.preset == "fast-base"]) == 2


async def test_a_sweep_cancelled_from_the_palette_stops_after_its_step_and_stays_resumable(oc):
    """At 80x24 too: the resume command is shown whole, and `specmon ps` says "cancelled" while the app runs."""
    from specmon.oncall.state import state_dir
    from specmon.sweep.plan import SweepStore

    app = sweep_app(oc)
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_for(pilot, lambda: app.current_state() == "ready", 30)
        app.oncall.sweeps.ask()
        assert await wait_for(pilot, lambda: isinstance(app.screen, SweepPicker))
        notes = recorded(app, "show_bench_note")
        await pilot.press("s")
        assert await wait_for(pilot, lambda: any("measuring" in n for n in notes), 120), notes
        commands = {c.title: c for c in app.get_system_commands(app.screen)}
        assert "Sweep presets…" not in commands, notes
        commands["Cancel the sweep"].callback()
        assert await wait_for(pilot, lambda: not app.oncall.sweeps.running, 60), notes
        assert "cancelling after the step under way" in " ".join(notes)
        plan = SweepStore(state_dir() / "sweeps").latest_unfinished()
        assert plan is not None and not plan.finished, "the cancelled sweep is left to resume"
        resume = f"specmon sweep --resume {plan.run_id}"
        assert resume in notes[-1] and "0 of 4 runs measured" in notes[-1], notes[-1]
        assert await wait_for(pilot, lambda: resume in screen_text(app)), screen_text(app)
        (shown,) = (await asyncio.to_thread(oc.json, "ps"))["sweeps"]
        assert shown["state"] == "cancelled" and shown["resume"] == resume, shown
        assert "Sweep presets…" in [c.title for c in app.get_system_commands(app.screen)]
    assert [s.state for s in plan.steps] == ["cancelled", "pending", "pending", "pending"], plan.steps
    assert any(s["alive"] for s in oc.json("ps")["servers"]), "cancelling leaves the server serving"


async def test_a_run_another_bench_saves_while_attached_is_picked_up(oc):
    """Another terminal runs `specmon bench` against the attached server (another process writing the result
    store): once it finished, the app shows it in the Benchmark pane and the picker's last result, without
    re-attaching; a run it already shows is not shown twice."""
    port = free_port_pair()
    first = oc.json("start", "fast-a", "--port", str(port), "--wait")
    app = attached_app(oc, first["id"])
    async with app.run_test(size=(200, 50)) as pilot:
        assert await wait_for(pilot, lambda: app.current_state() == "ready", 30)
        assert app.bench_results == []
        done = await asyncio.to_thread(oc.run, "bench", "--presets", str(oc.presets), "--url", first["url"],
                                       "--preset", "fast-a", "--requests", "2", "--warmup", "1",
                                       "--max-new-tokens", "24", "--json")  # fmt: skip
        assert done.returncode in (0, 1), done.stderr[-2000:]
        assert await wait_for(pilot, lambda: [r.preset for r in app.bench_results] == ["fast-a"], 30)
        assert app.bench_results[0].status == "finished"
        assert await wait_for(pilot, lambda: _first_row_has(app, "fast-a"))
        assert "fast-a" in app.oncall.last
        assert await wait_for(pilot, lambda: not app.oncall._store_watch.due())  # nothing left to read
        assert len(app.bench_results) == 1


def _first_row_has(app, text: str) -> bool:
    """The Benchmark table's first row holds `text` (the table fills once its model is built off the UI thread)."""
    table = app.screen.query_one("#bench-table")
    return table.row_count > 0 and text in str(table.get_row_at(0))
