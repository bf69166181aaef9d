"""CPU cost to the app of following production traffic: 1,000 request records a second (issue 35: ≤ 3 % of a core).

Runs the real app headless (`specmon monitor --headless`, attached to a URL where nothing answers, so the poller
only fails to connect) twice over the same stream of export records written by this script at RATE a second
(~2 KB each, as production's with their prompt text): once with `--traffic DIR`, once without. The app's own CPU
(utime + stime from /proc/PID/stat, through psutil) over the window, as a percentage of one core; the difference
is what following the records costs. The Traffic tab is not on screen in a headless run: its model is built every
2 s all the same (on the reading thread); drawing it is the widget's few milliseconds every 2 s on top.

    .venv/bin/python -m benchmarks.app_traffic_follow [--rate 1000] [--window 30] [--warmup 8]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import psutil

from benchmarks.app_idle_cpu import cpu_seconds


def record_line(i: int) -> str:
    verify = 20 + i % 180
    completion = verify * 2 + i % verify
    params = {"rid": f"bench-{i}", "text": "prompt " * 250, "sampling_params": {"max_new_tokens": 1024}}
    meta = {"id": f"bench-{i}", "prompt_tokens": 100 + (i * 37) % 12000, "completion_tokens": completion,
            "spec_verify_ct": verify, "spec_accept_length": completion / verify,
            "spec_accept_histogram": [verify - 1, 1], "request_finished_ts": time.time()}
    return json.dumps({"request_parameters": json.dumps(params), **meta}) + "\n"


def write_records(folder: str, rate: float, stop: threading.Event) -> None:
    """Append `rate` records a second, ten batches a second, to the hour's export file."""
    i = 0
    started = time.monotonic()
    while not stop.is_set():
        name = os.path.join(folder, f"sglang-request-metrics-{time.strftime('%Y%m%d_%H')}.log")
        due = int((time.monotonic() - started) * rate)
        with open(name, "a", encoding="utf-8") as handle:
            handle.write("".join(record_line(n) for n in range(i, due)))
        i = max(i, due)
        stop.wait(0.1)


def measure(traffic: bool, args: argparse.Namespace) -> tuple[float, float]:
    """The app's CPU (% of one core) and RSS (MiB) over the window, with or without --traffic."""
    with tempfile.TemporaryDirectory() as tmp:
        records = os.path.join(tmp, "records")
        os.mkdir(records)
        stop = threading.Event()
        writer = threading.Thread(target=write_records, args=(records, args.rate, stop), daemon=True)
        writer.start()
        env = {**os.environ, "XDG_STATE_HOME": tmp, "SPECMON_HEADLESS_SIZE": "200x50"}
        argv = [sys.executable, "-m", "specmon", "monitor", "--url", "http://127.0.0.1:9", "--headless",
                "--duration", str(args.warmup + args.window + 3)] + (["--traffic", records] if traffic else [])
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            app = psutil.Process(proc.pid)
            time.sleep(args.warmup)
            cpu0, t0 = cpu_seconds(app), time.monotonic()
            time.sleep(args.window)
            cpu1, t1 = cpu_seconds(app), time.monotonic()
            rss = app.memory_info().rss / 2**20
            proc.wait(60)
        finally:
            stop.set()
            writer.join()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return 100 * (cpu1 - cpu0) / (t1 - t0), rss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="records written a second")
    parser.add_argument("--window", type=float, default=30.0, help="seconds measured")
    parser.add_argument("--warmup", type=float, default=8.0, help="seconds before measuring")
    args = parser.parse_args()
    with_pct, with_rss = measure(True, args)
    without_pct, without_rss = measure(False, args)
    cost = with_pct - without_pct
    print(f"{args.rate:,.0f} records/s over {args.window:.0f} s: app CPU {with_pct:.2f} % of one core following "
          f"them, {without_pct:.2f} % without: following costs {cost:.2f} %; RSS {with_rss:.0f} MiB vs "
          f"{without_rss:.0f} MiB; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print("PASS" if cost <= 3.0 else "FAIL", "(target: following costs at most 3 % of one core)")
    return 0 if cost <= 3.0 else 1


if __name__ == "__main__":
    sys.exit(main())
