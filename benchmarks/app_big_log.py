"""Attaching to a big log: time until the app shows the current run's startup and its live figures.

A log of a real 0.5.16 startup followed by N `Decode batch` / `Prefill batch` / access lines (default 10
million, ~2 GB), then a second startup and 2,000 more serving lines (the current run). The real app, headless at
200x50, follows it as `monitor --log` does (no server: the log is the live source). Timed from the app's start
to: the Server pane's state is ready for the *second* startup, the log pane holds lines, and the Live view
shows figures read from the log. Also times `monitor --once --log` (no server answering).

    python -m benchmarks.app_big_log [--lines 10000000] [--keep PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specmon.tui.app import SpecmonApp
from specmon.tui.config import AppConfig

ROOT = Path(__file__).resolve().parents[1]
STARTUP = ROOT / "tests" / "fixtures" / "logs" / "03-laguna-int4-dflash-v0.5.16-ready.log"
SERVING = (
    "[2026-08-02 00:02:{s:02d}] Decode batch, #running-req: 8, #full token: 4181, full token usage: 0.02, "
    "#swa token: 4181, swa token usage: 0.02, accept len: 2.75, accept rate: 0.44, cuda graph: True, "
    "gen throughput (token/s): 812.10, #queue-req: 0\n"
    "[2026-08-02 00:02:{s:02d}] Prefill batch, #new-seq: 1, #new-token: 47, #cached-token: 1, full token usage: "
    "0.00, swa token usage: 0.00, #running-req: 7, #queue-req: 0, #pending-token: 0, cuda graph: True, input "
    "throughput (token/s): 30.67\n"
    '[2026-08-02 00:02:{s:02d}] INFO:     127.0.0.1:59200 - "POST /generate HTTP/1.1" 200 OK\n'
)


def write_log(path: Path, lines: int) -> None:
    startup = STARTUP.read_bytes()
    ready = startup.index(b"The server is fired up and ready to roll!")
    startup = startup[: startup.index(b"\n", ready) + 1]  # the fixture goes on to its shutdown
    block = "".join(SERVING.format(s=i % 60) for i in range(1000)).encode()  # 3,000 lines
    with path.open("wb") as f:
        f.write(startup)
        for _ in range(lines // 3000):
            f.write(block)
        f.write(startup)
        f.write(block[: len(block) * 2 // 3])


async def time_to_screen(path: Path) -> float:
    config = AppConfig(url="http://127.0.0.1:9", log_path=str(path), poll=False)
    app = SpecmonApp(config)
    started = time.perf_counter()
    async with app.run_test(size=(200, 50)) as pilot:
        while time.perf_counter() - started < 60:
            with app.feed.lock:
                ready = app.feed.state.state == "ready" and app.feed.lines_fed > 0
            snap = app.live.monitor.snapshot()
            if ready and snap.source == "log" and snap.accept_length is not None:
                app.live.refresh()
                app.flush_feed(force=True)
                await pilot.pause()
                return time.perf_counter() - started
            await pilot.pause(0.02)
    raise SystemExit("the app never showed the log's last startup and live figures")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=10_000_000)
    parser.add_argument("--keep", help="write the log here and keep it (default: a temporary file)")
    args = parser.parse_args()
    path = Path(args.keep) if args.keep else Path(tempfile.mkdtemp()) / "week.log"
    if not path.exists():
        began = time.perf_counter()
        write_log(path, args.lines)
        print(f"wrote {path} ({path.stat().st_size / 2**30:.2f} GiB) in {time.perf_counter() - began:.1f} s")
    try:
        seconds = asyncio.run(time_to_screen(path))
        print(f"app: last startup (ready) and live figures on screen after {seconds:.2f} s")
        began = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "specmon", "monitor", "--url", "http://127.0.0.1:9",
                               "--log", str(path), "--once", "--json", "--window", "1"],
                              capture_output=True, text=True, timeout=120)
        print(f"monitor --once --log: {time.perf_counter() - began:.2f} s (exit {done.returncode})")
    finally:
        if not args.keep:
            os.unlink(path)


if __name__ == "__main__":
    main()
