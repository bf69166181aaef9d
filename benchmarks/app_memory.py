"""The app's RSS over some minutes against the emulator under light traffic (a short check, not an hour).

Runs the real `specmon demo --headless` (the emulator as its child) and, once it is ready, sends one small
`/generate` request a second to the emulator while sampling the app's own RSS every 10 s.

    .venv/bin/python -m benchmarks.app_memory --minutes 3 [--rate 8]
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
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "XDG_STATE_HOME": tmp, "SPECMON_HEADLESS_SIZE": "200x50"}
        duration = args.warmup + args.minutes * 60 + 5
        argv = [sys.executable, "-m", "specmon.tui", "demo", "--headless", "--speed", "20", "--duration", str(duration)]
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
