"""Pilot tests of the app: panes and tabs, key bindings, search, themes, the log pane and server state."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from textual.command import CommandList
from textual.widgets import Label, ProgressBar, Tabs
from textual.widgets._footer import FooterKey

from specmon.gpu.model import GpuSnapshot
from specmon.ports import free_port
from specmon.tui.app import DARK_THEME, LIGHT_THEME, AppConfig, SpecmonApp
from specmon.view.state import failure_notice, latest_capture
from tests.support.app_harness import (
    capturing_app,
    failed_app,
    fixture_app,
    fixture_bytes,
    following_app,
    ready_app,
    screen_text,
    wait_for,
)

REPLAY = Path(__file__).parents[1] / "support" / "serving_replay.py"
READY_LOG = "h200-0.5.16-standalone-ready.log"
FAILED_LOG = "h200-0.5.16-spec-args-assertion.log"


def _active_panes(app: SpecmonApp) -> list[str]:
    return [pane.id for pane in app.screen.query(".pane") if pane.display and pane.has_class("-active")]


async def test_number_keys_switch_panes_at_80x24():
    app = fixture_app(READY_LOG)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert not app.screen.has_class("-wide")
        assert _active_panes(app) == ["pane-server"]
        await pilot.press("2")
        assert _active_panes(app) == ["pane-gpus"]
        assert app.screen.query_one(Tabs).active == "tab-gpus"
        await pilot.press("3")
        assert _active_panes(app) == ["pane-bench"]
        assert app.screen.query_one("#pane-server").region.height == 0
        await pilot.press("1")
        assert _active_panes(app) == ["pane-server"]
        assert app.screen.query_one("#pane-server").region.height > 10


async def test_wide_terminal_shows_all_panes_side_by_side():
    app = fixture_app(READY_LOG)
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        assert app.screen.has_class("-wide")
        regions = {pane.id: pane.region for pane in app.screen.query(".pane")}
        assert all(region.width > 40 and region.height > 10 for region in regions.values()), regions
        assert regions["pane-server"].x < regions["pane-gpus"].x
        assert regions["pane-gpus"].y < regions["pane-bench"].y
        assert not app.screen.query_one(Tabs).display


async def test_clicking_a_tab_switches_pane():
    app = fixture_app(READY_LOG)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.click("#tab-bench")
        await pilot.pause()
        assert _active_panes(app) == ["pane-bench"]


async def test_search_finds_next_and_previous_match():
    app = fixture_app(READY_LOG)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        log = app.screen.query_one("#log")
        expected = [y for y, line in enumerate(log.lines) if "decode batch" in line.lower()]
        assert len(expected) >= 3
        await pilot.press("slash")
        assert app.focused.id == "search"
        await pilot.press(*"Decode batch", "enter")
        assert log.match_line == expected[0]
        assert not app.screen.query_one("#search").display
        await pilot.press("n")
        assert log.match_line == expected[1]
        await pilot.press("n")
        assert log.match_line == expected[2]
        await pilot.press("N")
        assert log.match_line == expected[1]
        assert log.scroll_offset.y <= expected[1] < log.scroll_offset.y + log.scrollable_content_region.height


async def test_search_without_match_keeps_position_and_says_so():
    app = fixture_app(READY_LOG)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("slash", *"no such text anywhere", "enter")
        await pilot.pause()
        assert app.screen.query_one("#log").match_line is None
        assert any("No match" in str(n.message) for n in app._notifications)


async def test_theme_toggles_between_light_and_dark():
    app = fixture_app(READY_LOG)
    async with app.run_test(size=(80, 24)) as pilot:
        assert app.theme == DARK_THEME
        await pilot.press("t")
        assert app.theme == LIGHT_THEME
        await pilot.press("t")
        assert app.theme == DARK_THEME


async def test_log_pane_follows_a_file_that_grows(tmp_path):
    log_path = tmp_path / "server.log"
    log_path.write_text("[2026-11-29 10:46:55] first line\n")
    app = following_app(log_path)
    async with app.run_test(size=(80, 24)) as pilot:
        log = app.screen.query_one("#log")
        assert await wait_for(pilot, lambda: "first line" in "".join(log.lines))
        with log_path.open("a") as out:
            for i in range(500):
                out.write(f"[2026-11-29 10:46:56] appended {i}\n")
        assert await wait_for(pilot, lambda: log.lines and log.lines[-1].endswith("appended 499"))
        assert log.is_vertical_scroll_end
        log.scroll_home(animate=False)
        await pilot.pause()
        with log_path.open("a") as out:
            out.write("[2026-11-29 10:46:57] while scrolled up\n")
        assert await wait_for(pilot, lambda: log.lines[-1].endswith("while scrolled up"))
        assert log.scroll_offset.y == 0, "the log must not jump to the tail while the user reads above"
        await pilot.press("f")
        await pilot.pause()
        assert log.is_vertical_scroll_end


async def test_log_pane_is_bounded():
    app = fixture_app(max_lines=200)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        log = app.screen.query_one("#log")
        for batch in range(5):
            lines = [f"line {batch}-{i}" for i in range(100)]
            log.write_classified(lines, ["error" if i % 10 == 0 else None for i in range(100)])
        assert len(log.lines) == 200
        assert log.lines[0] == "line 3-0" and log.lines[-1] == "line 4-99"
        assert log.kind_at(0) == "error" and log.kind_at(1) is None


async def test_tqdm_frames_do_not_flood_the_log(tmp_path):
    log_path = tmp_path / "server.log"
    frames = "".join(f"\rCapturing batches (bs=8 avail_mem=10.00 GB): {i}/52" for i in range(52))
    log_path.write_bytes(f"[2026-11-29 10:47:00] before\n{frames}\n[2026-11-29 10:47:05] after\n".encode())
    app = following_app(log_path)
    async with app.run_test(size=(80, 24)) as pilot:
        log = app.screen.query_one("#log")
        assert await wait_for(pilot, lambda: log.lines and log.lines[-1].endswith("after"))
        assert len([line for line in log.lines if "Capturing batches" in line]) == 1


async def test_unreachable_server_is_shown_within_two_seconds_and_recovers():
    port = free_port()
    app = SpecmonApp(AppConfig(url=f"http://127.0.0.1:{port}", poll=True, poll_interval_s=0.5))
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_for(pilot, lambda: app.current_state() == "unreachable", timeout=2.0)
        assert await wait_for(pilot, lambda: "unreachable" in screen_text(app))
        server = subprocess.Popen(
            [sys.executable, str(REPLAY), "--port", str(port)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert server.stdout.readline().startswith("LISTENING")
            assert await wait_for(pilot, lambda: app.current_state() == "ready", timeout=2.5)
            await wait_for(pilot, lambda: "EAGLE3" in screen_text(app), timeout=2.0)
            text = screen_text(app)
            assert "EAGLE3" in text and "ready" in text
            server.kill()
            server.wait(5)
            assert await wait_for(pilot, lambda: app.current_state() == "unreachable", timeout=2.0)
            assert await wait_for(pilot, lambda: "unreachable" in screen_text(app))
        finally:
            server.kill()
            server.wait(5)


async def test_command_palette_has_every_action_and_runs_them():
    app = fixture_app(READY_LOG)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        titles = {command.title for command in app.get_system_commands(app.screen)}
        for title in ("Show the GPUs pane", "Search the log", "Toggle light/dark theme", "Run the benchmark"):
            assert title in titles
        assert "Quit" in titles  # Textual's own
        for binding in SpecmonApp.BINDINGS:
            if binding.action not in ("quit", "pick_preset"):
                assert SpecmonApp.ACTION_HELP[binding.action][0] in titles, binding
        assert not any(t.startswith("Switch preset") for t in titles), "attached mode offers no switching"
        await pilot.press("ctrl+p", *"Show the Benchmark pane")
        assert await wait_for(pilot, lambda: _palette_highlights(app, "Show the Benchmark pane"))
        await pilot.press("enter")
        assert await wait_for(pilot, lambda: _active_panes(app) == ["pane-bench"])


def _palette_highlights(app: SpecmonApp, title: str) -> bool:
    """The command palette is open with ``title`` highlighted (its search has caught up with the typing)."""
    lists = app.screen.query(CommandList)
    if not lists:
        return False
    index = lists.first().highlighted
    return index is not None and title in str(lists.first().get_option_at_index(index).prompt)


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_the_footer_shows_every_key_binding_within_80_columns(size):
    app = SpecmonApp(AppConfig(url="http://127.0.0.1:9", poll=False))
    app.check_action = lambda action, parameters: True  # every action offered, switching too, as in the demo
    wanted = {binding.action for binding in SpecmonApp.BINDINGS} | {"command_palette"}

    def shown() -> set[str]:
        return {key.action for key in app.screen.query(FooterKey) if key.region.right <= size[0]}

    async with app.run_test(size=size) as pilot:
        assert await wait_for(pilot, lambda: shown() >= wanted and "^p palette" in screen_text(app), timeout=15)
        footer = screen_text(app).splitlines()[-1]
        for words in ("12345 Pane", "/nN Search", "p Preset", "F8 Shot", "q Quit", "^p palette"):
            assert words in footer, footer


async def test_failed_startup_shows_the_error_panel_with_its_hint():
    app = failed_app()
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_for(pilot, lambda: "Hint:" in screen_text(app))
        error = app.feed.state.error
        assert error is not None and error.hint
        panel = app.screen.query_one("#error-panel")
        assert panel.display and panel.region.height >= 4
        assert error.kind.replace("_", " ") in panel.border_title
        text = screen_text(app)
        assert "Hint:" in text and error.hint.split()[0] in text
        assert app.current_state() == "failed" and "failed" in text.splitlines()[0]
        log = app.screen.query_one("#log")
        assert "error" in {log.kind_at(y) for y in range(len(log.lines))}, "error lines are highlighted"


async def test_ready_server_shows_asked_and_effective_speculative_settings():
    app = ready_app()
    async with app.run_test(size=(200, 50)) as pilot:
        assert await wait_for(pilot, lambda: "num draft tokens: 16 asked, 4 effective" in screen_text(app))
        text = screen_text(app)
        assert "EAGLE3" in text and app.current_state() == "ready"
        assert not app.screen.query_one("#error-panel").display


async def test_mid_capture_the_progress_bar_and_label_follow_the_tqdm_frames():
    app = capturing_app()
    async with app.run_test(size=(80, 24)) as pilot:
        bar = app.screen.query_one("#capture-bar", ProgressBar)
        assert await wait_for(pilot, lambda: app.screen.query_one("#capture").display and bar.total == 8)
        capture = latest_capture(app.feed.state)
        assert capture.status == "running" and capture.total == 8
        assert (bar.total, bar.progress) == (capture.total, capture.done)
        label = str(app.screen.query_one("#capture-label", Label).render())
        assert f"{capture.done}/8" in label and f"bs {capture.current_bs}" in label and "avail" in label
        assert app.current_state().startswith(f"capturing {capture.label} {capture.done}/8")
        assert app.current_state() in screen_text(app).splitlines()[0]
        log = app.screen.query_one("#log")
        assert not any("bs=5" in line for line in log.lines), "frames drive the bar, not the log"


async def test_log_pane_follows_a_rotated_log(tmp_path):
    log_path = tmp_path / "server.log"
    log_path.write_text("[2026-11-29 10:46:55] before rotation\n")
    app = following_app(log_path)
    async with app.run_test(size=(80, 24)) as pilot:
        log = app.screen.query_one("#log")
        assert await wait_for(pilot, lambda: log.lines and log.lines[-1].endswith("before rotation"))
        log_path.rename(tmp_path / "server.log.1")
        log_path.write_text("[2026-11-29 10:47:00] after rotation\n")
        assert await wait_for(pilot, lambda: log.lines[-1].endswith("after rotation"))
        log_path.unlink()
        await pilot.pause(0.2)
        log_path.write_text("[2026-11-29 10:48:00] recreated\n")
        assert await wait_for(pilot, lambda: log.lines[-1].endswith("recreated"))


async def test_b_runs_the_benchmark_and_the_panel_shows_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    server = subprocess.Popen([sys.executable, str(REPLAY), "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline().split()[1])
        app = SpecmonApp(AppConfig(url=f"http://127.0.0.1:{port}", poll=False))
        async with app.run_test(size=(200, 50)) as pilot:
            await pilot.pause()
            await pilot.press("b")
            assert await wait_for(pilot, lambda: app.bench_running or bool(app.bench_results))
            assert await wait_for(pilot, lambda: bool(app.bench_results), timeout=60)
            assert app.bench_results[0].status == "finished" and not app.bench_running
            assert await wait_for(pilot, lambda: "finished" in screen_text(app), timeout=10)
        assert list(tmp_path.rglob("*.jsonl")), "the run is saved in the state directory"
    finally:
        server.kill()
        server.wait(5)


def _timeline(app: SpecmonApp) -> str:
    return app.screen.query_one("#timeline").plain


def _running_phase_s(app: SpecmonApp) -> float:
    """The seconds the timeline shows for the running target-graph capture (``▶ verify graphs 3.0s``)."""
    shown = re.search(r"▶ verify graphs (\d+\.\d)s", _timeline(app))
    assert shown, _timeline(app)
    return float(shown.group(1))


def _mid_capture_log_app(tmp_path) -> tuple[SpecmonApp, Path]:
    """An app following a real file that ends inside the target graphs' tqdm frames (no server)."""
    log_path = tmp_path / "server.log"
    log_path.write_bytes(fixture_bytes(READY_LOG, until="Capturing batches (bs=5", mid_line=True))
    return following_app(log_path), log_path


