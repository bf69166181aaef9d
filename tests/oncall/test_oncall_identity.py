"""`specmon stop` signals only the recorded server, proven by pid, start time and command line, never a process
that reused its pid or that merely holds its port (issue 23 item 1). Real processes, real signals."""

from __future__ import annotations

import contextlib
import errno
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from specmon.ports import free_port, free_port_pair
from tests.support.oncall import Oncall, wait_for, write_preset

pytestmark = pytest.mark.timeout(120)

HOLD_PORT = """
import socket, sys, time
sock = socket.socket()
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", int(sys.argv[1])))
sock.listen()
print("listening", flush=True)
time.sleep(600)
"""


@pytest.fixture
def bystander():
    """A process of this user holding a port: what a reused pid or a new port holder would be."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", HOLD_PORT, str(port)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "listening"
    yield proc, port
    proc.kill()
    proc.wait(timeout=10)


def write_record(oc: Oncall, server_id: str, pid: int, create_time: float, port: int, argv: list[str]) -> None:
    servers = oc.state / "servers"
    servers.mkdir(parents=True, exist_ok=True, mode=0o700)
    record = {"id": server_id, "preset": "fast-a", "argv": argv, "pid": pid, "pgid": pid,
              "create_time": create_time, "url": f"http://127.0.0.1:{port}", "host": "127.0.0.1", "port": port,
              "log": str(oc.root / "server.log"), "started_at": time.time() - 60}  # fmt: skip
    path = servers / f"{server_id}.json"
    path.write_text(json.dumps(record))
    path.chmod(0o600)


def emulator_argv(port: int) -> list[str]:
    return [sys.executable, "-m", "specmon.emulator", "--model-path", "demo/Kimi-K2.5", "--port", str(port)]


def still_running(proc: subprocess.Popen) -> bool:
    time.sleep(0.2)  # a SIGKILL sent just before would have landed by now
    return proc.poll() is None


def test_stop_never_kills_a_process_that_reused_the_records_pid(oc, bystander):
    proc, port = bystander
    started = psutil.Process(proc.pid).create_time()
    write_record(oc, "aaa111", proc.pid, started - 3600.0, port, emulator_argv(port))  # the server began earlier
    out = oc.json("stop", "aaa111", "--yes")
    assert out["signal"] is None and still_running(proc), out
    assert not any(x["killed"] for x in out["leftovers"]), out
    assert all(not x["killable"] for x in out["leftovers"]), out


def test_stop_never_kills_a_process_by_its_port_alone(oc, bystander):
    proc, port = bystander
    gone_pid = subprocess.Popen([sys.executable, "-c", "pass"])
    gone_pid.wait()
    write_record(oc, "bbb222", gone_pid.pid, time.time() - 3600.0, port, emulator_argv(port))
    done = oc.run("stop", "bbb222", "--yes")
    assert still_running(proc), done.stdout
    assert "was not running" in done.stdout and f"pid {proc.pid}" in done.stdout, done.stdout
    assert "not the recorded server" in done.stdout, done.stdout
    assert done.returncode == 0, done.stderr


def test_same_pid_and_start_time_with_another_command_line_is_not_the_server(oc, bystander):
    proc, port = bystander
    write_record(oc, "ccc333", proc.pid, psutil.Process(proc.pid).create_time(), port, emulator_argv(port))
    listed = next(s for s in oc.json("ps")["servers"] if s["id"] == "ccc333")
    assert not listed["alive"], "a process running another command is not the recorded server"
    out = oc.json("stop", "ccc333", "--yes")
    assert out["signal"] is None and still_running(proc), out


def test_stop_kills_the_recorded_servers_own_leftover_but_no_bystander(oc, bystander):
    """The server's own processes are still stopped: pid, start time and command line match."""
    proc, port = bystander
    server_port = free_port_pair()
    started = oc.json("start", "fast-a", "--port", str(server_port), "--wait")
    stopped = oc.json("stop", started["id"], "--yes")
    assert stopped["signal"] == "SIGTERM" and stopped["stopped"] and stopped["port_free"]
    assert wait_for(lambda: not psutil.pid_exists(started["pid"]) or
                    psutil.Process(started["pid"]).status() == psutil.STATUS_ZOMBIE)  # fmt: skip
    assert still_running(proc)


