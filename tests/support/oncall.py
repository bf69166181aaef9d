"""Helpers for the on-call tests: a private state directory, fast emulator presets, `specmon` run as a real
process, and a finalizer that kills every process group the test's servers started."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

FAST_ARGS = """
[server.args]
emulator-speed = 40
emulator-decode-speed = 20
emulator-warmup-delay = 0.2
[bench]
requests = 2
max-new-tokens = 24
warmup = 1
"""


def default_signal_actions() -> None:
    """In the child before exec: the signals the tests send act by default, even where the test run inherited
    them ignored (under `nohup` SIGHUP is ignored, and a background job of a script ignores SIGINT and SIGQUIT)."""
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def write_preset(
    directory: Path, name: str, extends: str, args: str = "", launcher: list[str] | None = None
) -> None:
    """A demo preset over `extends`, fast, with `args` (TOML lines) added to its [server.args]."""
    text = f'name = "{name}"\nextends = "{extends}"\ndemo = true\n'
    if launcher:
        text += "[server]\nlauncher = " + json.dumps(launcher) + "\n"
    text += FAST_ARGS.replace("[bench]", args + "\n[bench]")
    (directory / f"{name}.toml").write_text(text)


class Oncall:
    """One test's environment: its own state directory, presets and processes."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path
        self.state = tmp_path / "state"
        self.presets = tmp_path / "presets"
        self.presets.mkdir()
        write_preset(self.presets, "fast-a", "demo-eagle3-10")
        write_preset(self.presets, "fast-b", "demo-eagle3-5")
        self.env = {
            **os.environ,
            "SPECMON_STATE_DIR": str(self.state),
            "XDG_STATE_HOME": str(tmp_path / "xdg"),
            "PYTHONUNBUFFERED": "1",
        }
        self.env.pop("SPECMON_API_KEY", None)
        self.extra_pids: list[int] = []

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "specmon", *args]

    def run(self, *args: str, timeout: float = 120.0, presets: bool = True,
            cwd: Path | None = None) -> subprocess.CompletedProcess:
        if presets and args[0] in ("start", "switch"):  # first, so a later --presets DIR overrides it
            args = (args[0], "--presets", str(self.presets), *args[1:])
        return subprocess.run(
            self.argv(*args),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
        )

    def json(self, *args: str, expect: int | None = 0, **kw) -> dict:
        done = self.run(*args, "--json", **kw)
        assert expect is None or done.returncode == expect, (
            done.returncode,
            done.stdout,
            done.stderr[-3000:],
        )
        return json.loads(done.stdout)

    def popen(self, *args: str, **kw) -> subprocess.Popen:
        proc = subprocess.Popen(
            self.argv(*args),
            env=self.env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=default_signal_actions,
            **kw,
        )
        self.extra_pids.append(proc.pid)
        return proc

    def records(self) -> list[dict]:
        directory = self.state / "servers"
        out = []
        for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
            with contextlib.suppress(OSError, ValueError):
                data = json.loads(path.read_text())
                if isinstance(data, dict) and isinstance(data.get("pid"), int):
                    out.append(data)
        return out

    def cleanup(self) -> None:
        for record in self.records():
            with contextlib.suppress(OSError, psutil.Error, KeyError, TypeError):
                if abs(psutil.Process(record["pid"]).create_time() - record["create_time"]) < 0.5:
                    os.killpg(record["pgid"], signal.SIGKILL)
        for pid in self.extra_pids:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)


def wait_for(condition, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
