"""Throughput and peak memory of `specmon log-summary` on long logs made of real SGLang line shapes.

Builds each log in a temporary directory: a real startup to ready (tests/fixtures/logs, SGLang 0.5.16
DFLASH on a GB10), then the real post-ready lines of that log (`Decode batch` and uvicorn access-log
lines) repeated until the log has the requested number of lines. Runs the real command
(`python -m specmon log-summary LOG`) as a child process and reports lines/s over its whole wall time
(interpreter start included) and the child's peak RSS (from wait4), for every size, so a flat RSS shows
that memory does not grow with the length of the log.

    .venv/bin/python -m benchmarks.log_summary_throughput                # 100k and 1M lines
    .venv/bin/python -m benchmarks.log_summary_throughput --lines 200000 --repeat 1
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STARTUP_LOG = ROOT / "tests" / "fixtures" / "logs" / "03-laguna-int4-dflash-v0.5.16-ready.log"
READY_LINE = b"The server is fired up and ready to roll!"


def build_log(path: Path, total_lines: int) -> int:
    """Write a log of about ``total_lines`` lines; return the exact count of lines written."""
    raw = STARTUP_LOG.read_bytes()
    ready = raw.index(READY_LINE)
    startup_end = raw.index(b"\n", ready) + 1
    startup, after = raw[:startup_end], raw[startup_end:]
    body = [
        line
        for line in after.split(b"\n")
        if b"Decode batch" in line or b'HTTP/1.1" ' in line
    ]
    block = b"\n".join(body) + b"\n"
    written = startup.count(b"\n")
    with open(path, "wb") as out:
        out.write(startup)
        while written + len(body) <= total_lines:
            out.write(block)
            written += len(body)
        rest = total_lines - written
        if rest > 0:
            out.write(b"\n".join(body[:rest]) + b"\n")
            written += rest
    return written


def run_once(log: Path) -> tuple[float, int, int]:
    """Run `log-summary` on ``log``: (wall seconds, peak RSS in KiB, exit code)."""
    argv = [sys.executable, "-m", "specmon", "log-summary", str(log)]
    started = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        proc = subprocess.Popen(argv, stdout=devnull, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, action="append", help="log length (repeatable; default 100k and 1M)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size; the median is reported")
    args = parser.parse_args()
    sizes = args.lines or [100_000, 1_000_000]
    print(f"# specmon log-summary throughput ({platform.python_implementation()} {platform.python_version()}, "
          f"{os.cpu_count()} CPUs)")
    print("| lines | log size | wall time (median) | lines/s | peak RSS |")
    print("|---:|---:|---:|---:|---:|")
    failed = False
    with tempfile.TemporaryDirectory(prefix="specmon-bench-") as tmp:
        empty = Path(tmp) / "empty.log"
        empty.write_bytes(b"")
        base_wall, base_rss, _ = run_once(empty)
        for size in sizes:
            log = Path(tmp) / f"server-{size}.log"
            lines = build_log(log, size)
            runs = [run_once(log) for _ in range(args.repeat)]
            if any(code != 0 for _, _, code in runs):
                print(f"log-summary exited with {[code for _, _, code in runs]} on {log}", file=sys.stderr)
                failed = True
            wall = statistics.median(r[0] for r in runs)
            rss = max(r[1] for r in runs)
            print(f"| {lines:,} | {log.stat().st_size / 1e6:.0f} MB | {wall:.2f} s | {lines / wall:,.0f} | "
                  f"{rss / 1024:.0f} MiB |")
            log.unlink()
    print(f"\nEmpty log (interpreter start and imports only): {base_wall:.2f} s, peak RSS {base_rss / 1024:.0f} MiB.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
