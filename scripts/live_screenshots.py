"""The Live view's screenshots: the real app attached to a server under load (the emulator with a benchmark
running beside it), at 80x24 (the "4 Live" tab) and 200x50 (all panes).

    python -m scripts.live_screenshots --url http://127.0.0.1:PORT --log SERVER.log [--preset NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from specmon.launch.presets import load_presets
from specmon.tui.app import SpecmonApp
from specmon.tui.config import AppConfig

OUT = Path(__file__).resolve().parents[1] / "screenshots"


async def shoot(config: AppConfig, size: tuple[int, int], path: Path, settle_s: float) -> None:
    app = SpecmonApp(config)
    async with app.run_test(size=size) as pilot:
        if size[0] < 160:
            await pilot.press("4")
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline:
            await pilot.pause(0.5)
        app.save_screenshot(filename=path.name, path=str(path.parent))
    print(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--log")
    parser.add_argument("--preset")
    parser.add_argument("--settle", type=float, default=16.0, help="seconds of live data before each shot")
    args = parser.parse_args()
    preset = load_presets([]).get(args.preset) if args.preset else None
    for size, name in (((80, 24), "live-80x24.svg"), ((200, 50), "live-200x50.svg")):
        config = AppConfig(url=args.url, log_path=args.log, preset=preset)
        asyncio.run(shoot(config, size, OUT / name, args.settle))


if __name__ == "__main__":
    main()