async def test_running_phase_counts_on_while_only_frames_arrive_and_stops_with_them(tmp_path):
    app, log_path = _mid_capture_log_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        assert await wait_for(pilot, lambda: "▶ verify graphs" in _timeline(app))
        logged = _running_phase_s(app)
        for second in range(6):  # a slow capture: a frame every half second, no timestamped line
            with log_path.open("ab") as log:
                log.write(f"\rCapturing batches (bs=5 avail_mem=96.05 GB):  12%| | 1/8 [00:{second:02d}<00:13]".encode())
            await pilot.pause(0.5)
        assert await wait_for(pilot, lambda: _running_phase_s(app) >= logged + 2.0, timeout=2.0)
        grown = _running_phase_s(app)
        await pilot.pause(2.2)
        assert _running_phase_s(app) == grown, "with no sign of life the duration stops counting"


async def test_an_old_log_read_at_once_does_not_count_on(tmp_path):
    app, _ = _mid_capture_log_app(tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        assert await wait_for(pilot, lambda: "▶ verify graphs" in _timeline(app))
        logged = _running_phase_s(app)
        await pilot.pause(2.5)
        assert _running_phase_s(app) == logged



class _OneReading:
    """A GPU source that hands out one recorded H200 reading, counting reads."""

    def __init__(self) -> None:
        reading = json.loads((Path(__file__).parents[1] / "fixtures" / "gpu" / "h200-real-torch-20g.json").read_text())
        self.snapshot, self.reads = GpuSnapshot.from_json(reading), 0

    def read(self) -> GpuSnapshot:
        self.reads += 1
        return self.snapshot

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("make_app", "interval_s"), [(ready_app, 10.0), (capturing_app, 1.0)])
async def test_the_gpus_are_read_and_repainted_every_few_seconds_only_while_ready_and_idle(make_app, interval_s):
    app = make_app()
    app.config.gpu_source = source = _OneReading()
    async with app.run_test(size=(200, 50)) as pilot:
        pane = app.screen.query_one("#gpu-pane")
        assert await wait_for(pilot, lambda: pane.snapshot is source.snapshot)
        sampler = app.sources.gpu_sampler
        assert await wait_for(pilot, lambda: sampler.interval_s == interval_s), (app.current_state(), sampler.interval_s)
        if interval_s > 1:  # a benchmark makes the GPUs worth reading every second again, and at once
            app.bench_running = True
            app._pace_gpus()
            assert sampler.interval_s == 1.0


