"""`specmon demo` end to end: the emulator as a real child process, the app headless, a screenshot, cleanup."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import psutil

DEMO_PRESET = """
description = "smoke test of specmon demo"
extends = "demo-eagle3-10"
demo = true

[server.args]
served-model-name = "{name}"
"""


def _emulators(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "tui.emulator" in cmdline and marker in cmdline:
            found.append(proc)
    return found


def _demo_argv(tmp_path, marker: str, *extra: str) -> list[str]:
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / f"{marker}.toml").write_text(DEMO_PRESET.format(name=marker))
    return [
        sys.executable, "-m", "tui", "demo", "--presets", str(tmp_path / "presets"), "--preset", marker,
        "--speed", "20", *extra,
    ]


def _env(tmp_path) -> dict[str, str]:
    return {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}


def test_headless_demo_saves_a_screenshot_and_leaves_no_emulator(tmp_path):
    marker = f"smoke-{uuid.uuid4().hex[:8]}"
    shot = tmp_path / "demo.svg"
    argv = _demo_argv(tmp_path, marker, "--headless", "--duration", "6", "--screenshot", str(shot))
    done = subprocess.run(argv, env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    svg = shot.read_text()
    assert "EMULATOR" in svg and marker not in done.stderr
    assert "ready" in svg, "at speed 20 the emulated server is ready well within 6 s"
    assert not _emulators(marker), "quitting the demo stops the emulator"
    logs = list((tmp_path / "state").rglob("*.log"))
    assert logs and all(oct(p.stat().st_mode & 0o777) == "0o600" for p in logs)


def test_demo_stops_the_emulator_when_interrupted(tmp_path):
    marker = f"smoke-{uuid.uuid4().hex[:8]}"
    argv = _demo_argv(tmp_path, marker, "--headless", "--duration", "60")
    proc = subprocess.Popen(argv, env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not _emulators(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _emulators(marker), "the demo launched its emulator"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) in (0, 130)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 5
    while _emulators(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _emulators(marker)
