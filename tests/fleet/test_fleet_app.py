"""The fleet screen: SVG snapshots at 80x24 and 200x50 (fed a fixed snapshot, no Prometheus), a stale
snapshot dimmed with the error in one line, the keys and palette, and Enter's drill-down command.

Regenerate after an intended change: `.venv/bin/python -m pytest tests/fleet/test_fleet_app.py --snapshot-update`.
"""

from __future__ import annotations

import pytest
from textual import events

from specmon.widgets.fleet_table import FleetView
from tests.support.app_harness import screen_text, wait_for
from tests.support.fleet_harness import PROMETHEUS, fleet_app, fleet_snapshot

SIZES = {"80x24": (80, 24), "200x50": (200, 50)}


def _showing(stale: bool = False):
    async def run_before(pilot) -> None:
        if stale:
            pilot.app.show(fleet_snapshot())
        pilot.app.show(fleet_snapshot(stale=stale))
        await pilot.pause(0.2)

    return run_before


@pytest.mark.parametrize("size", SIZES)
def test_fleet(snap_compare, size):
    assert snap_compare(fleet_app(), terminal_size=SIZES[size], run_before=_showing())


def test_fleet_stale_at_80x24(snap_compare):
    assert snap_compare(fleet_app(), terminal_size=(80, 24), run_before=_showing(stale=True))


async def test_rows_sorted_columns_drop_and_stale_dims():
    app = fleet_app()
    async with app.run_test(size=(80, 24)) as pilot:
        app.show(fleet_snapshot())
        await pilot.pause(0.1)
        view = app.query_one(FleetView)
        text = screen_text(app)
        assert "node-c:30000" in text and "down" in text and "15 min tok/s" in text
        assert "TTFT99" not in text  # dropped at 80 columns
        assert view.table.row_count == 8 and not view.has_class("-stale")
        app.show(fleet_snapshot(stale=True))
        await pilot.pause(0.1)
        assert view.has_class("-stale") and "last snapshot kept: Prometheus" in screen_text(app)
        assert view.table.row_count == 8  # the last rows kept
    app = fleet_app()
    async with app.run_test(size=(200, 50)) as pilot:
        app.show(fleet_snapshot())
        await pilot.pause(0.1)
        text = screen_text(app)
        assert "TTFT99" in text and "KV cache 97% full, 17 queued" in text and "2.35g" in text


async def test_numbers_and_their_headers_right_aligned_and_the_error_in_one_line_at_80_columns():
    app = fleet_app()
    async with app.run_test(size=(80, 24)) as pilot:
        app.show(fleet_snapshot())
        app.show(fleet_snapshot(stale=True))
        await pilot.pause(0.1)
        lines = screen_text(app).splitlines()
        svg = app.export_screenshot()
    (error,) = [line for line in lines if "HTTP 401" in line]
    assert error.strip() == "last snapshot kept: Prometheus answered HTTP 401 (check the credentials)"
    header = next(line for line in lines if "tok/s" in line and "server" in line)
    row = next(line for line in lines if "node-e:30000" in line)
    assert header.index("tok/s") + len("tok/s") == row.index("1510") + len("1510")
    assert header.index("accept") + len("accept") == row.index("1.03") + len("1.03")
    # each cell's text is an SVG <text> of its own, apart from its padding: renderers that drop leading spaces
    # (librsvg) still draw it in its place
    for text in ("1510", "tok/s", "accept", "serving", "node-e:30000"):
        assert f">{text}</text>" in svg, text


async def test_enter_opens_the_selected_server_or_says_how_headless():
    app = fleet_app(read_only=True)
    async with app.run_test(size=(200, 50)) as pilot:
        app.show(fleet_snapshot())
        await pilot.pause(0.1)
        await pilot.press("down", "down")
        assert app.query_one(FleetView).selected_server() == "node-b:30000"
        argv = app.drill_argv("node-b:30000")
        assert argv[3:7] == ["fleet", "--prometheus", PROMETHEUS, "--selector"]
        assert argv[-3:] == ["--server", "node-b:30000", "--read-only"]
        await pilot.press("enter")
        await pilot.pause(0.2)
        notes = [n.message for n in app._notifications]
        assert any("specmon fleet --prometheus" in m and "--server node-b:30000" in m for m in notes), notes


