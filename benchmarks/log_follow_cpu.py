"""What following a log costs one process: `follow()` on a thread, the file idle, a trickle of access lines, or a
stream, woken by inotify or polling (`LogWaiter`), as the process CPU over the window (% of one core).

    .venv/bin/python -m benchmarks.log_follow_cpu [--seconds 20] [--interval 0.05]

Each case runs in its own child process (a fresh interpreter), the two ways alternated: idle (nothing written),
trickle (an access line every 0.66 s: the app's own polls' lines on an idle server) and stream (1,000 lines a
second in writes of 10 lines every 10 ms, as `app_follow_terminal`'s writer does).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.app_follow_terminal import WRITER

ACCESS = '[2026-12-02 13:30:00] INFO:     127.0.0.1:40 - "GET /model_info HTTP/1.1" 200 OK\n'


def child(mode: str, watch: bool, seconds: float, interval: float, path: str) -> None:
    """One case, in this process: prints the process CPU % over the window."""
    import specmon.logs.waiter as waiter
    from specmon.logs.follower import follow

    if not watch:
        waiter.INotify = None
    Path(path).write_text("")
    lines = [0]
    stop = threading.Event()
    thread = threading.Thread(target=follow, args=(path, lambda items: lines.__setitem__(0, lines[0] + len(items)),
                                                   stop), kwargs={"interval": interval, "frame_runs": True})
    thread.start()
    time.sleep(1.0)
    writer = None
    if mode == "stream":
        writer = subprocess.Popen([sys.executable, "-c", WRITER, path, "1000", str(seconds + 2)],
                                  stdout=subprocess.PIPE, text=True)
        writer.stdout.readline()
    cpu, started = time.process_time(), time.monotonic()
    while time.monotonic() - started < seconds:
        if mode == "trickle":
            with open(path, "a") as out:
                out.write(ACCESS)
        time.sleep(0.66 if mode == "trickle" else 0.5)
    used = time.process_time() - cpu
    elapsed = time.monotonic() - started
    stop.set()
    thread.join(10)
    if writer is not None:
        writer.kill()
        writer.wait()
    print(f"{100 * used / elapsed:.3f} {lines[0]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=0.05, help="how often a stream is read (s)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, watch, path = args.child
        child(mode, watch == "watch", args.seconds, args.interval, path)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("idle", "trickle", "stream"):
            for _ in range(args.rounds):
                for way in ("poll", "watch"):
                    out = subprocess.run(
                        [sys.executable, "-m", "benchmarks.log_follow_cpu", "--seconds", str(args.seconds),
                         "--interval", str(args.interval), "--child", mode, way, str(Path(tmp) / f"{mode}.log")],
                        capture_output=True, text=True, cwd=Path(__file__).resolve().parent.parent, timeout=300,
                    )  # fmt: skip
                    cpu, lines = (out.stdout.split() + ["?", "?"])[:2]
                    print(f"{mode:8} {way:6} {cpu:>7} % of one core   lines read {lines}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
