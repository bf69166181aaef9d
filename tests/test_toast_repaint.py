"""A notification leaves nothing painted behind once it has expired (issue 22 item 13: a "Benchmark finished"
toast stayed over the speedup column for minutes). What the terminal shows is read back from a real tmux."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

from tests.support.oncall import Oncall

pytestmark = [pytest.mark.timeout(180), pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux")]


def test_an_expired_benchmark_toast_is_not_left_on_the_terminal(tmp_path):
    oc = Oncall(tmp_path)
    socket = f"specmon-toast-{time.monotonic_ns()}"
    tmux = ["tmux", "-L", socket]
    demo = " ".join([sys.executable, "-m", "specmon", "demo", "--presets", str(oc.presets), "--preset", "fast-a"])

    def screen() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p", "-t", "t"], capture_output=True, text=True).stdout

    def wait(condition, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return True
            time.sleep(0.2)
        return condition()

    env = " ".join(f"{k}={v}" for k, v in oc.env.items() if k in ("SPECMON_STATE_DIR", "XDG_STATE_HOME"))
    subprocess.run([*tmux, "new-session", "-d", "-s", "t", "-x", "80", "-y", "24", f"env {env} {demo}"], check=True)
    try:
        assert wait(lambda: "ready" in screen(), 60), screen()
        subprocess.run([*tmux, "send-keys", "-t", "t", "3"], check=True)
        assert wait(lambda: "press b to benchmark" in screen(), 30), screen()
        subprocess.run([*tmux, "send-keys", "-t", "t", "b"], check=True)
        assert wait(lambda: "Benchmark finished" in screen(), 60), screen()
        shown = time.monotonic()
        assert wait(lambda: "Benchmark finished" not in screen(), 15), screen()  # a toast lasts 5 s
        assert time.monotonic() - shown < 10
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
        oc.cleanup()
