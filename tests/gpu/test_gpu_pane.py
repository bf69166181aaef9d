"""GpuPane replaying fixture snapshots: compact and detailed rows, trends, processes, zombies, NVML missing."""

import copy
import dataclasses
from pathlib import Path

from textual.app import App, ComposeResult
from textual.widgets import DataTable, Label, Static

from specmon.gpu.model import GpuProcess, GpuSnapshot
from specmon.widgets.gpu_pane import DETAIL_INFO_LINES, GpuPane, GpuRow
from specmon.widgets.gpu_trend import TrendChart, bar_lines, columns
from tests.support.gpu_fixtures import load, replay

FIXTURES = Path(__file__).parents[1] / "fixtures" / "gpu"


class PaneApp(App):
    def __init__(self, snapshots=()):
        super().__init__()
        self.snapshots = list(snapshots)

    def compose(self) -> ComposeResult:
        yield GpuPane()

    def on_mount(self) -> None:
        for snap in self.snapshots:
            self.query_one(GpuPane).show(snap)


def header_text(app) -> str:
    return str(app.query_one("#gpu-header", Static).render())


async def test_eight_gpus_get_compact_rows_and_a_process_table():
    app = PaneApp()
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(GpuPane)
        for snap in replay(load("h200x8-sglang-tp8.json"), 5):
            pane.show(snap)
            await pilot.pause()
        assert pane.has_class("-compact")
        rows = list(app.query(GpuRow))
        assert [r.index for r in rows] == list(range(8))
        assert all(r.size.height == 1 for r in rows)
        assert "8 × NVIDIA H200" in header_text(app) and "1 zombie holds 2.1 GiB" in header_text(app)
        assert "trends: util | mem, last 4 s" in header_text(app)
        assert rows[0].trend("util") == [float((88 + 7 * s) % 101) for s in range(5)]
        assert [c.size.height for c in rows[0].query(TrendChart)] == [1, 1]  # util and memory, one line each
        table = app.query_one("#gpu-processes", DataTable)
        assert table.row_count == 9
        zombie = table.get_row("3:2869913")
        assert str(zombie[4]) == "ZOMBIE (gone)" and zombie[4].style == "bold red"
        live = table.get_row("0:2871040")
        assert str(live[5]) == "sglang::scheduler_TP0" and live[4].style == ""


async def test_a_snapshot_shown_before_mount_is_rendered_on_mount():
    pane = GpuPane()
    pane.show(load("h200x1-torch-load.json"))

    class Late(App):
        def compose(self) -> ComposeResult:
            yield pane

    app = Late()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert "1 × NVIDIA H200" in header_text(app)
        assert app.query_one("#gpu-processes", DataTable).row_count == 1


def info_lines(widget) -> list[str]:
    info = widget.query_one(".gpu-info", Static)
    return [line.text.rstrip() for line in info.render_lines(info.region.reset_offset)]


async def test_one_gpu_gets_detail_lines_and_tall_charts():
    app = PaneApp([load("h200x1-torch-load.json")])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        pane = app.query_one(GpuPane)
        assert not pane.has_class("-compact")
        row = app.query_one(GpuRow)
        lines = info_lines(row)
        text = "\n".join(lines)
        assert len(lines) == 4 and "GPU 0 NVIDIA H200" in lines[0]
        for part in ("20.3/140.4 GiB", "util 97%", "431/700 W", "47°C", "SM 1980 MHz", "PCIe ↑1 MB/s ↓830 KB/s"):
            assert part in text, part
        charts = list(row.query(TrendChart))
        assert len(charts) == 4 and all(c.size.height >= 8 for c in charts)  # the room left by one GPU
        labels = [str(label.render()) for label in row.query(".chart-label").results(Label)]
        assert labels == ["util 97%", "mem 20.3/140.4 GiB", "power 431/700 W", "temp 47°C"]
        table = app.query_one("#gpu-processes", DataTable)
        assert table.region.y > max(c.region.bottom for c in charts)  # nothing overlaps the process table


async def test_at_80_columns_no_reading_is_cut_or_overlapped():
    real = load("h200-real-torch-20g.json")
    app = PaneApp([real])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        row = app.query_one(GpuRow)
        assert not any("…" in line for line in info_lines(row))
        info = row.query_one(".gpu-info", Static)
        charts = row.query_one(".gpu-charts")
        assert info.region.right <= 80 and charts.region.y >= info.region.bottom
        for label in row.query(".chart-label").results(Label):
            assert len(str(label.render())) <= label.size.width, str(label.render())