async def test_at_80x24_the_whole_phase_strip_shows_through_ready():
    app = ready_app()
    async with app.run_test(size=(80, 24)) as pilot:
        timeline = app.screen.query_one("#timeline")

        def lines() -> list:
            return timeline.row.lines(timeline.content_size.width) if timeline.row is not None else []

        def whole_strip_shown() -> bool:
            return len(lines()) >= 4 and timeline.size.height == len(lines()) and "✔ ready" in screen_text(app)

        assert await wait_for(pilot, whole_strip_shown), lines()


@pytest.mark.parametrize("log", [FAILED_LOG, "synthetic/legacy-0.5.9-capture-cuda-oom.log",
                                 "10-qwen3-fp8-v0.4.7-capture-scheduler-exception-partial.log"])
@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_a_failed_startup_gives_one_notification_esc_dismisses_and_the_hint_is_never_cut(log, size):
    app = fixture_app(log)
    async with app.run_test(size=size) as pilot:
        assert await wait_for(pilot, lambda: app.screen.query_one("#error-panel").display and app._notifications)
        error = app.feed.state.error
        notes = list(app._notifications)
        assert len(notes) == 1
        assert (notes[0].title, notes[0].message) == failure_notice(error)
        app.flush_feed(force=True)  # the same failure again: no second notification
        await pilot.pause()
        assert len(app._notifications) == 1
        panel = app.screen.query_one("#error-panel")
        hint_words = " ".join((error.hint or error.message).split())
        shown = " ".join(" ".join(strip.text.strip(" ┃") for strip in panel.render_lines(panel.region.reset_offset)).split())
        assert hint_words in shown
        await pilot.press("escape")
        assert await wait_for(pilot, lambda: not app._notifications)


