"""Can the app's log pane keep up with 10,000 lines/s for 10 s, with bounded memory?

A separate writer process appends timestamped lines to a file at the target rate (batches every 10 ms);
the real app (headless, in this process) follows the file exactly as `specmon monitor --log` does. Every
250 ms we read the newest line the log pane shows and compute how far behind the writer it is.

    .venv/bin/python -m benchmarks.app_log_throughput [--rate 10000] [--seconds 10]
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

import psutil

from specmon.tui.app import AppConfig, SpecmonApp

WRITER = r"""
import sys, time
path, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
pad = "Decode batch, #running-req: 48, #token: 52113, token usage: 0.34, accept len: 3.12, gen throughput (token/s): 4211.07, #queue-req: 0"
batch = max(1, rate // 100)
with open(path, "a", buffering=1 << 20) as out:
    start = time.monotonic()
    n = 0
    while (now := time.monotonic()) - start < seconds:
        due = int((now - start) * rate)
        while n < due:
            lines = [f"[{time.time():.6f}] {n + i} {pad}\n" for i in range(min(batch, due - n))]
            out.write("".join(lines))
            n += len(lines)
        out.flush()
        time.sleep(0.01)
print(n)
"""


def _stamp(line: str) -> float | None:
    if line.startswith("[") and "]" in line:
        try:
            return float(line[1 : line.index("]")])
        except ValueError:
            return None
    return None


STARTUP = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "logs" / "03-laguna-int4-dflash-v0.5.16-ready.log"


def _startup_until_ready() -> bytes:
    data = STARTUP.read_bytes()
    ready = data.index(b"The server is fired up and ready to roll!")
    return data[: data.index(b"\n", ready) + 1]


async def measure(rate: int, seconds: float, ready: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["XDG_STATE_HOME"] = tmp  # the user's stored benchmark runs are not loaded into the window
        log_path = Path(tmp) / "server.log"
        log_path.write_bytes(_startup_until_ready() if ready else b"")
        app = SpecmonApp(AppConfig(url="http://127.0.0.1:9", log_path=str(log_path), poll=False))
        me = psutil.Process()
        async with app.run_test(size=(200, 50)) as pilot:
            await pilot.pause(0.5)
            log = app.screen.query_one("#log")
            rss_start = me.memory_info().rss
            cpu_start = me.cpu_times()
            writer = subprocess.Popen(
                [sys.executable, "-c", WRITER, str(log_path), str(rate), str(seconds)], stdout=subprocess.PIPE, text=True
            )
            lags: list[float] = []
            rss_peak = rss_start
            max_lines_shown = 0
            while writer.poll() is None:
                await pilot.pause(0.25)
                if log.lines:
                    stamp = _stamp(log.lines[-1])
                    if stamp is not None:
                        lags.append(time.time() - stamp)
                rss_peak = max(rss_peak, me.memory_info().rss)
                max_lines_shown = max(max_lines_shown, len(log.lines))
            written = int(writer.stdout.read().strip())
            finished = time.monotonic()
            while app.feed.lines_fed < written and time.monotonic() - finished < 30:
                await pilot.pause(0.05)
            drain_s = time.monotonic() - finished
            await pilot.pause(0.2)
            cpu_end = me.cpu_times()
            return {
                "rate": rate,
                "seconds": seconds,
                "written": written,
                "fed": app.feed.lines_fed,
                "shown_in_pane": log.lines_written,
                "max_lag_s": max(lags) if lags else None,
                "median_lag_s": sorted(lags)[len(lags) // 2] if lags else None,
                "drain_after_writer_s": drain_s,
                "pane_lines_max": max_lines_shown,
                "rss_start_mib": rss_start / 2**20,
                "rss_peak_mib": rss_peak / 2**20,
                "cpu_s": (cpu_end.user + cpu_end.system) - (cpu_start.user + cpu_start.system),
            }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--ready", action="store_true",
                        help="begin the log with a real startup up to ready: the lines follow a served server's")
    args = parser.parse_args()
    result = asyncio.run(measure(args.rate, args.seconds, args.ready))
    for key, value in result.items():
        print(f"{key:>22}: {value:.3f}" if isinstance(value, float) else f"{key:>22}: {value}")
    ok = result["max_lag_s"] is not None and result["max_lag_s"] <= 1.0 and result["pane_lines_max"] <= 10_000
    print("PASS" if ok else "FAIL", "(target: at most 1 s behind, pane bounded to 10,000 lines)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
