"""A port held by a server specmon launched: the refusal (`specmon start`, with or without the preflight, and
`specmon check PRESET`'s preflight) names that server by id, preset and pid, and says which switch replaces
it. Any other holder is named by its command, as before. Real processes."""

from __future__ import annotations

import socket

import psutil
import pytest

from specmon.gpu.model import GpuSnapshot
from specmon.launch.presets import Preset
from specmon.ports import free_port_pair
from specmon.preflight import run_preflight
from tests.support.oncall import wait_for

pytestmark = pytest.mark.timeout(180)


def test_a_port_held_by_a_specmon_server_names_it_and_the_switch_that_replaces_it(oc, tmp_path):
    # Marks in specmon's own environment are never passed on: each launch carries only its own.
    oc.env.update(SPECMON_SERVER_ID="ffffff", SPECMON_PRESET="not-this-one", SPECMON_LAUNCH_TOKEN="0" * 32)
    port = free_port_pair()
    first = oc.json("start", "fast-a", "--port", str(port), "--wait")
    held = f"port {port} on 127.0.0.1 is held by specmon server {first['id']} (preset fast-a, pid {first['pid']})"
    for preflight in ((), ("--no-preflight",)):
        refused = oc.json("start", "fast-b", "--port", str(port), *preflight, expect=1)
        assert refused["error"] == f"{held}: use `specmon switch fast-b --from {first['id']}`", refused

    real = Preset(name="real-b", launcher=("{python}", "-m", "sglang.launch_server"),
                  args={"model-path": str(tmp_path), "port": port})
    report = run_preflight(real, gpus=GpuSnapshot.unavailable("no GPUs in this test"))
    [problem] = [p for p in report.problems if p.code == "port-in-use"]
    assert problem.message.startswith(f"port {port} on 127.0.0.1 is taken by specmon server {first['id']} "
                                      f"(preset fast-a, pid {first['pid']})"), problem
    assert problem.hint == f"use `specmon switch real-b --from {first['id']}`"


def test_a_port_held_by_another_process_names_its_command_and_suggests_no_switch(oc):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        refused = oc.json("start", "fast-b", "--port", str(port), expect=1)
    assert refused["error"].startswith(f"port {port} on 127.0.0.1 is already in use by pid "), refused
    assert "specmon switch" not in refused["error"] and "specmon server" not in refused["error"]


def test_a_launch_carries_its_own_marks_never_inherited_ones(oc, monkeypatch):
    from specmon.launch.marks import launch_mark
    from specmon.launch.presets import load_presets
    from specmon.launch.supervisor import ServerSupervisor

    for name, value in (("SPECMON_SERVER_ID", "ffffff"), ("SPECMON_PRESET", "not-this-one"),
                        ("SPECMON_LAUNCH_TOKEN", "0" * 32)):
        monkeypatch.setenv(name, value)
    preset = load_presets([oc.presets]).get("fast-a")
    supervisor = ServerSupervisor(preset, port=free_port_pair(), run_dir=oc.root / "runs", preflight=None)
    supervisor.start()
    try:
        proc = psutil.Process(supervisor.pid)
        wait_for(lambda: "specmon.emulator" in proc.cmdline(), 30, "the launch's exec")  # before it: specmon's env
        mark = launch_mark(supervisor.pid)
        assert (mark.preset, mark.server_id) == ("fast-a", None), mark
        assert str(mark) == f"a server specmon launched (preset fast-a, pid {supervisor.pid})"
        assert "SPECMON_LAUNCH_TOKEN" not in proc.environ()
    finally:
        supervisor.stop()