async def test_four_gpus_share_the_height_and_sixteen_keep_one_line_each():
    four = load("h200x8-sglang-tp8.json")
    four.gpus = four.gpus[:4]
    app = PaneApp([four])
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause()
        rows = list(app.query(GpuRow))
        assert len(rows) == 4 and not app.query_one(GpuPane).has_class("-compact")
        heights = {c.size.height for r in rows for c in r.query(TrendChart)}
        assert len(heights) == 1 and heights.pop() >= 2
        assert max(r.region.bottom for r in rows) <= app.query_one("#gpu-processes").region.y
        sixteen = load("h200x8-sglang-tp8.json")
        sixteen.gpus = sixteen.gpus + [dataclasses.replace(g, index=g.index + 8, processes=[]) for g in sixteen.gpus]
        app.query_one(GpuPane).show(sixteen)
        await pilot.pause()
        await pilot.pause()
        rows = list(app.query(GpuRow))
        assert len(rows) == 16 and all(r.size.height == 1 for r in rows)


async def test_constant_memory_draws_a_low_flat_bar_on_a_fixed_scale():
    real = load("h200-real-torch-20g.json")
    app = PaneApp(replay_constant(real, 30))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        row = app.query_one(GpuRow)
        mem = row.query_one(".mem-trend", TrendChart)
        assert mem.top == 143771.0 and len(set(mem.values)) == 1
        lines = mem.render().plain.split("\n")
        assert len(lines) == mem.size.height >= 8
        assert lines[-1] == "█" * mem.size.width  # 20.5 of 140 GiB fills the bottom line or so, every column
        assert all(line.strip() == "" for line in lines[:-2])  # and nothing near the top
        util = row.query_one(".util-trend", TrendChart)
        assert util.top == 100.0 and util.render().plain.split("\n") == ["█" * util.size.width] * util.size.height


def test_bar_lines_use_a_fixed_scale_and_average_extra_points():
    assert bar_lines([50.0, 100.0], 100.0, 4, 1) == ["  ▄█"]
    assert bar_lines([0.5], 100.0, 2, 2) == ["  ", " ▁"]  # above zero never draws as nothing
    assert bar_lines([75.0], 100.0, 1, 2) == ["▄", "█"]
    assert bar_lines([200.0, -5.0], 100.0, 2, 1) == ["█ "]
    assert columns([1.0, 3.0, 5.0, 7.0], 2) == [2.0, 6.0]


def replay_constant(snapshot: GpuSnapshot, count: int) -> list[GpuSnapshot]:
    out = []
    for step in range(count):
        snap = copy.deepcopy(snapshot)
        snap.taken_at += step
        out.append(snap)
    return out


async def test_unavailable_nvml_shows_the_reason_and_hides_the_rest():
    reason = "libnvidia-ml.so not found: no NVIDIA driver on this machine"
    app = PaneApp([load("h200x1-torch-load.json"), GpuSnapshot.unavailable(reason)])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert header_text(app) == f"NVML unavailable: {reason}"
        assert app.query_one("#gpu-rows").styles.display == "none"
        assert app.query_one("#gpu-processes").styles.display == "none"
        header = app.query_one("#gpu-header", Static)
        assert header.region.height > 1, "the reason wraps, with padding"
        app.query_one(GpuPane).show(load("h200x1-torch-load.json"))
        await pilot.pause()
        assert app.query_one("#gpu-processes").styles.display == "block"
        assert header.region.height == 1


async def test_processes_update_in_place_and_leave_when_gone():
    first = load("h200x1-torch-load.json")
    second = copy.deepcopy(first)
    second.gpus[0].processes[0].used_mib = 30_720.0
    second.gpus[0].processes.append(GpuProcess(pid=999, used_mib=512.0, name="(process gone)", alive=False,
                                               gpu_index=0, state="defunct"))
    third = copy.deepcopy(second)
    del third.gpus[0].processes[0]
    app = PaneApp()
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(GpuPane)
        table = app.query_one("#gpu-processes", DataTable)
        pane.show(first)
        await pilot.pause()
        assert [str(c) for c in table.get_row("0:12345")][:4] == ["0", "12345", "root", "19.8 GiB"]
        pane.show(second)
        await pilot.pause()
        assert str(table.get_row("0:12345")[3]) == "30.0 GiB" and table.row_count == 2
        second.gpus[0].processes[0].used_mib = 130_000.0  # a wider value widens its column
        pane.show(second)
        await pilot.pause()
        assert table.columns["memory"].content_width >= len("127.0 GiB")
        assert str(table.get_row("0:999")[4]) == "ZOMBIE (defunct)"
        pane.show(third)
        await pilot.pause()
        assert table.row_count == 1 and str(table.get_row("0:999")[1]) == "999"


async def test_rows_follow_a_change_in_gpu_count_and_lost_gpus():
    eight = load("h200x8-sglang-tp8.json")
    one = load("h200x1-torch-load.json")
    lost = copy.deepcopy(one)
    lost.gpus[0].error = "GPU is lost (fell off the bus or hung)"
    app = PaneApp()
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(GpuPane)
        pane.show(eight)
        await pilot.pause()
        pane.show(one)
        await pilot.pause()
        await pilot.pause()
        assert [r.index for r in app.query(GpuRow)] == [0] and not pane.has_class("-compact")
        info = app.query_one(".gpu-info", Static)
        assert info.region.height == DETAIL_INFO_LINES
        pane.show(lost)
        await pilot.pause()
        assert "1 lost" in header_text(app)
        assert "GPU is lost" in "\n".join(s.text for s in info.render_lines(info.region.reset_offset))
        assert info.region.height == 1, "the error's one line replaces the readings' four"
        pane.show(one)
        await pilot.pause()
        assert info.region.height == DETAIL_INFO_LINES, "the readings come back with their height"