async def test_every_key_is_in_the_footer_and_the_palette():
    from specmon.tui.fleet import ACTION_HELP, BINDINGS

    app = fleet_app()
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_for(pilot, lambda: "Quit" in screen_text(app))  # the footer is drawn
        titles = [command.title for command in app.get_system_commands(app.screen)]
        footer = [line for line in screen_text(app).splitlines() if "Quit" in line][-1]
    for binding in BINDINGS:
        assert ACTION_HELP[binding.action][0] in titles
        assert binding.description in footer


async def test_a_long_fleet_scrolls_with_the_cursor_and_one_changed_figure_redraws_one_row():
    import dataclasses

    base = fleet_snapshot()
    rows = tuple(dataclasses.replace(base.rows[i % len(base.rows)], server=f"srv-{i:03d}:30000") for i in range(60))
    app = fleet_app()
    async with app.run_test(size=(80, 24)) as pilot:
        app.show(dataclasses.replace(base, rows=rows))
        await pilot.pause(0.1)
        view = app.query_one(FleetView)
        assert view.table.row_count == 60 and "srv-000:30000" in screen_text(app)
        await pilot.press("end")
        assert view.selected_server() == "srv-059:30000"
        assert await wait_for(pilot, lambda: "srv-059:30000" in screen_text(app) and "srv-000" not in screen_text(app))
        await pilot.press("home", "down", "pagedown")
        assert view.selected_server() == f"srv-{1 + view.table.size.height - 1:03d}:30000"
        await pilot.press("home")
        assert await wait_for(pilot, lambda: "srv-000:30000" in screen_text(app))
        # a refresh where one server's figure changed draws that row's line again, not the others'
        drawn = view.table._strips.copy()
        changed = list(rows)
        changed[3] = dataclasses.replace(rows[3], decode_tok_s=123456.0)
        app.show(dataclasses.replace(base, rows=tuple(changed)))
        assert await wait_for(pilot, lambda: "123456" in screen_text(app))
        assert len(set(view.table._strips) - set(drawn)) == 1
        # the cursor stays on its server when the order changes
        await pilot.press("down", "down")
        assert view.selected_server() == "srv-002:30000"
        app.show(dataclasses.replace(base, rows=tuple(reversed(changed))))
        await pilot.pause(0.1)
        assert view.selected_server() == "srv-002:30000" and view.table.cursor == 57


async def test_a_snapshot_that_arrives_during_shutdown_is_not_shown():
    import asyncio

    from textual.widget import Widget

    from specmon.tui.fleet import FleetRefreshed

    class LateSnapshot(Widget):
        """Beside the fleet view: as the app shuts down, waits for the view to go, then delivers a snapshot as the
        poller's thread may at that moment."""

        view_gone = False

        async def on_unmount(self) -> None:
            for _ in range(1000):
                if not self.screen.query(FleetView):
                    break
                await asyncio.sleep(0.01)
            self.view_gone = not self.screen.query(FleetView)
            self.app.on_fleet_refreshed(FleetRefreshed(fleet_snapshot()))

    app = fleet_app()
    late = LateSnapshot()
    async with app.run_test(size=(80, 24)) as pilot:
        app.show(fleet_snapshot())
        await app.screen.mount(late)
        await pilot.pause(0.1)
        assert app.snapshots == 1
    assert late.view_gone and app.snapshots == 1, "a snapshot after the view went is dropped, not shown"


async def test_keys_that_arrive_together_act_in_their_order():
    """Down then Enter in one read (typed fast, pasted, or batched by a slow SSH link) opens the row Down moved to,
    not the one the cursor was on: Enter waits its turn behind the keys before it."""
    app = fleet_app(read_only=True)
    async with app.run_test(size=(80, 24)) as pilot:
        app.show(fleet_snapshot())
        await pilot.pause(0.1)
        selected = app.query_one(FleetView).selected_server()
        for key, character in (("down", None), ("down", None), ("enter", "\r")):
            app.post_message(events.Key(key, character))
        assert await wait_for(pilot, lambda: any("--server" in n.message for n in app._notifications))
        notes = [n.message for n in app._notifications]
        assert selected == "node-c:30000"
        assert any("--server node-b:30000" in m for m in notes), notes