@pytest.mark.parametrize("width", [80, 200])
async def test_the_error_panels_hint_shows_whole_above_a_long_message(width):
    from textual.app import App

    from specmon.logs.model import StartupError
    from specmon.widgets.error_panel import ErrorPanel

    hint = "CUDA ran out of memory while capturing graphs: lower --mem-fraction-static (now 0.85; e.g. 0.8)"
    error = StartupError("cuda_oom", "Exception: CUDA out of memory. " + "Tried to allocate 1.50 GiB. " * 40, hint=hint)

    class PanelApp(App):
        def compose(self):
            yield ErrorPanel()

    app = PanelApp()
    async with app.run_test(size=(width, 50)) as pilot:
        panel = app.query_one(ErrorPanel)
        panel.show(error)
        await pilot.pause()
        shown = " ".join(" ".join(s.text.strip(" ┃") for s in panel.render_lines(panel.region.reset_offset)).split())
        assert "Hint: " + hint in shown


@pytest.mark.parametrize(
    ("line", "poll"),
    [
        ('[2026-11-29 10:48:39] INFO:     127.0.0.1:40748 - "GET /model_info HTTP/1.1" 200 OK', True),
        ('[2026-11-29 10:48:42] INFO:     127.0.0.1:40762 - "GET /health HTTP/1.1" 503 Service Unavailable', True),
        ('INFO:     127.0.0.1:1 - "GET /get_server_info HTTP/1.1" 200 OK', True),
        ('[2026-11-29 10:48:40] INFO:     127.0.0.1:40756 - "POST /generate HTTP/1.1" 200 OK', False),
        ("[2026-11-29 10:48:42] Decode batch, #running-req: 1, #token: 24", False),
    ],
)
def test_polling_access_lines_are_recognised(line, poll):
    from specmon.view.log_feed import POLL_KIND, with_poll_kind

    assert (with_poll_kind(line, None) == POLL_KIND) is poll
    assert with_poll_kind(line, "error") == "error"