def test_snapshot_eight_h200s_80x24(snap_compare):
    assert snap_compare(PaneApp(replay(load("h200x8-sglang-tp8.json"))), terminal_size=(80, 24))


def test_snapshot_one_h200_200x50(snap_compare):
    assert snap_compare(PaneApp(replay(load("h200x1-torch-load.json"))), terminal_size=(200, 50))


def test_snapshot_eight_h200s_200x50(snap_compare):
    assert snap_compare(PaneApp(replay(load("h200x8-sglang-tp8.json"))), terminal_size=(200, 50))


def test_snapshot_nvml_unavailable_80x24(snap_compare):
    reason = ("libnvidia-ml.so not found: no NVIDIA driver on this machine, or a container started without "
              "the GPU driver libraries")
    assert snap_compare(PaneApp([GpuSnapshot.unavailable(reason)]), terminal_size=(80, 24))


async def test_every_fixture_replays_through_the_pane():
    """Every saved reading (the synthetic ones and real H200 readings added later) renders every GPU."""
    for path in sorted(FIXTURES.glob("*.json")):
        snapshot = load(path.name)
        app = PaneApp([snapshot])
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            rows = list(app.query(GpuRow))
            assert [r.index for r in rows] == [g.index for g in snapshot.gpus], path.name
            table = app.query_one("#gpu-processes", DataTable)
            assert table.row_count == len(snapshot.processes), path.name
            for gpu in snapshot.gpus:
                if gpu.error is None and gpu.memory_used_mib is not None:
                    info = rows[gpu.index].query_one(".gpu-info", Static)
                    text = "\n".join(s.text for s in info.render_lines(info.region.reset_offset))
                    assert f"{gpu.memory_used_mib / 1024:.1f}/" in text, path.name


async def test_the_header_leaves_out_the_driver_rather_than_be_cut_at_80_columns():
    snapshot = load("h200x8-sglang-tp8.json")
    snapshot.driver = "570.133.20-emulated"
    for size, driver_shown in (((80, 24), False), ((200, 50), True)):
        app = PaneApp(replay(snapshot, 3))
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            header = app.query_one("#gpu-header", Static)
            text = header_text(app)
            assert ("driver 570.133.20-emulated" in text) == ("NVLink" in text) == driver_shown, text
            assert text.startswith("8 × NVIDIA H200") and text.endswith("trends: util | mem, last 2 s"), text
            assert len(text) <= header.content_size.width, text


async def test_a_reading_that_shows_the_same_repaints_nothing_and_a_changed_one_repaints_its_row():
    """An idle GPU's readings often stand still; its row's readings and trends are repainted only when what they
    draw changes (each repaint of eight rows cost ~20 ms)."""
    snapshots = replay(load("h200x8-sglang-tp8.json"), 40)
    app = PaneApp()
    async with app.run_test(size=(200, 50)) as pilot:
        pane = app.query_one(GpuPane)
        still = copy.deepcopy(snapshots[0])
        for n in range(100):  # the trends fill their width with the same reading (fewer than they keep)
            pane.show(copy.deepcopy(still))
            if n % 50 == 0:
                await pilot.pause()
        await pilot.pause()
        repainted: list[str] = []
        for widget in [*app.query(".gpu-info"), *app.query(TrendChart)]:
            refresh = widget.refresh
            widget.refresh = lambda *a, w=widget, r=refresh, **k: (repainted.append(type(w).__name__), r(*a, **k))[1]
        pane.show(copy.deepcopy(still))
        await pilot.pause()
        assert repainted == []
        changed = copy.deepcopy(still)
        changed.gpus[3] = dataclasses.replace(changed.gpus[3], power_w=(still.gpus[3].power_w or 0) + 40)
        pane.show(changed)
        await pilot.pause()
        assert repainted == ["Static"]  # GPU 3's readings; its trends (utilization, memory) draw the same
        assert f"{(still.gpus[3].power_w or 0) + 40:.0f}W" in app.export_screenshot()
        repainted.clear()
        dropped = copy.deepcopy(changed)
        dropped.gpus[5] = dataclasses.replace(dropped.gpus[5], util_gpu_pct=0.0 if (still.gpus[5].util_gpu_pct or 0) > 50 else 100.0)
        for _ in range(60):  # GPU 5's utilization moves far for a while: its trend draws it
            pane.show(copy.deepcopy(dropped))
        await pilot.pause()
        assert "TrendChart" in repainted and repainted.count("Static") == 1
