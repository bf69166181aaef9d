"""The app at 200x50 and 80x24 showing what the real trained pair gave on the H200 (2026-12-02), replayed from
what that run kept in tests/fixtures/real-sglang-0.5.16/trained-20261202/: the 16-token STANDALONE server's log
and `/server_info`, two `/metrics` scrapes taken 10.9 s apart under a concurrent benchmark (fed to the Live view as
they were read), and the sweep's stored runs (the Benchmark pane, as `monitor --url` loads them). The GPU pane
shows a real H200 NVML reading from another run (tests/fixtures/gpu/h200-real-torch-20g.json): the trained run
kept no GPU reading.

    python -m scripts.trained_replay_screenshots      # writes screenshots/real-h200-trained-replay-*.svg
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "tests" / "fixtures" / "real-sglang-0.5.16" / "trained-20261202"
GPU_READING = ROOT / "tests" / "fixtures" / "gpu" / "h200-real-torch-20g.json"
OUT = ROOT / "screenshots"
SCRAPES_APART_S = 10.86
"""monitor --once's run between the two scrapes (live/steps.txt)."""


class ReplayedScrapes:
    """A live source that gives the Live view the run's two real scrapes and its /server_info, once."""

    def __init__(self, monitor) -> None:
        self.monitor = monitor

    def start(self) -> None:
        from specmon.serving.prom import parse_scrape

        now = time.time()
        before = (RUN / "live" / "metrics-under-load-before.txt").read_text()
        after = (RUN / "live" / "metrics-under-load-after.txt").read_text()
        with self.monitor.lock:
            tracker = self.monitor.tracker
            tracker.set_server_info(json.loads((RUN / "api" / "server-info.json").read_text()))
            tracker.add_scrape(parse_scrape(before, now - SCRAPES_APART_S))
            tracker.add_scrape(parse_scrape(after, now))

    def stop(self, timeout: float = 2.0) -> None:
        pass


async def shoot(size: tuple[int, int], press: tuple[str, ...] = ()) -> Path:
    from specmon.gpu.model import GpuSnapshot
    from specmon.launch.presets import load_presets
    from specmon.tui.app import SpecmonApp
    from specmon.tui.config import AppConfig

    presets = load_presets(str(ROOT / "scripts" / "h200-presets"))
    config = AppConfig(url="http://127.0.0.1:30000", log_path=str(RUN / "api" / "server.log"), poll=False,
                       preset=presets.get("trained-standalone-16"), read_only=True, live_source=ReplayedScrapes)
    app = SpecmonApp(config)
    async with app.run_test(size=size) as pilot:
        for _ in range(100):
            await pilot.pause(0.1)
            if app.bench_results:
                break
        app.main.show_gpus(GpuSnapshot.from_json(json.loads(GPU_READING.read_text())))
        app.live.refresh()
        for key in press:
            await pilot.press(key)
        await pilot.pause(0.5)
        filename = f"real-h200-trained-replay-{size[0]}x{size[1]}.svg"
        app.save_screenshot(filename=filename, path=str(OUT))
    return OUT / filename


def main() -> int:
    state = Path(tempfile.mkdtemp(prefix="specmon-replay-"))
    try:
        shutil.copytree(RUN / "sweep" / "results", state / "results")
        os.environ["SPECMON_STATE_DIR"] = str(state)
        for size, press in (((200, 50), ()), ((80, 24), ("3",))):  # 80x24: the Benchmark tab
            print(asyncio.run(shoot(size, press)).relative_to(ROOT))
    finally:
        shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
