"""What people see fits: the wide grid is laid out by content (issue 22 item 12); at 80x24 nothing needed to
choose is cut, a log match past the pane's width is scrolled into view, the palette offers each action once,
and messages say what failed and what to do first (item 17)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.widgets import DataTable

from specmon.gpu.model import GpuSnapshot
from tests.support.app_harness import READY_LOG, fixture_app, screen_text, wait_for

GPUS = Path(__file__).parents[1] / "fixtures" / "gpu"


def gpu_reading(name: str) -> GpuSnapshot:
    return GpuSnapshot.from_json(json.loads((GPUS / name).read_text()))


@pytest.mark.parametrize(("size", "bench_wide"), [((200, 50), True), ((260, 60), True), ((160, 40), False)])
async def test_the_wide_grid_gives_the_benchmark_its_width_and_the_gpus_only_their_rows(size, bench_wide):
    app = fixture_app(READY_LOG)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        app.main.show_gpus(gpu_reading("h200-real-torch-20g.json"))  # one GPU
        await pilot.pause(0.3)
        panes = {pane.id: pane.region for pane in app.screen.query(".pane")}
        bench = app.screen.query_one("#bench-panel")
        assert bench.has_class("-narrow") is not bench_wide, (size, panes["pane-bench"])
        columns = [str(c.label) for c in app.screen.query_one("#bench-table", DataTable).columns.values()]
        assert ("CI95" in columns) is bench_wide, columns
        assert app.screen.query_one("#bench-accept-chart").display is bench_wide
        assert panes["pane-server"].width >= 92 or not bench_wide, panes
        assert panes["pane-gpus"].height <= 20, "one GPU needs no half of the screen"
        assert panes["pane-bench"].height >= size[1] - 20 - 2, panes


async def test_eight_gpus_get_the_rows_they_need():
    app = fixture_app(READY_LOG)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        app.main.show_gpus(gpu_reading("h200x8-sglang-tp8.json"))
        await pilot.pause(0.3)
        gpus = app.screen.query_one("#pane-gpus").region
        assert 20 <= gpus.height <= 24, gpus  # every GPU's line and its process, capped at half the screen


async def test_a_log_match_past_the_panes_width_is_scrolled_into_view():
    app = fixture_app(READY_LOG)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        log = app.screen.query_one("LogView")
        log.write_classified(["[2026-11-29 10:48:43] " + "x" * 150 + " NEEDLE-AT-170 and more"], [None])
        await pilot.pause()
        await pilot.press("slash", *"NEEDLE-AT-170", "enter")
        assert await wait_for(pilot, lambda: log.scroll_x > 0)
        assert await wait_for(pilot, lambda: "NEEDLE-AT-170" in screen_text(app)), screen_text(app)
        await pilot.press("f")
        assert await wait_for(pilot, lambda: log.scroll_x == 0)


async def test_the_palette_offers_each_action_once():
    app = fixture_app(READY_LOG)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        titles = [command.title for command in app.get_system_commands(app.screen)]
        assert len(titles) == len(set(titles)), titles
        lowered = [t.lower() for t in titles]
        assert sum("screenshot" in t for t in lowered) == 1 and sum("theme" in t for t in lowered) == 1, titles


async def test_the_pickers_show_the_numbers_needed_to_choose_at_80x24():
    import time
    from types import SimpleNamespace

    from specmon.bench.model import AcceptFigures, DecodeFigures, Summary
    from specmon.launch.presets import load_presets
    from specmon.oncall import progress
    from specmon.tui.screens.preset_picker import PresetPicker
    from specmon.tui.screens.sweep_picker import SweepPicker

    def run(preset: str, decode: float, accept: float | None):
        return SimpleNamespace(preset=preset, started_at=time.time() - 7200, status="finished", url="u",
                               summary=Summary(decode_tok_s=DecodeFigures(median=decode),
                                               accept_length=AcceptFigures(token_weighted=accept)))

    presets = {n: p for n, p in load_presets(user_dir=None).presets.items() if not p.demo}
    last = {"baseline": run("baseline", 88.2, None), "eagle3-5": run("eagle3-5", 181.3, 2.81),
            "eagle3-10": run("eagle3-10", 160.4, 3.1)}
    app = fixture_app(READY_LOG)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        choices = progress.sweep_choices(progress.sweep_candidates(presets, presets["eagle3-10"]), last)
        app.push_screen(SweepPicker(choices))
        await pilot.pause(0.3)
        text = screen_text(app)
        for figure in ("88.2 tok/s", "160.4 tok/s · accept 3.10", "181.3 tok/s · accept 2.81"):
            assert figure in text, text
        assert "s: start · Esc" in text, "the title wraps, never cut"
        await pilot.press("escape")
        app.push_screen(PresetPicker(presets, "eagle3-10", {n: progress.result_line(r) for n, r in last.items()}))
        await pilot.pause(0.3)
        assert "Esc: cancel" in screen_text(app), screen_text(app)


def test_check_says_which_checks_failed_not_that_something_is_wrong():
    from specmon.serving.check import CheckReport, format_report

    report = CheckReport(url="http://127.0.0.1:30000")
    report.add("health", "ok", "HTTP 200")
    report.add("acceptance", "warn", "1.01 tokens per verify step: the draft is (almost) never right")
    last = format_report(report).splitlines()[-1]
    assert last == "1 check(s) need attention: acceptance (see the marked lines above)"
    assert "something is wrong" not in format_report(report)


def test_a_preflight_problem_says_what_to_do_first():
    from specmon.preflight.report import Problem

    keys = ", ".join(f"layers.0.mlp.experts.{i}.weight" for i in range(20))
    problem = Problem("error", "draft-keys-dropped", f"SGLang 0.5.9 silently drops 20 of 30 keys: {keys}",
                      "specmon fix-draft-keys /d /d-fixed --to midlayer")  # fmt: skip
    line = problem.one_line()
    assert line.startswith("error draft-keys-dropped: specmon fix-draft-keys /d /d-fixed --to midlayer — "), line
