"""The app's CPU in a real terminal (tmux), idle and following a log at 1,000 lines/s, with the Live view showing.

The real `specmon monitor --url URL --log LOG` runs in a detached tmux session of WxH (200x50 by default), against
the emulator as the server (its /health, /server_info and /metrics polled as for any server) and following a log
that begins with a real SGLang 0.5.16 startup to ready. Nothing of the harness runs inside the app's process:
its CPU time is read with psutil, and how far the screen lags behind the writer is read from the terminal
itself (`tmux capture-pane`: the newest stamp the log pane shows).

1. idle: the server ready, nothing written, for --idle seconds;
2. following: a writer process appends `Decode batch` lines at --rate lines/s for --seconds.

    .venv/bin/python -m benchmarks.app_follow_terminal [--size 200x50] [--rate 1000] [--seconds 20] [--idle 20]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from benchmarks.app_idle_cpu import cpu_seconds
from benchmarks.app_log_throughput import WRITER, _startup_until_ready
from specmon.ports import free_port

STAMP = re.compile(r"\[(\d{10}\.\d{6})\] \d+ Decode batch")


def _screen(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="200x50")
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--idle", type=float, default=20.0)
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        print("tmux is not installed")
        return 2
    width, height = (int(v) for v in args.size.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "XDG_STATE_HOME": tmp}
        log_path = Path(tmp) / "server.log"
        log_path.write_bytes(_startup_until_ready())
        port = free_port()
        emulator = subprocess.Popen(
            [sys.executable, "-m", "specmon.emulator", "--model-path", "demo/m", "--port", str(port),
             "--emulator-speed", "40"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        session = f"specmon-bench-{os.getpid()}"
        command = [sys.executable, "-m", "specmon", "monitor", "--url", f"http://127.0.0.1:{port}",
                   "--log", str(log_path)]
        script = Path(tmp) / "run.sh"
        script.write_text("exec " + " ".join(f"'{part}'" for part in command) + "\n")
        subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", str(width), "-y", str(height),
                        "env", f"XDG_STATE_HOME={tmp}", "TERM=xterm-256color", "sh", str(script)], check=True)
        try:
            pane_pid = int(subprocess.run(["tmux", "list-panes", "-t", session, "-F", "#{pane_pid}"],
                                          capture_output=True, text=True, check=True).stdout.split()[0])
            app = psutil.Process(pane_pid)
            try:
                _wait(lambda: _screen(session).splitlines()[0].rstrip().endswith("ready"), 60, "the app to show ready")
            except SystemExit:
                print(_screen(session))
                raise
            time.sleep(2)  # the first screens and the results load behind
            cpu0, t0 = cpu_seconds(app), time.monotonic()
            time.sleep(args.idle)
            idle_pct = 100 * (cpu_seconds(app) - cpu0) / (time.monotonic() - t0)
            writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log_path), str(args.rate), str(args.seconds)],
                                      stdout=subprocess.PIPE, text=True)
            cpu0, t0 = cpu_seconds(app), time.monotonic()
            lags = []
            while writer.poll() is None:
                stamps = [float(s) for s in STAMP.findall(_screen(session))]
                if stamps:
                    lags.append(time.time() - max(stamps))
                time.sleep(0.5)
            follow_s = time.monotonic() - t0
            follow_pct = 100 * (cpu_seconds(app) - cpu0) / follow_s
            written = int(writer.stdout.read().strip())
            rss = app.memory_info().rss / 2**20
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
            emulator.terminate()
            emulator.wait(10)
    print(f"terminal: tmux {args.size}   app RSS at the end: {rss:.0f} MiB")
    print(f"idle ({args.idle:.0f} s, server ready, Live view showing): app CPU {idle_pct:.2f} % of one core")
    print(f"following {args.rate} lines/s ({written} lines in {follow_s:.1f} s): app CPU {follow_pct:.2f} % of one core, "
          f"screen lag max {max(lags) if lags else float('nan'):.2f} s, median {sorted(lags)[len(lags) // 2] if lags else float('nan'):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
