"""The reading taken on a real H200 (driver 580.159.04) under a 20 GiB PyTorch load, replayed.

`tests/fixtures/gpu/h200-real-2026-11-29/` holds what nvidia-smi said at the same moment as
`specmon gpus --json` (`h200-real-torch-20g.json`); see the README there for how it was produced.
"""

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

from textual.app import App, ComposeResult
from textual.widgets import DataTable, Static

from specmon.gpu.model import GpuSnapshot
from specmon.widgets.gpu_pane import GpuPane, GpuRow

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "gpu"
REAL = FIXTURES / "h200-real-2026-11-29"
LOAD_PID = 457


def nvidia_smi_csv(name: str) -> list[dict[str, str]]:
    """nvidia-smi's `--format=csv` rows as dicts keyed by the header (`memory.used [MiB]`, ...)."""
    with (REAL / name).open(newline="") as fh:
        reader = csv.reader(fh, skipinitialspace=True)
        header = next(reader)
        return [dict(zip(header, row, strict=True)) for row in reader if row]


def quantity(cell: str, unit: str) -> float:
    """`20941 MiB` -> 20941.0, checking the unit nvidia-smi printed."""
    value, _, got = cell.partition(" ")
    assert got == unit, (cell, unit)
    return float(value)


def load_json(path: Path) -> GpuSnapshot:
    return GpuSnapshot.from_json(json.loads(path.read_text()))


def test_specmon_agrees_with_nvidia_smi_on_the_loaded_h200():
    snapshot = load_json(FIXTURES / "h200-real-torch-20g.json")
    smi_gpus = nvidia_smi_csv("nvidia-smi-gpu.csv")
    assert snapshot.available and snapshot.driver == "580.159.04"
    assert len(smi_gpus) == len(snapshot.gpus) == 1
    by_uuid = {g.uuid: g for g in snapshot.gpus}
    for row in smi_gpus:
        gpu = by_uuid[row["uuid"]]
        assert gpu.name == row["name"] == "NVIDIA H200"
        smi_used = quantity(row["memory.used [MiB]"], "MiB")
        assert 20 * 1024 < smi_used < 21 * 1024  # the load really held about 20 GiB
        assert abs(gpu.memory_used_mib - smi_used) <= max(64.0, 0.01 * smi_used)
        assert gpu.memory_total_mib == quantity(row["memory.total [MiB]"], "MiB")
        smi_util = quantity(row["utilization.gpu [%]"], "%")
        assert smi_util >= 90 and abs(gpu.util_gpu_pct - smi_util) <= 15
        assert abs(gpu.power_limit_w - quantity(row["power.limit [W]"], "W")) < 1
        assert abs(gpu.power_w - quantity(row["power.draw [W]"], "W")) < 50

    smi_apps = {int(r["pid"]): r for r in nvidia_smi_csv("nvidia-smi-apps.csv")}
    ours = {p.pid: p for p in snapshot.processes}
    assert set(ours) == set(smi_apps) == {LOAD_PID}
    for pid, row in smi_apps.items():
        proc = ours[pid]
        assert abs(proc.used_mib - quantity(row["used_gpu_memory [MiB]"], "MiB")) <= 64
        assert by_uuid[row["gpu_uuid"]].index == proc.gpu_index
        assert proc.alive and proc.state == "running" and not proc.zombie
        assert "h200_gpu_check.py load" in proc.name  # the full command line, not just "python3"


def test_after_the_load_stopped_the_memory_is_back_to_idle_and_no_process_is_left():
    idle = load_json(REAL / "specmon-gpus-idle.json")
    after = load_json(REAL / "specmon-gpus-after.json")
    assert nvidia_smi_csv("nvidia-smi-apps-after.csv") == []
    assert after.processes == []
    for before, now in zip(idle.gpus, after.gpus, strict=True):
        assert before.uuid == now.uuid
        assert abs(now.memory_used_mib - before.memory_used_mib) <= 256
        assert now.util_gpu_pct == 0.0 and "power cap" not in now.throttle_reasons


def test_the_check_script_passes_on_the_saved_reading(tmp_path):
    """`scripts/h200_gpu_check.py compare` re-run on the saved files reaches the device run's verdict."""
    for name in ("nvidia-smi-gpu.csv", "nvidia-smi-apps.csv"):
        shutil.copy(REAL / name, tmp_path / name)
    shutil.copy(FIXTURES / "h200-real-torch-20g.json", tmp_path / "specmon-gpus.json")
    (tmp_path / "load.ready").write_text(f"{LOAD_PID}\n")
    done = subprocess.run([sys.executable, "-m", "scripts.h200_gpu_check", "compare", str(tmp_path)],
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = json.loads((tmp_path / "compare.json").read_text())
    saved = json.loads((REAL / "compare.json").read_text())
    assert verdict == saved


class PaneApp(App):
    def __init__(self, snapshot: GpuSnapshot):
        super().__init__()
        self.snapshot = snapshot

    def compose(self) -> ComposeResult:
        yield GpuPane()

    def on_mount(self) -> None:
        self.query_one(GpuPane).show(self.snapshot)


async def test_the_pane_shows_the_real_reading_at_80x24():
    snapshot = load_json(FIXTURES / "h200-real-torch-20g.json")
    app = PaneApp(snapshot)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        rows = list(app.query(GpuRow))
        assert [r.index for r in rows] == [0]
        info = rows[0].query_one(".gpu-info", Static)
        text = "\n".join(s.text for s in info.render_lines(info.region.reset_offset))
        for part in ("GPU 0 NVIDIA H200", "20.5/140.4 GiB", "util 100%", "692/700 W", "59°C",
                     "SM 1455 MHz", "PCIe ↑21 MB/s ↓27 MB/s", "clocks: power cap"):
            assert part in text, part
        strips = info.render_lines(info.region.reset_offset)
        flagged = [seg for strip in strips for seg in strip if seg.text.strip() == "power cap"]
        assert len(flagged) == 2 and all(seg.style.bold for seg in flagged)  # the flag and the clocks line
        plain = next(seg for strip in strips for seg in strip if "20.5/140.4 GiB" in seg.text)
        assert all(seg.style.color != plain.style.color for seg in flagged)  # in a warning colour
        header = app.query_one("#gpu-header", Static)
        assert str(header.render()).startswith("1 × NVIDIA H200  ·  driver 580.159.04  ·  trends")
        table = app.query_one("#gpu-processes", DataTable)
        assert table.row_count == 1
        gpu, pid, user, memory, state, command = (str(c) for c in table.get_row(f"0:{LOAD_PID}"))
        assert (gpu, pid, user, memory, state) == ("0", str(LOAD_PID), "root", "20.4 GiB", "running")
        assert command.startswith("python3 scripts/h200_gpu_check.py load --gib 20")
