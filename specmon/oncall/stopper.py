"""`specmon stop`'s core: SIGTERM to the server's group, SIGKILL after a timeout, then wait until its GPUs and
port are free, and name what is left (pid, command, memory). Only the user's own processes are signalled,
always by pid or by a process group specmon created."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from specmon.oncall import state
from specmon.oncall.discovery import FoundServer, descendants
from specmon.oncall.gpus import read_gpus, still_held
from specmon.ports import ProcessInfo, port_holders, port_is_free

POLL_S = 0.05


class StopRefused(RuntimeError):
    """specmon may not stop this server (another user's, not visible); the message says why."""


@dataclass
class Leftover:
    """A process still holding the server's GPU memory or port after the stop."""

    pid: int
    command: str
    used_mib: float | None
    user: str | None
    why: str
    killable: bool
    killed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "command": self.command,
            "used_mib": self.used_mib,
            "user": self.user,
            "why": self.why,
            "killable": self.killable,
            "killed": self.killed,
        }

    def __str__(self) -> str:
        memory = f", {self.used_mib:.0f} MiB" if self.used_mib else ""
        return f"pid {self.pid} ({self.command[:100] or '?'}{memory}): {self.why}"


@dataclass
class StopResult:
    """What the stop did, in `specmon stop --json`'s shape."""

    id: str
    stopped: bool
    signal: str | None
    took_s: float
    gpus_free_s: float | None
    port_free: bool
    port_free_s: float | None = None
    leftovers: list[Leftover] = field(default_factory=list)
    gpu_note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "stopped": self.stopped,
            "signal": self.signal,
            "took_s": round(self.took_s, 3),
            "gpus_free_s": None if self.gpus_free_s is None else round(self.gpus_free_s, 3),
            "port_free": self.port_free,
            "port_free_s": None if self.port_free_s is None else round(self.port_free_s, 3),
            "leftovers": [x.to_json() for x in self.leftovers],
            "gpu_note": self.gpu_note,
        }


def own_process(pid: int) -> bool:
    try:
        return psutil.Process(pid).uids().real == os.getuid()
    except psutil.Error:
        return False


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _group_members(pgid: int) -> list[int]:
    pids = []
    for proc in psutil.process_iter():
        with contextlib.suppress(OSError, psutil.Error):
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                pids.append(proc.pid)
    return pids


def _targets(server: FoundServer) -> tuple[int | None, list[int]]:
    """The process group to signal (only one specmon created, still led by the same server) and the pids."""
    pids = {server.pid, *descendants(server.pid)}
    pgid = None
    if server.launched_by_specmon and server.record is not None:
        with contextlib.suppress(OSError):
            if os.getpgid(server.pid) == server.record.pgid:
                pgid = server.record.pgid
                pids.update(_group_members(pgid))
    elif server.alive:
        with contextlib.suppress(OSError):
            if os.getpgid(server.pid) == server.pid:  # it leads its own group: its workers are in it
                pgid = server.pid
                pids.update(_group_members(pgid))
    return pgid, sorted(p for p in pids if own_process(p))


def _send(pgid: int | None, pids: list[int], sig: signal.Signals) -> None:
    if pgid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _wait(condition, timeout: float) -> float | None:
    """Seconds until `condition()` held, or None if it did not within `timeout`."""
    started = time.monotonic()
    while True:
        if condition():
            return time.monotonic() - started
        if time.monotonic() - started >= timeout:
            return None
        time.sleep(POLL_S)


def stop_server(
    server: FoundServer, timeout: float = 30.0, kill_timeout: float = 10.0, free_timeout: float = 60.0
) -> StopResult:
    """Stop `server` and wait for its GPUs and port. Raises `StopRefused` when it may not be signalled."""
    why = server.why_not_signalable()
    if why:
        raise StopRefused(why)
    started = time.monotonic()
    pgid, pids = _targets(server) if server.alive else (None, [])
    sent = None
    if pids:
        sent = "SIGTERM"
        _send(pgid, pids, signal.SIGTERM)
        if _wait(lambda: not any(_alive(p) for p in pids), timeout) is None:
            sent = "SIGKILL"
            _send(pgid, [p for p in pids if _alive(p)], signal.SIGKILL)
            _wait(lambda: not any(_alive(p) for p in pids), kill_timeout)
    gone_at = time.monotonic()
    stopped = not any(_alive(p) for p in pids)
    baseline = server.record.gpu_baseline_mib if server.record is not None else {}
    all_pids = pids or [server.pid]

    def gpus_free() -> bool:
        return not still_held(read_gpus(server.gpu_url), all_pids, baseline)

    gpu_wait = _wait(gpus_free, free_timeout)
    gpus_free_s = None if gpu_wait is None else time.monotonic() - started
    port_wait = _wait(lambda: port_is_free(server.port, server.host), free_timeout if stopped else 1.0)
    snapshot = read_gpus(server.gpu_url)
    if snapshot.available:
        gpu_note = None
    elif server.gpu_url:
        gpu_note = "the emulator's simulated GPUs went with it"
    else:
        gpu_note = f"no GPU readings ({snapshot.reason})"
    result = StopResult(
        id=server.id,
        stopped=stopped,
        signal=sent,
        took_s=gone_at - started,
        gpus_free_s=gpus_free_s,
        port_free=port_wait is not None,
        port_free_s=None if port_wait is None else time.monotonic() - started,
        gpu_note=gpu_note,
        leftovers=find_leftovers(server, all_pids, snapshot),
    )
    if server.record is not None and stopped:
        server.record.stopped_at = time.time()
        with contextlib.suppress(OSError):
            state.save(server.record)
    return result


def find_leftovers(server: FoundServer, pids: list[int], snapshot) -> list[Leftover]:
    """The server's processes still alive, the processes holding GPU memory that are dead, defunct or not
    visible from here, and the port's holders."""
    out: dict[int, Leftover] = {}
    for pid in pids:
        if _alive(pid):
            info = ProcessInfo.of(pid)
            out[pid] = Leftover(pid, info.cmdline or info.name, None, None, "still running", own_process(pid))
    if snapshot.available:
        for proc in snapshot.processes:
            if proc.pid in pids or proc.zombie or proc.state == "not visible":
                why = "holds GPU memory" + ("" if proc.alive else f" ({proc.state})")
                previous = out.get(proc.pid)
                used = (previous.used_mib or 0.0) + (proc.used_mib or 0.0) if previous else proc.used_mib
                out[proc.pid] = Leftover(
                    proc.pid, proc.name, used, proc.user, why, proc.alive and own_process(proc.pid)
                )
    if not port_is_free(server.port, server.host):
        for holder in port_holders(server.port):
            if holder.pid not in out:
                out[holder.pid] = Leftover(
                    holder.pid,
                    holder.cmdline or holder.name,
                    None,
                    None,
                    f"holds port {server.port}",
                    own_process(holder.pid),
                )
    return list(out.values())


def kill_leftovers(leftovers: list[Leftover], timeout: float = 10.0) -> None:
    """SIGKILL each killable leftover by pid (own user only) and wait for it to go."""
    for leftover in leftovers:
        if not leftover.killable or not own_process(leftover.pid):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(leftover.pid, signal.SIGKILL)
        leftover.killed = _wait(lambda p=leftover.pid: not _alive(p), timeout) is not None
