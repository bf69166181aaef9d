"""What one GpuPane update costs inside the real app: screen layouts it causes and CPU time per update.

The real SpecmonApp, headless at 200x50 (the three panes side by side), is handed recorded GPU snapshots
(tests/fixtures/gpu: one H200, eight H200s) whose readings change every time, as the app's GPU sampler
would at 1 Hz, and the eight H200s' first reading again and again (an idle GPU's readings standing still: the rows
repaint nothing that draws the same). Counted: full-screen layouts (`Screen._refresh_layout`) and the process CPU time per update,
less that of the same idle wait without an update.

    .venv/bin/python -m benchmarks.app_gpu_pane [--updates 40]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import sys
import time
from pathlib import Path

from textual.screen import Screen

from specmon.tui.app import AppConfig, SpecmonApp
from tests.support.gpu_fixtures import load, replay

ROOT = Path(__file__).resolve().parent.parent

FIXTURES = {"1 GPU (detailed rows)": "h200x1-torch-load.json", "8 GPUs (compact rows)": "h200x8-sglang-tp8.json"}
PAUSE_S = 0.05
layouts = 0
_refresh_layout = Screen._refresh_layout


def _counting_refresh_layout(self, *args, **kwargs):
    global layouts
    layouts += 1
    return _refresh_layout(self, *args, **kwargs)


async def measure(fixture: str, updates: int, still: bool = False) -> tuple[float, float]:
    """(layouts per update, CPU ms per update) for `updates` snapshots after five to settle."""
    global layouts
    snapshots = replay(load(fixture), updates + 5)
    if still:
        snapshots = [copy.deepcopy(snapshots[0]) for _ in snapshots]
    app = SpecmonApp(AppConfig(url="http://127.0.0.1:9", poll=False))
    async with app.run_test(size=(200, 50)) as pilot:
        await pilot.pause(0.3)
        for snapshot in snapshots[:5]:
            app.main.show_gpus(snapshot)
            await pilot.pause(PAUSE_S)
        idle = time.process_time()
        for _ in range(updates):
            await pilot.pause(PAUSE_S)
        idle = time.process_time() - idle
        layouts = 0
        busy = time.process_time()
        for snapshot in snapshots[5:]:
            app.main.show_gpus(snapshot)
            await pilot.pause(PAUSE_S)
        busy = time.process_time() - busy
        return layouts / updates, 1000 * (busy - idle) / updates


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=40)
    args = parser.parse_args()
    Screen._refresh_layout = _counting_refresh_layout
    cases = [(label, fixture, False) for label, fixture in FIXTURES.items()]
    cases.append(("8 GPUs, standing still", FIXTURES["8 GPUs (compact rows)"], True))
    for label, fixture, still in cases:
        per_update, cpu_ms = asyncio.run(measure(fixture, args.updates, still))
        print(f"{label:24} screen layouts per update: {per_update:.2f}   CPU per update: {cpu_ms:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
