"""A command run in a real terminal: a private tmux server (its own socket), one window of a given size, its
screen read back as text, keys sent to it and signals to its process. The command's exit code is printed after
it (`EXIT=N`) and the window stays, so a test reads the code and what was left on the terminal. Tests that use it
skip where tmux is absent (`needs_tmux`)."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import time

import pytest

needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")


class Tmux:
    """`argv` running in a `width`x`height` tmux window; `screen()`, `send(*keys)`, `wait_for(...)`, `kill()`."""

    def __init__(self, argv: list[str], size: tuple[int, int] = (80, 24), env: dict[str, str] | None = None) -> None:
        self.tmux = ["tmux", "-L", f"specmon-test-{os.getpid()}-{time.monotonic_ns()}", "-f", "/dev/null"]
        names = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
        shell = f"env {names} {shlex.join(argv)}; echo EXIT=$?; sleep 600"
        width, height = size
        subprocess.run([*self.tmux, "new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height), shell],
                       check=True)

    def screen(self) -> str:
        return subprocess.run([*self.tmux, "capture-pane", "-p", "-t", "t"], capture_output=True, text=True).stdout

    def send(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", "t", *keys], check=True)

    def wait_for(self, condition, timeout: float = 60.0, what: str = "the screen") -> str:
        """The screen, once `condition(screen)` holds; else an AssertionError showing the last screen."""
        deadline = time.monotonic() + timeout
        while True:
            shown = self.screen()
            if condition(shown):
                return shown
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; the screen:\n{shown}")
            time.sleep(0.2)

    def exit_code(self, timeout: float = 60.0) -> int:
        """The command's exit code, once it ended."""
        shown = self.wait_for(lambda s: "EXIT=" in s, timeout, "the command to end")
        return int(shown.rsplit("EXIT=", 1)[1].split()[0])

    def terminal(self) -> dict[str, bool]:
        """The terminal's modes as tmux keeps them: cursor shown, mouse reporting on, the alternate screen on."""
        names = {"cursor": "cursor_flag", "mouse": "mouse_any_flag", "alternate": "alternate_on"}
        shown = subprocess.run([*self.tmux, "display-message", "-p", "-t", "t",
                                " ".join(f"#{{{flag}}}" for flag in names.values())],
                               capture_output=True, text=True, check=True).stdout.split()
        return {name: value == "1" for name, value in zip(names, shown, strict=True)}

    def command_pid(self) -> int:
        """The command's pid (the one child of the window's shell)."""
        import psutil

        shell = int(subprocess.run([*self.tmux, "display-message", "-p", "-t", "t", "#{pane_pid}"],
                                   capture_output=True, text=True, check=True).stdout)
        children = psutil.Process(shell).children()
        assert len(children) == 1, children
        return children[0].pid

    def kill(self) -> None:
        """End the tmux server and whatever the command left running (a test that failed mid-way may leave an app
        that no hang-up reaches, such as the fleet while a drill-down holds the terminal): nothing outlives it."""
        import psutil

        left = []
        with contextlib.suppress(subprocess.CalledProcessError, ValueError, psutil.Error):
            shell = int(subprocess.run([*self.tmux, "display-message", "-p", "-t", "t", "#{pane_pid}"],
                                       capture_output=True, text=True, check=True).stdout)
            left = psutil.Process(shell).children(recursive=True)
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)
        _, alive = psutil.wait_procs(left, timeout=5)
        for process in alive:
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(alive, timeout=5)
