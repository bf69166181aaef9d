"""ServerSupervisor with real child processes, real signals, real ports and real files."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from specmon.launch.presets import Preset
from specmon.launch.supervisor import (
    PortInUseError,
    ServerSupervisor,
    SupervisorError,
    default_run_dir,
    group_members,
)
from specmon.ports import free_port, port_is_free


def unchecked_supervisor(*args, **kwargs) -> ServerSupervisor:
    """A supervisor without the preflight: these presets launch test scripts, not SGLang."""
    return ServerSupervisor(*args, preflight=None, **kwargs)

pytestmark = pytest.mark.timeout(60)

# A stand-in for SGLang: takes SGLang-style flags, logs lines, listens on --port, and can misbehave.
FAKE_SERVER = textwrap.dedent(
    """
    import argparse, os, signal, socket, subprocess, sys, time

    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int)
    p.add_argument("--host")
    p.add_argument("--model-path")
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--exit-code-on-term", type=int)
    p.add_argument("--grandchild", choices=["normal", "ignores-term", "new-session"])
    p.add_argument("--exit-after-start", type=int)
    args = p.parse_args()

    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.exit_code_on_term is not None:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(args.exit_code_on_term))
    grandchild = None
    if args.grandchild:
        code = "import os, signal, time\\n"
        if args.grandchild == "ignores-term":
            code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
        if args.grandchild == "new-session":
            code += "os.setsid()\\n"
        code += "print('grandchild up', flush=True)\\ntime.sleep(600)\\n"
        grandchild = subprocess.Popen([sys.executable, "-c", code])
    listener = None
    if args.port:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", args.port))
        listener.listen()
    print(f"model={args.model_path} value={os.environ.get('SPECMON_TEST_VALUE')} "
          f"unbuffered={os.environ.get('PYTHONUNBUFFERED')}")
    sys.stderr.write("a line on stderr\\n")
    print(f"ready pid={os.getpid()} pgid={os.getpgid(0)} grandchild={grandchild.pid if grandchild else 0}")
    if args.exit_after_start is not None:
        time.sleep(0.3)
        os._exit(args.exit_after_start)
    while True:
        time.sleep(0.1)
    """
)


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "fake_server.py"
    path.write_text(FAKE_SERVER)
    return path


@pytest.fixture
def run_dir(tmp_path) -> Path:
    return tmp_path / "state" / "runs"


def fake_preset(script: Path, name: str = "fake", **args) -> Preset:
    args.setdefault("port", free_port())  # never SGLang's default 30000: another server may hold it
    return Preset(
        name=name,
        launcher=("{python}", str(script)),
        args={"model-path": f"/models/{name}", "port": free_port(), **args},  # never SGLang's shared 30000
        env={"SPECMON_TEST_VALUE": name},
    )


def wait_for_line(path: Path, prefix: str, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in path.read_text().splitlines():
            if line.startswith(prefix):
                return line
        time.sleep(0.02)
    raise AssertionError(f"no line starting {prefix!r} in {path}:\n{path.read_text()}")


def ready_info(log: Path) -> dict[str, int]:
    line = wait_for_line(log, "ready ")
    return {k: int(v) for k, v in (part.split("=") for part in line.split()[1:])}


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def cleanup():
    """Kill anything a failed test left behind (only the pids the test registered)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_start_launches_in_own_group_with_private_log_and_env(script, run_dir, cleanup):
    port = free_port()
    sup = unchecked_supervisor(fake_preset(script, port=port), run_dir=run_dir)
    log = sup.start()
    cleanup.append(sup.pid)
    info = ready_info(log)
    assert info["pid"] == sup.pid == info["pgid"]
    assert os.getpgid(sup.pid) != os.getpgrp()
    assert sup.is_running and sup.returncode is None
    assert sup.log_path == log and log.parent == run_dir
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(run_dir.parent.stat().st_mode) == 0o700
    text = log.read_text()
    assert "model=/models/fake value=fake unbuffered=1" in text
    assert "a line on stderr" in text  # stderr merged into the same file
    assert sup.argv == [sys.executable, str(script), "--model-path", "/models/fake", "--port", str(port)]
    assert not port_is_free(port)
    report = sup.stop(timeout=5)
    assert report.signal == "SIGTERM" and report.was_running
    assert report.returncode == -signal.SIGTERM
    assert report.leftovers == ()
    assert not sup.is_running and sup.returncode == -signal.SIGTERM
    assert port_is_free(port)
    second = sup.stop()
    assert second.signal is None and not second.was_running


