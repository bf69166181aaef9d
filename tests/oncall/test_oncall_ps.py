"""`specmon ps` stays readable through a session of switches: a switch leaves no dead row, `--alive` and
`--prune`; a nohup'd server is not an orphan, and one started with `specmon emulate` is the emulator (issue 22
items 9 and 10). Real processes."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from specmon.ports import free_port_pair
from tests.support.oncall import wait_for

pytestmark = pytest.mark.timeout(180)


def test_switches_leave_no_dead_rows(oc):
    first = oc.json("start", "fast-a", "--port", str(free_port_pair()), "--wait")
    for preset in ("fast-b", "fast-a", "fast-b"):
        assert oc.json("switch", preset, "--yes", "--requests", "0")["state"] == "ready"
    servers = [s for s in oc.json("ps")["servers"] if s["launched_by_specmon"]]  # others' may run on this host
    assert [(s["preset"], s["alive"]) for s in servers] == [("fast-b", True)], servers
    assert first["id"] not in {s["id"] for s in servers}


def test_ps_alive_hides_and_prune_removes_the_servers_that_are_gone(oc):
    port = free_port_pair()
    gone = oc.json("start", "fast-a", "--port", str(port), "--wait")
    assert oc.json("stop", gone["id"], "--yes")["stopped"]
    alive = oc.json("start", "fast-b", "--port", str(port), "--wait")
    text = oc.run("ps").stdout
    assert "1 of these are gone" in text and "--prune" in text, text
    ours = lambda listed: [s["id"] for s in listed["servers"] if s["launched_by_specmon"]]  # noqa: E731
    assert ours(oc.json("ps", "--alive")) == [alive["id"]]
    pruned = oc.json("ps", "--prune")
    assert pruned["pruned"] == [gone["id"]] and ours(pruned) == [alive["id"]]
    assert [r["id"] for r in oc.records()] == [alive["id"]], "the dead record's file is gone"


def test_a_nohup_specmon_emulate_server_is_the_emulator_and_no_orphan(oc, tmp_path):
    port = free_port_pair()
    log = tmp_path / "emulate.log"
    specmon = os.path.join(os.path.dirname(sys.executable), "specmon")
    command = (f"nohup {specmon} emulate --model-path demo/Kimi-K2.5 --tp-size 8 --port {port} "
               f"--emulator-speed 40 > {log} 2>&1 &")  # the shell exits at once: re-parented, as after a logout
    subprocess.run(["sh", "-c", command], check=True, env=oc.env, timeout=30)

    def found():
        return next((s for s in oc.json("ps")["servers"] if s["url"].endswith(f":{port}")), None)

    server = wait_for(found, 30, "the nohup'd server in ps")
    try:
        assert server["emulator"] and not server["orphan"] and not server["launched_by_specmon"], server
        assert psutil.Process(server["pid"]).ppid() != os.getpid()
        row = next(line for line in oc.run("ps").stdout.splitlines() if f":{port} " in line)
        assert "orphan" not in row and "alive" in row, row
    finally:
        psutil.Process(server["pid"]).kill()
