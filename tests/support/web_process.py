"""`specmon monitor --web` as its own process for the web tests: started on a free loopback port, stopped with
its whole session (textual-serve's app processes too), SIGKILL when SIGTERM is not enough."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from specmon.ports import free_port


@contextlib.contextmanager
def web_monitor(tmp_path: Path, *extra: str) -> Iterator[int]:
    """The web monitor of an unreachable server (`extra`: more flags), with its own state directory; its port."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "specmon", "monitor", "--url", "http://127.0.0.1:9", "--web", "--web-port",
         str(port), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "xdg")},
    )  # fmt: skip
    try:
        yield port
    finally:
        stop_session(proc)


def stop_session(proc: subprocess.Popen) -> None:
    """SIGTERM to the process's whole session (it was started with `start_new_session`), SIGKILL after 10 s."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
