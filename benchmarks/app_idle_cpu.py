"""CPU use of the app while idle: the server is ready and nothing runs.

Runs the real `specmon demo --headless` (the emulator as its child; poller at 1 Hz, GPU sampler at 1 Hz,
log follower, 10 Hz flush timer) and, once the emulated server is ready, measures the CPU time of the
app's own process (not the emulator's) over a window, as a percentage of one core.

    .venv/bin/python -m benchmarks.app_idle_cpu [--window 30] [--warmup 12]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import psutil


def cpu_seconds(proc: psutil.Process) -> float:
    """User plus system CPU seconds of one process so far."""
    times = proc.cpu_times()
    return times.user + times.system


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=float, default=30.0, help="seconds measured")
    parser.add_argument("--warmup", type=float, default=12.0, help="seconds before measuring (startup, ready)")
    parser.add_argument("--speed", type=float, default=20.0, help="emulator speed (startup only)")
    parser.add_argument("--size", default="200x50", help="terminal size WxH (80x24: one pane at a time)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "XDG_STATE_HOME": tmp, "SPECMON_HEADLESS_SIZE": args.size}
        duration = args.warmup + args.window + 5
        argv = [sys.executable, "-m", "specmon", "demo", "--headless", "--speed", str(args.speed),
                "--duration", str(duration), "--screenshot", os.path.join(tmp, "idle.svg")]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        app = psutil.Process(proc.pid)
        time.sleep(args.warmup)
        children = app.children(recursive=True)
        cpu0, emu0, t0 = cpu_seconds(app), sum(cpu_seconds(c) for c in children), time.monotonic()
        time.sleep(args.window)
        cpu1, emu1, t1 = cpu_seconds(app), sum(cpu_seconds(c) for c in children), time.monotonic()
        rss = app.memory_info().rss / 2**20
        code = proc.wait(60)
        with open(os.path.join(tmp, "idle.svg")) as shot:
            svg = shot.read() if code == 0 else ""
    app_pct = 100 * (cpu1 - cpu0) / (t1 - t0)
    emu_pct = 100 * (emu1 - emu0) / (t1 - t0)
    ready = "ready" in svg
    print(f"size: {args.size}   window: {t1 - t0:.1f} s   app CPU: {cpu1 - cpu0:.2f} s = {app_pct:.2f} % of one core   app RSS: {rss:.0f} MiB")
    print(f"emulator (child, not counted): {emu_pct:.2f} % of one core   exit code: {code}   ready: {ready}")
    ok = code == 0 and app_pct < 3.0
    print("PASS" if ok else "FAIL", "(target: under 3 % of one core)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
