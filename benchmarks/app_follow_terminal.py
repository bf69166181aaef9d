"""The app's CPU in a real terminal (tmux), idle and following a log, beside sgtop when it is installed.

What a user runs: the real `specmon monitor --url URL --log LOG` in a detached tmux session of WxH, against the
emulator started with `--enable-metrics` (so /metrics is scraped as on a real server) and writing its own log,
dated lines as SGLang writes them, into LOG. Nothing of the harness runs inside the measured processes: their
CPU time is read with psutil, and how far the screen lags behind the writer is read from the terminal itself
(`tmux capture-pane`: the newest line number the log pane shows).

Per round and tool:
1. idle: the server ready, only its own access lines in the log, for --idle seconds;
2. following: a writer process appends SGLang 0.5.16 `Decode batch` lines (dated, DP-tagged, as with DP
   attention: `[2026-12-01 10:00:00 DP0 TP0] Decode batch, ...`) at each of --rates lines/s for --seconds.

With --vs-sgtop (sgtop installed: `pip install sgtop`), each round measures sgtop the same way, alternated with
specmon (A B C A B C): "sgtop" is `sgtop-server --log LOG` (the sidecar that reads the log) and `sgtop --mode proxy`
in the same tmux size, their CPU added up; "sgtop-direct" is `sgtop --mode direct` alone (it asks the server and
reads no log, so it is measured idle only).

    .venv/bin/python -m benchmarks.app_follow_terminal [--size 200x50] [--rates 1000,10000] [--seconds 20]
        [--idle 20] [--rounds 1] [--vs-sgtop] [--baseline DIR]

--baseline DIR alternates with `python -m specmon` from another checkout (an older commit: before/after), laid out
as installed in a temporary folder: run in the bare checkout, its `specmon.tui` and `specmon.widgets` would be
this venv's editable ones.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

from benchmarks.app_idle_cpu import cpu_seconds
from specmon.ports import free_port

WRITER = r"""
import sys, time
path, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
batch_every = 0.01
with open(path, "a", buffering=1 << 22) as out:
    start = time.time()
    print(repr(start), flush=True)
    began = time.monotonic()
    n = 0
    while (now := time.monotonic()) - began < seconds:
        due = int((now - began) * rate)
        if due > n:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            out.write("".join(
                f"[{stamp} DP{i % 2} TP0] Decode batch, #running-req: 48, #full token: {i}, full token usage: 0.34, "
                f"#swa token: 52113, swa token usage: 0.21, accept len: 3.12, accept rate: 0.53, cuda graph: True, "
                f"gen throughput (token/s): 4211.07, #queue-req: 0\n"
                for i in range(n, due)))
            out.flush()
            n = due
        time.sleep(batch_every)
print(n)
"""
LINE_NO = re.compile(r"#full token: (\d+),")


def _screen(session: str) -> str:
    return subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.1)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


class Tool:
    """One monitor run in its own tmux session; `processes()` are what is measured."""

    def __init__(self, name: str, session: str, extra: list[subprocess.Popen] | None = None) -> None:
        self.name, self.session, self.extra = name, session, extra or []

    def processes(self) -> list[psutil.Process]:
        out = subprocess.run(["tmux", "list-panes", "-t", self.session, "-F", "#{pane_pid}"],
                             capture_output=True, text=True, check=True).stdout
        pane = psutil.Process(int(out.split()[0]))
        return [pane, *pane.children(recursive=True), *(psutil.Process(p.pid) for p in self.extra)]

    def cpu(self) -> float:
        return sum(cpu_seconds(p) for p in self.processes())

    def rss_mib(self) -> float:
        return sum(p.memory_info().rss for p in self.processes()) / 2**20

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.session], capture_output=True)
        for proc in self.extra:
            proc.terminate()
            proc.wait(10)


def _tmux(session: str, size: tuple[int, int], env: dict[str, str], command: list[str], tmp: str,
          cwd: str | None = None) -> None:
    script = Path(tmp) / f"{session}.sh"
    script.write_text("exec " + " ".join(f"'{part}'" for part in command) + "\n")
    env_args = [f"{k}={v}" for k, v in env.items()]
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", str(size[0]), "-y", str(size[1]),
                    "-c", cwd or os.getcwd(), "env", *env_args, "TERM=xterm-256color", "sh", str(script)], check=True)


def start_specmon(url: str, log: Path, size: tuple[int, int], tmp: str, checkout: str | None = None) -> Tool:
    """`specmon monitor` in tmux; from another checkout's sources when given (`python -m specmon` run there)."""
    session = f"specmon-bench-{os.getpid()}"
    _tmux(session, size, {"XDG_STATE_HOME": tmp},
          [sys.executable, "-m", "specmon", "monitor", "--url", url, "--log", str(log)], tmp, cwd=checkout)
    tool = Tool("specmon" if checkout is None else "baseline", session)
    try:
        _wait(lambda: _screen(session).splitlines()[0].rstrip().endswith("ready"), 60, "specmon to show ready")
    except SystemExit:
        print(_screen(session))
        tool.close()
        raise
    return tool


