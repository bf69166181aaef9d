"""Regenerate screenshots/*.svg: the main screen starting, mid-capture, ready and failed (80x24 and 200x50),
from the same fixture-fed apps the snapshot tests use (with a real H200 GPU reading in the GPU pane), the
GPU pane alone on the GPU fixtures (as its snapshot tests show it), plus a live `specmon demo` at 200x50.

    .venv/bin/python -m scripts.make_screenshots [--no-demo]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import tests.support.app_harness as app_harness

ROOT = Path(__file__).resolve().parent.parent

OUT = ROOT / "screenshots"
STATES = {
    "starting": app_harness.starting_app,
    "capturing": app_harness.capturing_app,
    "ready": app_harness.ready_app,
    "failed": app_harness.failed_app,
}
SIZES = ((80, 24), (200, 50))

GPU_READING = ROOT / "tests" / "fixtures" / "gpu" / "h200-real-torch-20g.json"


async def shoot(name: str, factory, size: tuple[int, int], press: tuple[str, ...] = ()) -> Path:
    from specmon.gpu.model import GpuSnapshot

    app = factory()
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.3)
        app.main.show_gpus(GpuSnapshot.from_json(json.loads(GPU_READING.read_text())))
        for key in press:
            await pilot.press(key)
        await pilot.pause(0.2)
        filename = f"{name}-{size[0]}x{size[1]}.svg"
        app.save_screenshot(filename=filename, path=str(OUT))
    return OUT / filename


async def shoot_gpu_pane(name: str, snapshots, size: tuple[int, int]) -> Path:
    from tests.gpu.test_gpu_pane import PaneApp

    app = PaneApp(snapshots)
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.3)
        filename = f"gpu-pane-{name}-{size[0]}x{size[1]}.svg"
        app.save_screenshot(filename=filename, path=str(OUT))
    return OUT / filename


def gpu_pane_shots():
    """(name, snapshots, size) for the GPU pane screenshots."""
    from specmon.gpu.model import GpuSnapshot
    from tests.support.gpu_fixtures import load, replay

    reason = ("libnvidia-ml.so not found: no NVIDIA driver on this machine, or a container started without "
              "the GPU driver libraries")
    return [
        ("fixture-8xh200", replay(load("h200x8-sglang-tp8.json")), (80, 24)),
        ("fixture-1xh200", replay(load("h200x1-torch-load.json")), (200, 50)),
        ("nvml-unavailable", [GpuSnapshot.unavailable(reason)], (80, 24)),
    ]


def shoot_demo(seconds: float) -> Path:
    target = OUT / "demo-200x50.svg"
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "XDG_STATE_HOME": tmp, "SPECMON_HEADLESS_SIZE": "200x50"}
        subprocess.run(  # noqa: S603 (a fixed argv: this interpreter running specmon)
            [sys.executable, "-m", "specmon", "demo", "--headless", "--speed", "10", "--duration", str(seconds),
             "--screenshot", str(target)],
            env=env, check=True, timeout=seconds + 60,
        )
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-demo", action="store_true", help="skip the live demo screenshot")
    args = parser.parse_args()
    OUT.mkdir(exist_ok=True)
    # the apps shown read no stored benchmark runs of this machine's user
    os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="specmon-screenshots-")
    os.environ.pop("SPECMON_STATE_DIR", None)
    written = []
    for name, factory in STATES.items():
        for size in SIZES:
            written.append(asyncio.run(shoot(name, factory, size)))
    written.append(asyncio.run(shoot("ready-gpus-tab", app_harness.ready_app, (80, 24), press=("2",))))
    for name, snapshots, size in gpu_pane_shots():
        written.append(asyncio.run(shoot_gpu_pane(name, snapshots, size)))
    if not args.no_demo:
        written.append(shoot_demo(12.0))
    for path in written:
        print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