async def test_enter_in_the_command_palette_runs_the_command_and_opens_no_server():
    app = fleet_app(read_only=True)
    async with app.run_test(size=(80, 24)) as pilot:
        app.show(fleet_snapshot())
        await pilot.pause(0.1)
        await pilot.press("ctrl+p")
        assert await wait_for(pilot, lambda: app.screen.id == "--command-palette" or "CommandPalette" in
                              type(app.screen).__name__)
        await pilot.press(*"Toggle light", "enter")
        assert await wait_for(pilot, lambda: app.theme == "textual-light")
        await pilot.press("r")  # after the palette's Enter: a drill-down it caused would have come first
        assert not [n.message for n in app._notifications if "--server" in n.message]


async def test_a_server_screen_that_fails_says_so_in_the_fleet(monkeypatch):
    """What the server's screen printed as it failed went to the terminal behind the fleet's screen: the fleet
    says it failed, with its exit code (a real process that exits 3, as `fleet --server` does when the server
    left Prometheus)."""
    import contextlib
    import sys

    app = fleet_app(read_only=True)
    async with app.run_test(size=(80, 24)) as pilot:
        app.show(fleet_snapshot())
        await pilot.pause(0.1)
        monkeypatch.setattr(app, "suspend", contextlib.nullcontext)  # headless: nothing to suspend
        monkeypatch.setattr(app, "drill_argv", lambda server: [sys.executable, "-c", "raise SystemExit(3)", "x", "y"])
        await pilot.press("enter")
        assert await wait_for(pilot, lambda: any("exit code 3" in n.message for n in app._notifications))


async def test_read_only_as_the_web_serves_it_writes_no_screenshot_and_offers_none(tmp_path, monkeypatch):
    """`fleet --web` runs the fleet read-only: F8 writes no SVG there, and neither the footer nor the palette
    offers it; outside read-only F8 saves one."""
    monkeypatch.chdir(tmp_path)
    app = fleet_app(read_only=True)
    async with app.run_test(size=(100, 24)) as pilot:
        app.show(fleet_snapshot())
        assert await wait_for(pilot, lambda: "Quit" in screen_text(app))
        titles = [command.title for command in app.get_system_commands(app.screen)]
        footer = [line for line in screen_text(app).splitlines() if "Quit" in line][-1]
        await pilot.press("f8")
        await pilot.pause(0.2)
    assert "Save an SVG screenshot" not in titles and "Shot" not in footer and "Refresh now" in titles
    assert list(tmp_path.glob("*.svg")) == []
    app = fleet_app()
    async with app.run_test(size=(100, 24)) as pilot:
        app.show(fleet_snapshot())
        await pilot.press("f8")
        assert await wait_for(pilot, lambda: list(tmp_path.glob("*.svg")))


async def test_a_thousand_servers_make_cells_of_the_rows_on_screen_only_and_an_unchanged_refresh_repaints_none(
        monkeypatch):
    import dataclasses

    from specmon.widgets import fleet_table

    made: list[str] = []
    real_cell = fleet_table.cell_pieces
    monkeypatch.setattr(fleet_table, "cell_pieces", lambda text, *a, **k: made.append(text) or real_cell(text, *a, **k))
    drawn: list[int] = []
    real_line = fleet_table.FleetRows.render_line
    monkeypatch.setattr(fleet_table.FleetRows, "render_line", lambda self, y: drawn.append(y) or real_line(self, y))
    base = fleet_snapshot()
    rows = tuple(dataclasses.replace(base.rows[i % len(base.rows)], server=f"srv-{i:04d}:30000") for i in range(1000))
    app = fleet_app()
    async with app.run_test(size=(80, 24)) as pilot:
        app.show(dataclasses.replace(base, rows=rows))
        assert await wait_for(pilot, lambda: "srv-0000:30000" in screen_text(app))
        view = app.query_one(FleetView)
        assert view.table.row_count == 1000
        for _ in range(50):  # until the layout has settled: a pause that draws nothing
            first = len(drawn)
            await pilot.pause(0.2)
            if len(drawn) == first:
                break
        cells = len(view._columns)
        assert 0 < len(made) <= view.table.size.height * cells  # the rows on screen
        made.clear()
        drawn.clear()
        app.show(dataclasses.replace(base, rows=rows))  # the next refresh: the same figures
        await pilot.pause(0.3)
        assert made == [] and drawn == []
        await pilot.press("end")
        assert await wait_for(pilot, lambda: "srv-0999:30000" in screen_text(app))
        assert len(made) <= 2 * view.table.size.height * cells  # the screens scrolled through