def test_default_run_dir_is_private_under_user_state_dir(script, tmp_path, monkeypatch, cleanup):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_run_dir() == tmp_path / "xdg" / "specmon" / "runs"
    sup = unchecked_supervisor(fake_preset(script, name="demo-x"))
    log = sup.start()
    cleanup.append(sup.pid)
    assert log.parent == default_run_dir()
    assert log.name.endswith("-demo-x.log")
    for directory in (log.parent, log.parent.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    sup.stop(timeout=5)


def test_exit_code_of_a_graceful_stop(script, run_dir, cleanup):
    sup = unchecked_supervisor(fake_preset(script, **{"exit-code-on-term": 3}), run_dir=run_dir)
    ready_info(sup.start())
    cleanup.append(sup.pid)
    report = sup.stop(timeout=5)
    assert (report.returncode, report.signal, report.leftovers) == (3, "SIGTERM", ())


def test_sigkill_when_sigterm_is_ignored(script, run_dir, cleanup):
    sup = unchecked_supervisor(fake_preset(script, **{"ignore-term": True, "grandchild": "ignores-term"}), run_dir=run_dir)
    info = ready_info(sup.start())
    cleanup.extend([sup.pid, info["grandchild"]])
    assert os.getpgid(info["grandchild"]) == sup.pid
    report = sup.stop(timeout=0.5)
    assert report.signal == "SIGKILL"
    assert report.returncode == -signal.SIGKILL
    assert report.elapsed_s >= 0.5
    assert report.leftovers == ()
    assert not alive(info["grandchild"])


def test_grandchild_that_ignores_sigterm_dies_with_the_group(script, run_dir, cleanup):
    """The server exits on SIGTERM but its worker does not: the group still gets SIGKILL."""
    sup = unchecked_supervisor(fake_preset(script, grandchild="ignores-term"), run_dir=run_dir)
    info = ready_info(sup.start())
    cleanup.append(info["grandchild"])
    wait_for_line(sup.log_path, "grandchild up")
    report = sup.stop(timeout=0.5)
    assert report.returncode == -signal.SIGTERM
    assert report.signal == "SIGKILL"
    assert report.leftovers == ()
    assert not alive(info["grandchild"])
    assert group_members(sup.pid) == []


def test_crashed_server_with_surviving_worker_is_cleaned_up(script, run_dir, cleanup):
    sup = unchecked_supervisor(fake_preset(script, grandchild="normal", **{"exit-after-start": 7}), run_dir=run_dir)
    info = ready_info(sup.start())
    cleanup.append(info["grandchild"])
    assert sup.wait(timeout=10) == 7
    assert not sup.is_running
    assert [m.pid for m in group_members(sup.pid)] == [info["grandchild"]]
    report = sup.stop(timeout=5)
    assert (report.returncode, report.signal, report.was_running) == (7, "SIGTERM", False)
    assert not alive(info["grandchild"])


def test_descendant_in_a_new_session_is_stopped_too(script, run_dir, cleanup):
    sup = unchecked_supervisor(fake_preset(script, grandchild="new-session"), run_dir=run_dir)
    info = ready_info(sup.start())
    cleanup.append(info["grandchild"])
    wait_for_line(sup.log_path, "grandchild up")
    assert os.getpgid(info["grandchild"]) != sup.pid
    report = sup.stop(timeout=5)
    assert report.leftovers == ()
    assert not alive(info["grandchild"])


def test_taken_port_is_refused_naming_the_holder(script, run_dir, cleanup):
    port = free_port()
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import socket,time; s=socket.socket(); s.bind(('127.0.0.1',{port})); "
         "s.listen(); print('up', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    cleanup.append(holder.pid)
    try:
        assert holder.stdout.readline().strip() == "up"
        sup = unchecked_supervisor(fake_preset(script, port=port), run_dir=run_dir)
        with pytest.raises(PortInUseError) as raised:
            sup.start()
        assert raised.value.port == port
        assert [h.pid for h in raised.value.holders] == [holder.pid]
        assert f"port {port} on 127.0.0.1 is already in use by pid {holder.pid} (" in str(raised.value)
        assert sup.pid is None and not sup.is_running
        assert not run_dir.exists()  # refused before any log file was made
    finally:
        holder.kill()
        holder.wait()


def test_port_override_beats_the_preset(script, run_dir, cleanup):
    preset_port, port = free_port(), free_port()
    sup = unchecked_supervisor(fake_preset(script, port=preset_port), run_dir=run_dir, port=port)
    ready_info(sup.start())
    cleanup.append(sup.pid)
    assert sup.port == port
    assert sup.argv.count("--port") == 1 and sup.argv[-1] == str(port)
    assert not port_is_free(port) and port_is_free(preset_port)
    sup.stop(timeout=5)


def test_restart_with_waits_for_the_old_server_and_starts_the_new_preset(script, run_dir, cleanup):
    port = free_port()
    old = fake_preset(script, name="old", port=port, grandchild="ignores-term")
    sup = unchecked_supervisor(old, run_dir=run_dir)
    old_info = ready_info(sup.start())
    cleanup.extend([old_info["pid"], old_info["grandchild"]])
    old_log = sup.log_path
    wait_for_line(old_log, "grandchild up")
    new_log = sup.restart_with(fake_preset(script, name="new", port=port), timeout=0.5)
    cleanup.append(sup.pid)
    assert new_log != old_log and new_log == sup.log_path
    assert sup.last_stop.signal == "SIGKILL" and sup.last_stop.leftovers == ()
    assert not alive(old_info["pid"]) and not alive(old_info["grandchild"])
    new_info = ready_info(new_log)
    assert new_info["pid"] == sup.pid != old_info["pid"]
    assert sup.preset.name == "new"
    assert "value=new" in new_log.read_text() and "value=old" in old_log.read_text()
    assert not port_is_free(port)
    assert sup.stop(timeout=5).leftovers == ()


def test_restart_refused_when_the_new_port_stays_taken(script, run_dir, cleanup):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        sup = unchecked_supervisor(fake_preset(script, name="a"), run_dir=run_dir)
        ready_info(sup.start())
        cleanup.append(sup.pid)
        with pytest.raises(PortInUseError) as raised:
            sup.restart_with(fake_preset(script, name="b", port=port), free_timeout=0.3)
        assert [h.pid for h in raised.value.holders] == [os.getpid()]
        assert not sup.is_running and sup.last_stop.leftovers == ()
    finally:
        taken.close()


def test_errors_for_double_start_and_missing_launcher(script, run_dir, cleanup):
    sup = unchecked_supervisor(fake_preset(script), run_dir=run_dir)
    ready_info(sup.start())
    cleanup.append(sup.pid)
    with pytest.raises(SupervisorError, match="already running"):
        sup.start()
    sup.stop(timeout=5)
    missing = Preset(name="missing", launcher=(str(run_dir / "no-such-launcher"),), args={"port": free_port()})
    with pytest.raises(SupervisorError, match="cannot launch .*no-such-launcher"):
        sup.start(missing)
    assert not sup.is_running


def test_given_log_path_is_used_then_restarts_get_new_files(script, tmp_path, cleanup):
    log = tmp_path / "logs" / "server.log"
    log.parent.mkdir()
    log.write_text("stale\n")
    log.chmod(0o644)
    sup = unchecked_supervisor(fake_preset(script), log)
    assert sup.start() == log
    cleanup.append(sup.pid)
    ready_info(log)
    assert "stale" not in log.read_text()
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    second = sup.restart_with(fake_preset(script, name="next"))
    cleanup.append(sup.pid)
    assert second.parent == log.parent and second != log
    sup.stop(timeout=5)


def test_log_path_through_a_symlink_is_refused(script, tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("")
    link = tmp_path / "server.log"
    link.symlink_to(target)
    sup = unchecked_supervisor(fake_preset(script), link)
    with pytest.raises(SupervisorError, match="symbolic link"):  # a message, not a raw OSError
        sup.start()
    assert sup.pid is None


def test_a_server_binding_a_non_loopback_host_is_warned_about_first_in_its_log(script, run_dir, cleanup):
    sup = unchecked_supervisor(
        fake_preset(script, host="0.0.0.0", port=free_port(), **{"exit-after-start": 0}), run_dir=run_dir
    )
    log = sup.start()
    cleanup.append(sup.pid)
    ready_info(log)
    first = log.read_text().splitlines()[0]
    assert first.startswith("specmon: warning: the server binds 0.0.0.0 (--host)")
    sup.stop(timeout=5)
    quiet = unchecked_supervisor(fake_preset(script, port=free_port(), **{"exit-after-start": 0}), run_dir=run_dir)
    log = quiet.start()
    cleanup.append(quiet.pid)
    ready_info(log)
    assert "specmon: warning" not in log.read_text()
    quiet.stop(timeout=5)
