"""Servers outlive specmon (SIGHUP, SIGKILL), `specmon monitor` re-attaches; a demo's emulator never outlives
specmon whatever the signal; a real orphan holding a port is found, named and stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import psutil
import pytest

from specmon.ports import free_port_pair
from tests.support.oncall import gone, wait_for

pytestmark = pytest.mark.timeout(180)


def emulator_children(pid: int) -> list[psutil.Process]:
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for child in children:
        try:
            if "specmon.emulator" in " ".join(child.cmdline()):
                out.append(child)
        except psutil.Error:
            continue
    return out


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT, signal.SIGKILL, signal.SIGTERM])
def test_a_demo_killed_by_any_signal_leaves_no_process(oc, sig):
    demo = oc.popen(
        "demo",
        "--headless",
        "--duration",
        "120",
        "--speed",
        "20",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    (emulator,) = wait_for(lambda: emulator_children(demo.pid), 60, "the demo's emulator")
    emulator_pid = emulator.pid
    os.kill(demo.pid, sig)
    demo.wait(timeout=30)
    wait_for(lambda: gone(emulator_pid), 20, f"the emulator to end after {sig.name} of specmon")


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGKILL])
def test_the_server_outlives_specmon_and_monitor_reattaches(oc, sig):
    port = free_port_pair()
    started = oc.json("start", "fast-a", "--port", str(port), "--wait")
    # The app attached (headless), then its session hangs up or it is killed: the whole group gets the signal.
    app = oc.popen(
        "monitor", "--headless", "--duration", "120", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )

    def polling() -> bool:
        assert app.poll() is None, app.stderr.read().decode()[-3000:]
        return any(c.raddr and c.raddr.port == port for c in psutil.Process(app.pid).net_connections("tcp"))

    wait_for(polling, 60, "the app to poll the server")
    os.killpg(app.pid, sig)
    app.wait(timeout=30)
    assert not gone(started["pid"])
    assert httpx.get(started["url"] + "/health", timeout=5).status_code == 200
    mine = next(s for s in oc.json("ps")["servers"] if s["id"] == started["id"])
    assert mine["alive"]
    # Re-attach: no --url; the log from its start brings the startup back, so "ready" is reached at once.
    again = oc.run("monitor", "--headless", "--duration", "60", "--exit-on", "ready", timeout=90)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"attaching to {started['id']}" in again.stderr


def test_a_real_orphan_holding_the_port_is_found_and_stopped(oc):
    port = free_port_pair()
    # A wrapper shell starts the emulator and is SIGKILLed: the emulator lives on, orphaned, holding the port.
    wrapper = subprocess.Popen(
        [
            "sh",
            "-c",
            f'"{sys.executable}" -m specmon.emulator --model-path demo/m --port {port} '
            "--emulator-speed 40 >/dev/null 2>&1 & wait",
        ],
        env=oc.env,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )
    oc.extra_pids.append(wrapper.pid)
    (orphan,) = wait_for(lambda: emulator_children(wrapper.pid), 30, "the wrapper's emulator")
    wait_for(
        lambda: any(c.laddr.port == port for c in orphan.net_connections("tcp")), 30, "the port to be taken"
    )
    wrapper.kill()
    wrapper.wait(timeout=10)
    wait_for(lambda: orphan.ppid() != wrapper.pid, 10, "the emulator to be reparented")

    taken = oc.json("start", "fast-a", "--port", str(port), expect=1)
    assert f"pid {orphan.pid}" in taken["error"]
    found = next(s for s in oc.json("ps")["servers"] if s["pid"] == orphan.pid)
    assert not found["launched_by_specmon"] and found["url"] == f"http://127.0.0.1:{port}"
    assert not found["orphan"], "a server that outlived its launcher is no orphan (a worker without its server is)"
    stopped = oc.json("stop", str(orphan.pid), "--yes")
    assert stopped["stopped"] and stopped["port_free"]
    wait_for(lambda: gone(orphan.pid), 10, "the orphan to end")
