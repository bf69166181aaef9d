"""The built-in demo presets run under ServerSupervisor against the real emulator, and a preset switch works."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import httpx
import pytest

from specmon.launch.presets import load_presets
from specmon.launch.supervisor import ServerSupervisor
from specmon.ports import free_port_pair, port_is_free
from specmon.preflight import launch_check

pytestmark = pytest.mark.timeout(90)

READY = "The server is fired up and ready to roll!"


def fast(name: str):
    preset = load_presets(user_dir=None).presets[name]
    return dataclasses.replace(preset, args={**preset.args, "emulator-speed": 50})


def wait_ready(sup: ServerSupervisor, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = Path(sup.log_path).read_text()
        if READY in text:
            return text
        assert sup.is_running, f"server exited with {sup.returncode}:\n{text}"
        time.sleep(0.05)
    raise AssertionError(f"not ready after {timeout} s:\n{Path(sup.log_path).read_text()}")


def server_info(port: int) -> dict:
    return httpx.get(f"http://127.0.0.1:{port}/get_server_info", timeout=5).json()


def test_demo_preset_switch_restarts_the_emulator_with_the_new_draft_tokens(tmp_path):
    port = free_port_pair()
    sup = ServerSupervisor(fast("demo-eagle3-10"), tmp_path / "runs" / "first.log", port, preflight=launch_check)
    try:
        sup.start()
        first_pid = sup.pid
        text = wait_ready(sup)
        assert "server_args=" in text
        assert server_info(port)["speculative_num_draft_tokens"] == 10

        new_log = sup.restart_with(fast("demo-eagle3-16"))
        assert new_log != tmp_path / "runs" / "first.log" and new_log.parent == tmp_path / "runs"
        assert sup.last_stop.returncode is not None and sup.last_stop.leftovers == ()
        assert sup.pid != first_pid
        wait_ready(sup)
        info = server_info(port)
        assert (info["speculative_num_steps"], info["speculative_num_draft_tokens"]) == (15, 16)
    finally:
        report = sup.stop(timeout=10)
    assert report.leftovers == ()
    assert port_is_free(port) and port_is_free(port + 1)