# ----- issue 23 item 2: a server is never left running with no record


def servers_on(port: int) -> list[psutil.Process]:
    """The emulator processes serving ``port`` (found by command line, record or not)."""
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if "specmon.emulator" in " ".join(cmdline) and str(port) in cmdline:
            out.append(proc)
    return out


def kill_all(procs: list[psutil.Process]) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def test_an_unwritable_state_directory_launches_nothing(oc, tmp_path):
    oc.state.mkdir(mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (oc.state / "servers").symlink_to(elsewhere)
    port = free_port_pair()
    done = oc.run("start", "fast-a", "--port", str(port), "--no-preflight")
    try:
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert "not launched" in done.stdout and "state file" in done.stdout, done.stdout
        assert servers_on(port) == []
    finally:
        kill_all(servers_on(port))


@pytest.mark.parametrize("delay", [None, "0.02", "0.2"])
def test_specmon_killed_between_launch_and_record_leaves_a_recorded_server(oc, tmp_path, delay):
    """The launcher signals specmon (its parent) as it starts: whenever SIGTERM lands, the server that runs
    has a record (`ps` lists it as launched by specmon) and `stop` stops it. With no pause the signal lands
    as specmon returns from the launch, a race: five tries (without the pending record, about one in three
    left the server unrecorded)."""
    script = tmp_path / "serve.sh"
    pause = f"sleep {delay}\n" if delay else ""
    script.write_text(f'#!/bin/sh\n{pause}kill -TERM $PPID\nexec "{sys.executable}" -m specmon.emulator "$@"\n')
    script.chmod(0o700)
    write_preset(oc.presets, "fast-kill", "demo-eagle3-10", launcher=[str(script)])
    for _ in range(1 if delay else 5):
        port = free_port_pair()
        try:
            done = oc.run("start", "fast-kill", "--port", str(port), "--no-preflight")
            assert done.returncode in (0, 143) and "Traceback" not in done.stderr, done.stderr
            running = wait_for(lambda p=port: servers_on(p), 30, "the launched server")
            listed = oc.json("ps")["servers"]
            mine = [s for s in listed if s["alive"] and s["launched_by_specmon"] and s["url"].endswith(f":{port}")]
            assert [s["pid"] for s in mine] == [running[0].pid], listed
            stopped = oc.json("stop", mine[0]["id"], "--yes")
            assert stopped["stopped"] and stopped["signal"] == "SIGTERM", stopped
            assert wait_for(lambda p=port: not servers_on(p), 20, "the server to stop")
        finally:
            kill_all(servers_on(port))


def killed_in_launch(monkeypatch, oc, where: str, port: int) -> Path:
    """`start_detached` run here, cut short by a SIGTERM's SystemExit(143) landing at `where`: "before" the
    process starts (its pending file written) or "after" it (the process runs, its record not yet written).
    Returns the pending file left behind."""
    from specmon.launch.presets import load_presets
    from specmon.launch.supervisor import ServerSupervisor
    from specmon.oncall import launcher

    monkeypatch.setenv("SPECMON_STATE_DIR", str(oc.state))
    preset = load_presets([oc.presets]).get("fast-a")

    def sigterm(*args, **kwargs):
        raise SystemExit(143)

    if where == "before":
        monkeypatch.setattr(ServerSupervisor, "start", sigterm)
    else:
        monkeypatch.setattr(launcher, "_record_launch", sigterm)
    with pytest.raises(SystemExit):
        launcher.start_detached(preset, port)
    monkeypatch.undo()
    [pending] = (oc.state / "servers").glob("*.launching")
    return pending


def test_a_pending_launch_is_never_adopted_by_a_later_launch_of_the_same_command(oc, monkeypatch):
    """A launch cut short before its process started leaves its pending file; a later `start` of the same
    preset on the same port (the same command line) is its own server, listed once, under its own id."""
    port = free_port_pair()
    try:
        pending = killed_in_launch(monkeypatch, oc, "before", port)
        started = oc.json("start", "fast-a", "--port", str(port), "--no-preflight")
        listed = [s for s in oc.json("ps")["servers"] if s["alive"] and s["pid"] == started["pid"]]
        assert [s["id"] for s in listed] == [started["id"]], listed
        assert pending.exists(), "the cut-short launch started nothing: nothing adopts it"
    finally:
        kill_all(servers_on(port))


def test_a_pending_launch_is_adopted_by_its_process_whatever_the_clocks_say(oc, monkeypatch):
    """psutil's start times count from the boot second, so they read up to a second before the wall clock
    (the launch's `started_at`): a launched process must be found by what it is, not by when it seems to have
    started. Here the pending file says the launch began 1 s after psutil's start time of its process."""
    port = free_port_pair()
    try:
        pending = killed_in_launch(monkeypatch, oc, "after", port)
        [server] = wait_for(lambda: servers_on(port), 30, "the launched server")
        data = json.loads(pending.read_text())
        pending.write_text(json.dumps({**data, "started_at": server.create_time() + 1.0}))
        mine = [s for s in oc.json("ps")["servers"] if s["alive"] and s["launched_by_specmon"]]
        assert [(s["id"], s["pid"]) for s in mine] == [(data["id"], server.pid)], mine
        assert not pending.exists()
        stopped = oc.json("stop", data["id"], "--yes")
        assert stopped["stopped"] and stopped["signal"] == "SIGTERM", stopped
    finally:
        kill_all(servers_on(port))


def test_a_record_that_cannot_be_written_after_the_launch_stops_the_server(oc, monkeypatch):
    from specmon.launch.presets import load_presets
    from specmon.launch.supervisor import SupervisorError
    from specmon.oncall import launcher, state

    monkeypatch.setenv("SPECMON_STATE_DIR", str(oc.state))
    preset = load_presets([oc.presets]).get("fast-a")

    def disk_full(record):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(state, "save", disk_full)
    port = free_port_pair()
    try:
        with pytest.raises(SupervisorError, match="stopped the server it launched"):
            launcher.start_detached(preset, port)
        assert servers_on(port) == [], "the launched server was stopped"
        assert list((oc.state / "servers").iterdir()) == [], "no record, no pending launch"
    finally:
        kill_all(servers_on(port))


COUNT_SIGTERMS = """
import os, signal, subprocess, sys, time
log, role = sys.argv[1], sys.argv[2]
signal.signal(signal.SIGTERM, lambda signum, frame: open(log, "a").write(role + "\\n"))
if role == "leader":  # a worker in its group, and one that left it (its own session)
    workers = [subprocess.Popen([sys.executable, "-c", sys.argv[3], log, name], stdout=subprocess.PIPE, text=True,
                                start_new_session=name == "left-the-group") for name in ("worker", "left-the-group")]
    print(*[w.pid for w in workers if w.stdout.readline()], flush=True)
else:
    print("ready", flush=True)
while role not in open(log).read() if os.path.exists(log) else True:
    time.sleep(0.01)
time.sleep(0.5)  # a second signal, sent right after the first, would land in this while
"""


def test_a_stop_signals_each_of_the_servers_processes_once(tmp_path):
    from specmon.oncall.stopper import _send

    log = tmp_path / "sigterms"
    leader = subprocess.Popen([sys.executable, "-c", COUNT_SIGTERMS, str(log), "leader", COUNT_SIGTERMS],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    procs = [psutil.Process(leader.pid), *(psutil.Process(int(pid)) for pid in leader.stdout.readline().split())]
    try:
        assert len(procs) == 3
        _send(leader.pid, procs, signal.SIGTERM)
        assert wait_for(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in procs), 20)
        assert sorted(log.read_text().split()) == ["leader", "left-the-group", "worker"]
    finally:
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        leader.wait(timeout=10)
