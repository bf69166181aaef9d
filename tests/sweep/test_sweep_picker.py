"""The sweep picker: which presets are selected reads without colour, and a selection that makes no sweep is said
in the dialog, which stays open (issue item 10: every baseline looked selected, then one was left out)."""

from __future__ import annotations

import dataclasses

from specmon.launch.presets import load_presets
from specmon.oncall.progress import sweep_candidates, sweep_choices
from specmon.sweep.plan import SweepError, plan_sweep
from specmon.tui.screens.sweep_picker import SweepPicker
from tests.support.app_harness import READY_LOG, fixture_app, screen_text, wait_for


def problem(presets):
    def why(names: list[str]) -> str | None:
        try:
            plan_sweep([presets[name] for name in names])
        except SweepError as exc:
            return str(exc)
        return None

    return why


async def test_unselected_boxes_are_empty_and_a_second_baseline_is_refused_in_the_dialog():
    presets = dict(load_presets(user_dir=None).presets)
    presets["my-baseline"] = dataclasses.replace(presets["demo-baseline"], name="my-baseline")
    choices = sweep_choices(sweep_candidates(presets, presets["demo-eagle3-10"]), {})
    picked: list = []
    app = fixture_app(READY_LOG)
    async with app.run_test(size=(80, 24)) as pilot:
        app.push_screen(SweepPicker(choices, problem(presets)), picked.append)
        assert await wait_for(pilot, lambda: "Selected (4 of 5)" in screen_text(app)), screen_text(app)
        lines = {line.split("▌ ")[1].split("│")[0].strip(): line for line in screen_text(app).splitlines()
                 if "▐" in line and "│" in line.split("▌ ")[-1]}
        assert "▐X▌" in lines["demo-baseline"] and "▐ ▌" in lines["my-baseline"], lines
        assert "demo-baseline, demo-eagle3-10" in screen_text(app)
        await pilot.press("end", "space")  # my-baseline too: two baselines
        assert await wait_for(pilot, lambda: "Selected (5 of 5)" in screen_text(app))
        await pilot.press("s")
        assert await wait_for(pilot, lambda: "Cannot start: a sweep needs exactly one" in screen_text(app))
        assert isinstance(app.screen, SweepPicker) and picked == []
        await pilot.press("space", "s")  # my-baseline off again: the sweep starts with the four
        assert await wait_for(pilot, lambda: picked != [])
    assert picked == [["demo-baseline", "demo-eagle3-10", "demo-eagle3-16", "demo-eagle3-5"]]
