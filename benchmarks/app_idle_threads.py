"""Where the app's CPU goes, per thread, in a real terminal (tmux): idle, or following a log at --rate lines/s.

Runs `specmon monitor --url URL --log LOG` against the emulator (`--enable-metrics`) as `app_follow_terminal`
does, with a `sitecustomize` on its PYTHONPATH that writes the app's thread names (`threading.enumerate()`) to a
file and, with --count, counts Textual's timer ticks and `Widget.refresh` callers over the window. Each thread's
CPU is read with psutil from outside.

    .venv/bin/python -m benchmarks.app_idle_threads [--size 200x50] [--seconds 30] [--rate 0] [--count]

With --py-spy FILE, py-spy samples the app's threads over the window (collapsed stacks, one line a stack, the
thread first); its own sampling costs the app CPU, so the per-thread figures of such a run are not the app's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from benchmarks.app_follow_terminal import WRITER, _answers, _screen, _tmux, _wait
from specmon.ports import free_port

PROBE = r'''
import collections, json, os, sys, threading, time

def _names():
    while True:
        time.sleep(1)
        with open(os.environ["PROBE_THREADS"], "w") as out:
            json.dump({t.native_id: t.name for t in threading.enumerate()}, out)

def _count():
    while "textual.widget" not in sys.modules or "textual.timer" not in sys.modules:
        time.sleep(0.05)
    time.sleep(float(os.environ["PROBE_AFTER"]))
    from textual.timer import Timer
    from textual.widget import Widget
    ticks, refreshes = collections.Counter(), collections.Counter()
    refresh, tick = Widget.refresh, Timer._tick

    def counted_refresh(self, *args, **kwargs):
        caller = sys._getframe(1)
        refreshes[(type(self).__name__, f"{caller.f_code.co_name}<{caller.f_back.f_code.co_name}",
                   bool(kwargs.get("layout")))] += 1
        return refresh(self, *args, **kwargs)

    async def counted_tick(self, *args, **kwargs):
        ticks[getattr(self._callback, "__qualname__", self.name)] += 1
        return await tick(self, *args, **kwargs)

    Widget.refresh, Timer._tick = counted_refresh, counted_tick
    time.sleep(float(os.environ["PROBE_FOR"]))
    with open(os.environ["PROBE_COUNTS"], "w") as out:
        json.dump({"ticks": ticks.most_common(), "refreshes": [[list(k), v] for k, v in refreshes.most_common(30)]}, out)

threading.Thread(target=_names, name="probe", daemon=True).start()
if os.environ.get("PROBE_COUNTS"):
    threading.Thread(target=_count, name="probe-count", daemon=True).start()
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="200x50")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=int, default=0, help="lines/s written while measuring (0: idle)")
    parser.add_argument("--count", action="store_true", help="count Textual timer ticks and refreshes too")
    parser.add_argument("--py-spy", metavar="FILE", help="also profile the app with py-spy (collapsed stacks)")
    args = parser.parse_args()
    size = tuple(int(v) for v in args.size.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        probe_dir = Path(tmp) / "probe"
        probe_dir.mkdir()
        (probe_dir / "sitecustomize.py").write_text(PROBE)
        log, port = Path(tmp) / "server.log", free_port()
        with open(log, "ab") as out:
            emulator = subprocess.Popen(
                [sys.executable, "-m", "specmon.emulator", "--model-path", "demo/m", "--port", str(port),
                 "--enable-metrics", "--emulator-speed", "40"],
                env={**os.environ, "XDG_STATE_HOME": tmp}, stdout=out, stderr=out, start_new_session=True)
        session = f"specmon-threads-{os.getpid()}"
        threads_file, counts_file = Path(tmp) / "threads.json", Path(tmp) / "counts.json"
        writer = None
        try:
            _wait(lambda: _answers(f"http://127.0.0.1:{port}/health"), 60, "the emulator to be ready")
            env = {"XDG_STATE_HOME": tmp, "PYTHONPATH": str(probe_dir), "PROBE_THREADS": str(threads_file),
                   "PROBE_AFTER": "6", "PROBE_FOR": str(args.seconds)}
            if args.count:
                env["PROBE_COUNTS"] = str(counts_file)
            _tmux(session, size, env, [sys.executable, "-m", "specmon", "monitor", "--url",
                                        f"http://127.0.0.1:{port}", "--log", str(log)], tmp)
            _wait(lambda: _screen(session).splitlines()[0].rstrip().endswith("ready"), 60, "specmon to show ready")
            pane = psutil.Process(int(subprocess.run(["tmux", "list-panes", "-t", session, "-F", "#{pane_pid}"],
                                                     capture_output=True, text=True).stdout.split()[0]))
            app = max([pane, *pane.children(recursive=True)], key=lambda p: p.memory_info().rss)
            if args.rate:
                writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log), str(args.rate),
                                           str(args.seconds + 10)], stdout=subprocess.PIPE, text=True)
                writer.stdout.readline()
            time.sleep(4)

            def per_thread() -> dict[int, float]:
                return {t.id: t.user_time + t.system_time for t in app.threads()}

            spy = None
            if args.py_spy:
                spy = subprocess.Popen(["py-spy", "record", "--pid", str(app.pid), "--threads", "--rate", "250",
                                        "--duration", str(int(args.seconds)), "--format", "raw", "-o", args.py_spy],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            before, started = per_thread(), time.monotonic()
            time.sleep(args.seconds + (2 if args.count else 0))
            if spy is not None:
                spy.wait(60)
            after, elapsed = per_thread(), time.monotonic() - started
            _wait(lambda: not args.count or counts_file.exists(), 30, "the probe's counts")
            names = {int(k): v for k, v in json.loads(threads_file.read_text()).items()}
            used = {tid: 100 * (after[tid] - before.get(tid, 0.0)) / elapsed for tid in after}
            print(f"tmux {args.size}, {args.rate or 'idle'}{' lines/s' if args.rate else ''}: "
                  f"{sum(used.values()):.2f} % of one core over {elapsed:.0f} s")
            for tid in sorted(used, key=lambda t: -used[t]):
                if used[tid] >= 0.005:
                    print(f"  {names.get(tid, '?'):32} {used[tid]:.2f} %")
            if args.count:
                counts = json.loads(counts_file.read_text())
                print(f"Textual timer ticks in {args.seconds:g} s:")
                for name, n in counts["ticks"]:
                    print(f"  {n:5d} {name}")
                print("Widget.refresh (widget, caller, layout):")
                for key, n in counts["refreshes"]:
                    print(f"  {n:5d} {tuple(key)}")
        finally:
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
            if writer is not None:
                writer.kill()
                writer.wait()
            emulator.terminate()
            emulator.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
