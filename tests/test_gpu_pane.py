"""GpuPane replaying fixture snapshots: compact and detailed rows, trends, processes, zombies, NVML missing."""

import copy
import json
from pathlib import Path

from textual.app import App, ComposeResult
from textual.widgets import DataTable, Sparkline, Static

from tui.gpu.model import GpuProcess, GpuSnapshot
from widgets.gpu_pane import GpuPane, GpuRow

FIXTURES = Path(__file__).parent / "fixtures" / "gpu"


def load(name: str) -> GpuSnapshot:
    return GpuSnapshot.from_json(json.loads((FIXTURES / name).read_text()))


def replay(snapshot: GpuSnapshot, count: int = 30) -> list[GpuSnapshot]:
    """`count` snapshots one second apart whose utilization and memory move deterministically."""
    out = []
    for step in range(count):
        snap = copy.deepcopy(snapshot)
        snap.taken_at += step
        for gpu in snap.gpus:
            if gpu.util_gpu_pct is not None:
                gpu.util_gpu_pct = float((gpu.util_gpu_pct + 7 * step + 13 * gpu.index) % 101)
            if gpu.memory_used_mib is not None:
                gpu.memory_used_mib = min(gpu.memory_total_mib, gpu.memory_used_mib * (0.6 + 0.4 * step / count))
        out.append(snap)
    return out


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
        util = rows[0].query_one(".util-trend", Sparkline)
        assert list(util.data) == [float((88 + 7 * s) % 101) for s in range(5)]
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


async def test_one_gpu_gets_detail_lines():
    app = PaneApp([load("h200x1-torch-load.json")])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        pane = app.query_one(GpuPane)
        assert not pane.has_class("-compact")
        row = app.query_one(GpuRow)
        assert row.size.height == 3
        info = app.query_one(".gpu-info", Static)
        lines = [line.text for line in info.render_lines(info.region.reset_offset)]
        text = "\n".join(lines)
        assert "GPU 0 NVIDIA H200" in lines[0]
        for part in ("20.3/140.4 GiB", "util 97%", "431/700 W", "47°C", "SM 1980 MHz", "PCIe ↑1 MB/s ↓830 KB/s"):
            assert part in text, part


async def test_unavailable_nvml_shows_the_reason_and_hides_the_rest():
    reason = "libnvidia-ml.so not found: no NVIDIA driver on this machine"
    app = PaneApp([load("h200x1-torch-load.json"), GpuSnapshot.unavailable(reason)])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert header_text(app) == f"NVML unavailable: {reason}"
        assert app.query_one("#gpu-rows").styles.display == "none"
        assert app.query_one("#gpu-processes").styles.display == "none"
        app.query_one(GpuPane).show(load("h200x1-torch-load.json"))
        await pilot.pause()
        assert app.query_one("#gpu-processes").styles.display == "block"


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
        pane.show(lost)
        await pilot.pause()
        assert "1 lost" in header_text(app)
        info = app.query_one(".gpu-info", Static)
        assert "GPU is lost" in "\n".join(s.text for s in info.render_lines(info.region.reset_offset))


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
