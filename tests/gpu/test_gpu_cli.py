"""`specmon gpus` as a real process on this machine (no NVIDIA library here), and its table."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specmon.gpu.cli import render_table
from specmon.gpu.model import GpuSnapshot

FIXTURES = Path(__file__).parents[1] / "fixtures" / "gpu"
ROOT = Path(__file__).parents[2]


def _nvml_present() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def test_gpus_json_without_nvml_says_why_and_exits_0():
    if _nvml_present():
        pytest.skip("NVML is present on this machine")
    done = subprocess.run([sys.executable, "-m", "specmon", "gpus", "--json"], capture_output=True, text=True,
                          timeout=30, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["available"] is False and data["gpus"] == []
    assert "libnvidia-ml.so not found" in data["reason"]


def test_gpus_table_without_nvml():
    if _nvml_present():
        pytest.skip("NVML is present on this machine")
    done = subprocess.run([sys.executable, "-m", "specmon", "gpus"], capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert done.returncode == 0
    assert done.stdout.startswith("available: false")
    assert "reason: libnvidia-ml.so not found" in done.stdout


def test_gpus_never_imports_textual():
    code = (
        "import sys; from specmon.cli import main; rc = main(['gpus', '--json']);"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('textual', 'widgets')], 'textual imported';"
        "sys.exit(rc)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def test_watch_repeats_until_interrupted():
    proc = subprocess.Popen(
        [sys.executable, "-m", "specmon", "gpus", "--json", "--watch", "0.2"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    readings = []
    deadline = time.monotonic() + 20
    while len(readings) < 3 and time.monotonic() < deadline:
        readings.append(json.loads(proc.stdout.readline()))  # JSON Lines: one reading per line
    proc.send_signal(signal.SIGINT)
    assert proc.wait(10) == 130
    assert len(readings) == 3
    assert readings[0]["taken_at"] < readings[1]["taken_at"] < readings[2]["taken_at"]


def test_table_of_eight_h200s_shows_every_field_and_the_zombie():
    snapshot = GpuSnapshot.from_json(json.loads((FIXTURES / "h200x8-sglang-tp8.json").read_text()))
    text = render_table(snapshot)
    lines = text.splitlines()
    assert lines[0].startswith("driver 570.124.06  NVML 12.570.124.06")
    gpu5 = next(line for line in lines if line.startswith("  5  NVIDIA H200"))
    for part in ("125.6/140.4 GiB", "88%", "699/700 W", "53°C", "1755 MHz", "↑215 MB/s ↓98 MB/s", "power cap"):
        assert part in gpu5
    zombie = next(line for line in lines if "2869913" in line)
    assert "ZOMBIE (gone)" in zombie and "2.1 GiB" in zombie
    assert lines[-1] == "links: NVLink (28 GPU pairs)"


def test_table_shows_na_and_lost_gpus():
    snapshot = GpuSnapshot.from_json({"available": True, "gpus": [
        {"index": 0, "name": "NVIDIA H200", "memory_used_mib": 1024, "memory_total_mib": 2048},
        {"index": 1, "error": "GPU is lost (fell off the bus or hung)"},
    ]})
    lines = render_table(snapshot).splitlines()
    assert "N/A" in lines[2] and "1.0/2.0 GiB" in lines[2]
    assert lines[3] == "  1  GPU is lost (fell off the bus or hung)"
