"""The app's RSS over some minutes (an hour and more) against the emulator under light traffic.

Runs the real `specmon demo --headless` (the emulator as its child) and, once it is ready, sends one small
`/generate` request a second to the emulator while sampling the app's own RSS every 10 s.

    .venv/bin/python -m benchmarks.app_memory --minutes 70 --rate 8

Prints RSS every 10 s, then its range and least-squares slope from --tail-from minutes on and from every 10th
minute: the bounded buffers (GPU history 10 min, log pane ~12 min at 8/s, /metrics scrapes ~17 min, the Live
history 60 min) fill first, after which a flat line is expected.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

import psutil


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--warmup", type=float, default=12.0)
    parser.add_argument("--rate", type=float, default=1.0, help="requests a second (more fills the log pane sooner)")
    parser.add_argument("--tail-from", type=float, default=20.0, help="minutes after which the slope is reported")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "XDG_STATE_HOME": tmp, "SPECMON_HEADLESS_SIZE": "200x50"}
        duration = args.warmup + args.minutes * 60 + 5
        argv = [sys.executable, "-m", "specmon", "demo", "--headless", "--speed", "20", "--duration", str(duration)]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        app = psutil.Process(proc.pid)
        time.sleep(args.warmup)
        logs = glob.glob(os.path.join(tmp, "**", "*.log"), recursive=True)
        port = int(re.search(r"-(\d+)\.log$", logs[0]).group(1)) if logs else None
        samples: list[tuple[float, float]] = []
        start = time.monotonic()
        next_sample = start
        requests = 0
        while time.monotonic() - start < args.minutes * 60 and proc.poll() is None:
            if port is not None:
                body = json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": 16}}).encode()
                req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", body, {"Content-Type": "application/json"})
                try:
                    urllib.request.urlopen(req, timeout=5).read()
                    requests += 1
                except OSError:
                    pass
            if time.monotonic() >= next_sample:
                samples.append((time.monotonic() - start, app.memory_info().rss / 2**20))
                next_sample += 10
            time.sleep(1.0 / args.rate)
        proc.terminate()
        proc.wait(30)
    print(f"requests sent: {requests}")
    print("t (s)  RSS (MiB)")
    for t, rss in samples:
        print(f"{t:5.0f}  {rss:6.1f}")
    if samples:
        print(f"first {samples[0][1]:.1f} MiB, last {samples[-1][1]:.1f} MiB, max {max(r for _, r in samples):.1f} MiB")
        for start_min in (args.tail_from, *range(10, int(args.minutes), 10)):
            tail = [(t, rss) for t, rss in samples if t >= start_min * 60]
            if len(tail) >= 3:
                print(f"from {start_min:4.0f} min: RSS {min(r for _, r in tail):.1f}..{max(r for _, r in tail):.1f} MiB, "
                      f"slope {slope_mib_per_min(tail):+.3f} MiB/min ({len(tail)} samples)")
    return 0


def slope_mib_per_min(points: list[tuple[float, float]]) -> float:
    """The least-squares slope of RSS against time, in MiB a minute."""
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_r = sum(r for _, r in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    return 60 * sum((t - mean_t) * (r - mean_r) for t, r in points) / var if var else 0.0


if __name__ == "__main__":
    sys.exit(main())
