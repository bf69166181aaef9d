"""GPU memory left over: orphaned SGLang workers (a real process), defunct, gone and not-visible pids are
flagged; only an orphaned worker of one's own is killed, by pid, after confirmation in the app."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

import psutil
import pytest

from specmon.gpu import describe
from specmon.gpu.model import GpuProcess, GpuReading, GpuSnapshot
from specmon.gpu.processes import ProcessInspector, kill_leftover, why_not_killable
from specmon.tui.app import AppConfig, SpecmonApp
from specmon.tui.screens.confirm import Confirm
from tests.support.app_harness import wait_for
from tests.support.oncall import gone


@pytest.fixture
def worker():
    """A process titled like an SGLang scheduler whose parent (pytest) is no SGLang server: orphaned."""
    proc = subprocess.Popen(["bash", "-c", 'exec -a "sglang::scheduler_TP0" sleep 120'], start_new_session=True)
    deadline = time.monotonic() + 10
    while not _titled_as_worker(proc.pid):  # bash's exec renames it; cmdline reads empty mid-exec
        assert time.monotonic() < deadline, "the worker never took its sglang:: title"
        time.sleep(0.02)
    yield proc
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _titled_as_worker(pid: int) -> bool:
    argv = psutil.Process(pid).cmdline()
    return bool(argv) and argv[0].startswith("sglang::")


def held(pid: int, name: str = "") -> GpuProcess:
    return GpuProcess(pid=pid, used_mib=2048.0, name=name, alive=True, gpu_index=0)


def inspected(*procs: GpuProcess) -> GpuReading:
    reading = GpuReading(index=0, processes=list(procs))
    ProcessInspector(container=lambda: False).describe([reading])
    return reading


def test_an_orphaned_sglang_worker_is_flagged_and_killable(worker) -> None:
    proc = inspected(held(worker.pid)).processes[0]
    assert proc.orphan and proc.leftover == "orphaned" and describe.process_state(proc) == "ORPHANED"
    assert why_not_killable(proc) is None
    assert kill_leftover(proc, timeout=5) == f"pid {worker.pid} ended (SIGTERM)"


def test_other_leftovers_are_flagged_but_not_killed(monkeypatch) -> None:
    me = inspected(held(os.getpid())).processes[0]
    assert me.leftover is None and "not a leftover" in why_not_killable(me)
    dead = GpuProcess(pid=1, used_mib=100.0, name="x", alive=False, state="gone")
    assert dead.leftover == "gone" and "kill it where it runs" in why_not_killable(dead)
    defunct = GpuProcess(pid=1, used_mib=100.0, name="x", alive=False, state="defunct")
    assert defunct.leftover == "defunct" and "only its parent can reap it" in why_not_killable(defunct)
    hidden = GpuProcess(pid=1, used_mib=100.0, name="x", alive=False, state="not visible")
    assert hidden.leftover == "not visible" and "kill it where it runs" in why_not_killable(hidden)
    monkeypatch.setattr(os, "getuid", lambda: psutil.Process(1).uids().real + 1)  # pid 1 is someone else's
    root = GpuProcess(pid=1, used_mib=100.0, name="sglang::scheduler", alive=True, orphan=True)
    assert root.leftover == "orphaned" and "another user" in why_not_killable(root)
    assert GpuProcess.from_json(root.to_json()).orphan


async def test_the_palette_offers_the_kill_and_asks_first(worker) -> None:
    app = SpecmonApp(AppConfig(url="http://127.0.0.1:9", poll=False))
    async with app.run_test(size=(80, 24)) as pilot:
        app.oncall.gpus = GpuSnapshot(available=True, gpus=[inspected(held(worker.pid))])
        commands = {c.title: c for c in app.get_system_commands(app.screen)}
        title = f"Kill leftover GPU process {worker.pid}"
        assert title in commands
        commands[title].callback()
        assert await wait_for(pilot, lambda: isinstance(app.screen, Confirm))
        await pilot.press("y")
        assert await wait_for(pilot, lambda: worker.poll() is not None or gone(worker.pid), 15)