async def test_the_apps_own_polling_requests_are_hidden_from_the_log_until_h():
    app = fixture_app(READY_LOG)
    async with app.run_test(size=(80, 24)) as pilot:
        log = app.screen.query_one("#log")

        def polls() -> int:
            return sum('"GET /health' in line or '"GET /model_info' in line for line in log.lines)

        assert await wait_for(pilot, lambda: any('"POST /generate' in line for line in log.lines))
        assert polls() == 0
        await pilot.press("h")
        assert await wait_for(pilot, lambda: polls() > 0)
        assert any('"POST /generate' in line for line in log.lines)
        await pilot.press("h")
        assert await wait_for(pilot, lambda: polls() == 0)


async def test_a_ready_servers_stream_of_lines_is_written_by_one_shots_and_a_startup_at_10_hz(tmp_path):
    """The 10 Hz flush runs only during a startup; a ready server's lines, a stream too, are written by one-shot
    timers when they are due (each look of a timer costs; about 0.2 % of a core idle, 0.1 % following a stream)."""
    log_path = tmp_path / "server.log"
    log_path.write_bytes(fixture_bytes(READY_LOG, until="SIGTERM received"))
    app = following_app(log_path)
    async with app.run_test(size=(80, 24)) as pilot:
        log = app.screen.query_one("#log")
        assert await wait_for(pilot, lambda: app.current_state() == "ready" and not app.cadence.often_active)
        resumed = []
        resume = app.cadence._often.resume
        app.cadence._often.resume = lambda: (resumed.append(True), resume())
        line = "[2026-11-29 10:49:{:02d}] Decode batch, #running-req: 1, #token: 90, token usage: 0.00, accept len: 2.10\n"
        with log_path.open("a") as out:
            out.write("".join(line.format(i % 60) for i in range(400)) + "[2026-11-29 10:50:00] the stream's end\n")
        assert await wait_for(pilot, lambda: log.lines[-1].endswith("the stream's end"))
        assert not resumed and not app.cadence.often_active and not app.cadence.due_set
    starting = capturing_app()
    async with starting.run_test(size=(80, 24)) as pilot:
        assert await wait_for(pilot, lambda: starting._started and starting.current_state().startswith("capturing"))
        assert starting.cadence.needs_often() and starting.cadence.often_active