def start_sgtop_direct(port: int, size: tuple[int, int], tmp: str) -> Tool:
    """sgtop alone, asking the server itself (/metrics, /get_server_info): it reads no log."""
    session = f"sgtop-direct-bench-{os.getpid()}"
    _tmux(session, size, {}, [str(Path(sys.executable).parent / "sgtop"), "--port", str(port), "--mode", "direct"], tmp)
    tool = Tool("sgtop-direct", session)
    try:
        _wait(lambda: len(_screen(session).strip()) > 200, 30, "sgtop to draw")
    except SystemExit:
        tool.close()
        raise
    return tool


def start_sgtop(port: int, log: Path, size: tuple[int, int], tmp: str) -> Tool:
    side_port = free_port()
    bindir = Path(sys.executable).parent
    sidecar = subprocess.Popen([str(bindir / "sgtop-server"), "--log", str(log), "--service-port", str(port),
                                "--port", str(side_port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    session = f"sgtop-bench-{os.getpid()}"
    tool = Tool("sgtop", session, [sidecar])
    try:
        _wait(lambda: _answers(f"http://127.0.0.1:{side_port}/api/status"), 30, "sgtop-server")
        _tmux(session, size, {}, [str(bindir / "sgtop"), "--port", str(side_port), "--mode", "proxy"], tmp)
        _wait(lambda: "sgtop" in _screen(session).lower() or len(_screen(session).strip()) > 200, 30, "sgtop to draw")
    except SystemExit:
        tool.close()
        raise
    return tool


def measure(tool: Tool, log: Path, idle_s: float, rates: list[int], seconds: float) -> dict:
    time.sleep(3)  # the first screens, and the app's background loads, come before the window
    result: dict = {"tool": tool.name}
    cpu0, t0 = tool.cpu(), time.monotonic()
    time.sleep(idle_s)
    result["idle"] = 100 * (tool.cpu() - cpu0) / (time.monotonic() - t0)
    for rate in rates if tool.name != "sgtop-direct" else []:  # it reads no log: following costs it nothing
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(log), str(rate), str(seconds)],
                                  stdout=subprocess.PIPE, text=True)
        start = float(writer.stdout.readline())
        cpu0, t0 = tool.cpu(), time.monotonic()
        lags = []
        while writer.poll() is None:
            if tool.name in ("specmon", "baseline"):
                numbers = [int(n) for n in LINE_NO.findall(_screen(tool.session))]
                if numbers:
                    lags.append(time.time() - (start + max(numbers) / rate))
            time.sleep(0.5)
        follow_s = time.monotonic() - t0
        result[rate] = 100 * (tool.cpu() - cpu0) / follow_s
        result[f"{rate} lines"] = int(writer.stdout.read().strip())
        result[f"{rate} lag"] = max(lags) if lags else None
        time.sleep(2)  # the tool settles before the next window
    result["rss"] = tool.rss_mib()
    return result


def installed_layout(checkout: str, dest: Path) -> str:
    """`checkout`'s sources laid out as installed (its tui/ as specmon/tui, ...), so that `python -m specmon` run
    there imports that checkout's app and widgets, not this venv's editable ones (which a bare checkout would)."""
    from scripts.lint_imports import installed_tree, package_dirs

    installed_tree(dest, Path(checkout))
    for name, folder in package_dirs(Path(checkout)).items():
        for source in folder.rglob("*"):
            if source.is_file() and source.suffix not in (".py", ".pyc") and "__pycache__" not in source.parts:
                copy = dest.joinpath(*name.split("."), source.relative_to(folder))
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, copy)
    return str(dest)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="200x50")
    parser.add_argument("--rates", default="1000,10000", help="lines/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--idle", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--vs-sgtop", action="store_true", help="alternate each round with sgtop (+ sgtop-server)")
    parser.add_argument("--baseline", metavar="DIR", help="alternate each round with specmon from another checkout")
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        print("tmux is not installed")
        return 2
    if args.vs_sgtop and not (Path(sys.executable).parent / "sgtop").exists():
        print("sgtop is not installed in this environment (pip install sgtop)")
        return 2
    size = tuple(int(v) for v in args.size.split("x"))
    rates = [int(r) for r in args.rates.split(",") if r]
    results: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        baseline = installed_layout(args.baseline, Path(tmp) / "baseline") if args.baseline else None
        log = Path(tmp) / "server.log"
        port = free_port()
        with open(log, "ab") as out:
            emulator = subprocess.Popen(
                [sys.executable, "-m", "specmon.emulator", "--model-path", "demo/m", "--port", str(port),
                 "--enable-metrics", "--emulator-speed", "40"],
                env={**os.environ, "XDG_STATE_HOME": tmp}, stdout=out, stderr=out, start_new_session=True,
            )
        try:
            _wait(lambda: _answers(f"http://127.0.0.1:{port}/health"), 60, "the emulator to be ready")
            for _ in range(args.rounds):
                starters = [lambda: start_specmon(f"http://127.0.0.1:{port}", log, size, tmp)]
                if args.baseline:
                    starters.append(lambda: start_specmon(f"http://127.0.0.1:{port}", log, size, tmp, baseline))
                if args.vs_sgtop:
                    starters.append(lambda: start_sgtop(port, log, size, tmp))
                    starters.append(lambda: start_sgtop_direct(port, size, tmp))
                for start in starters:
                    tool = start()
                    try:
                        results.append(measure(tool, log, args.idle, rates, args.seconds))
                    finally:
                        tool.close()
                    print(_row(results[-1], rates), flush=True)
        finally:
            emulator.terminate()
            emulator.wait(10)
    print(f"\ntmux {args.size}, % of one core (each round's figures; median):")
    for name in ("specmon", "baseline", "sgtop", "sgtop-direct"):
        mine = [r for r in results if r["tool"] == name]
        if mine:
            cols = ["idle", *(rates if name != "sgtop-direct" else [])]
            print(f"  {name:12}" + "".join(
                f"  {c if c == 'idle' else f'{c}/s'}: {', '.join(f'{r[c]:.2f}' for r in mine)} "
                f"({statistics.median(r[c] for r in mine):.2f})" for c in cols))
    return 0


def _row(result: dict, rates: list[int]) -> str:
    parts = [f"{result['tool']:12} idle {result['idle']:.2f} %"]
    for rate in (r for r in rates if f"{r} lines" in result):
        lag = result[f"{rate} lag"]
        parts.append(f"{rate}/s {result[rate]:.2f} % ({result[f'{rate} lines']} lines"
                     + (f", lag max {lag:.2f} s)" if lag is not None else ")"))
    parts.append(f"RSS {result['rss']:.0f} MiB")
    return "   ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
