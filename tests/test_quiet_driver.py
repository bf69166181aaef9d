"""QuietLinuxDriver in a real pseudo-terminal: keys (a lone Esc too) still arrive, the app still quits at once, and
between inputs the input thread sleeps instead of waking ten times a second as Textual's own does."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

from specmon.tui.app import SpecmonApp
from specmon.tui.config import AppConfig
from specmon.tui.driver import SETTLE_S, QuietLinuxDriver
from specmon.tui.fleet import FleetApp

APP = r'''
import json, subprocess, sys
from textual.app import App
from textual.widgets import Static
from specmon.tui.driver import QuietTerminal

class Probe(QuietTerminal, App):
    def __init__(self, report):
        super().__init__()
        self.report, self.keys, self.ticks, self.mounted, self.resumed = report, [], 0, False, False

    def compose(self):
        yield Static("probe")

    def on_mount(self):
        self.mounted = True
        self.set_interval(0.1, self.tick)
        self.write()

    def write(self):
        data = {"driver": type(self._driver).__name__, "wakeups": getattr(self._driver, "input_wakeups", None),
                "keys": self.keys, "ticks": self.ticks, "size": [self.size.width, self.size.height],
                "ready": self.mounted, "resumed": self.resumed}
        with open(self.report, "w") as out:
            json.dump(data, out)

    def tick(self):
        self.ticks += 1
        self.write()

    def on_resize(self, event):
        self.write()

    def on_key(self, event):
        self.keys.append(event.key)
        self.write()
        if event.key == "q":
            self.exit()
        if event.key == "s":  # as the fleet opens a server's screen: another program has the terminal meanwhile
            with self.suspend():
                subprocess.run([sys.executable, "-c", "pass"], check=True)
            self.resumed = True
            self.write()

Probe(sys.argv[1]).run()
'''


class PtyApp:
    """A Textual app on the slave side of a pty, its output read (and dropped) so that it never blocks."""

    def __init__(self, tmp: Path, env: dict[str, str] | None = None) -> None:
        self.report = tmp / "report.json"
        script = tmp / "probe_app.py"
        script.write_text(APP)
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        env = {**os.environ, "TERM": "xterm-256color", "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
               **(env or {})}
        env.pop("TEXTUAL_DRIVER", None)
        with open(tmp / "stderr.txt", "wb") as stderr:
            self.proc = subprocess.Popen([sys.executable, str(script), str(self.report)], stdin=slave, stdout=slave,
                                         stderr=stderr, env=env, start_new_session=True)
        os.close(slave)
        self.master = master
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        try:
            while os.read(self.master, 65536):
                pass
        except OSError:
            pass

    def read(self) -> dict:
        try:
            return json.loads(self.report.read_text())
        except (OSError, ValueError):
            return {}

    def wait(self, predicate, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            report = self.read()
            if report and predicate(report):
                return report
            time.sleep(0.02)
        raise AssertionError(f"timed out; last report {self.read()}")

    def resize(self, columns: int, lines: int) -> None:
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
        os.kill(self.proc.pid, signal.SIGWINCH)  # the pty is not its controlling terminal: no signal of its own

    def send(self, data: bytes) -> None:
        os.write(self.master, data)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        os.close(self.master)


def test_keys_arrive_a_lone_escape_too_and_the_input_thread_sleeps_between_them(tmp_path):
    app = PtyApp(tmp_path)
    try:
        report = app.wait(lambda r: r.get("ready"))
        assert report["driver"] == "QuietLinuxDriver"
        app.send(b"x")
        app.wait(lambda r: r["keys"] == ["x"])
        app.send(b"\x1b")  # a lone Esc: a key only once the parser's timeout passed with nothing after it
        report = app.wait(lambda r: r["keys"] == ["x", "escape"])
        # Settled after the last input, the thread sleeps: over the next 3 s of the app's own ticks it wakes at
        # most a couple of times (Textual's driver: 10 a second, 30 in all).
        settled = app.wait(lambda r: r["ticks"] >= report["ticks"] + 10 * (SETTLE_S + 0.5))
        quiet = app.wait(lambda r: r["ticks"] >= settled["ticks"] + 30)
        assert quiet["wakeups"] - settled["wakeups"] <= 2, (settled, quiet)
        app.send(b"q")  # the exit wakes the sleeping thread: the app ends at once
        app.wait(lambda r: r["keys"][-1:] == ["q"])
        assert app.proc.wait(15) == 0
    finally:
        app.close()


def test_after_a_suspension_keys_still_arrive_and_the_app_quits(tmp_path):
    """The fleet's Enter suspends the app while a server's screen runs: the driver's input thread starts again
    after it (its wake pipe, closed with the suspension, was used again: the app died on its way back)."""
    app = PtyApp(tmp_path)
    try:
        app.wait(lambda r: r.get("ready"))
        app.send(b"s")
        app.wait(lambda r: r.get("resumed"))
        app.send(b"x")
        app.wait(lambda r: r["keys"] == ["s", "x"])
        app.send(b"q")
        app.wait(lambda r: r["keys"][-1:] == ["q"])
        assert app.proc.wait(15) == 0, (tmp_path / "stderr.txt").read_text()[-2000:]
    finally:
        app.close()


def test_the_app_lays_out_for_the_terminal_it_is_on_whatever_columns_and_lines_say(tmp_path):
    # Stale $COLUMNS/$LINES (readline exports them, so does a tool that started the shell) made Textual's driver
    # lay the app out for another terminal's size and ignore every resize.
    app = PtyApp(tmp_path, env={"COLUMNS": "200", "LINES": "50"})
    try:
        app.wait(lambda r: r.get("ready") and r["size"] == [80, 24])
        app.resize(100, 30)
        app.wait(lambda r: r["size"] == [100, 30])
    finally:
        app.close()


def test_the_apps_use_it_on_a_linux_terminal_and_keep_textuals_choice_elsewhere(monkeypatch):
    monkeypatch.delenv("TEXTUAL_DRIVER", raising=False)
    assert SpecmonApp(AppConfig(url="http://127.0.0.1:9", poll=False)).driver_class is QuietLinuxDriver
    assert FleetApp.get_driver_class(FleetApp.__new__(FleetApp)) is QuietLinuxDriver
    from textual import constants
    from textual.drivers.headless_driver import HeadlessDriver

    monkeypatch.setattr(constants, "DRIVER", "textual.drivers.headless_driver:HeadlessDriver")  # $TEXTUAL_DRIVER

    assert SpecmonApp(AppConfig(url="http://127.0.0.1:9", poll=False)).driver_class is HeadlessDriver
