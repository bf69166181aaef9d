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
from specmon.oncall.discovery import FoundServer
from specmon.oncall.gpus import read_gpus, still_held
from specmon.ports import ProcessInfo, port_holders, port_is_free
from specmon.units import format_seconds

POLL_S = 0.05


class StopRefused(RuntimeError):
    """specmon may not stop this server (another user's, not visible); the message says why."""


@dataclass
class Leftover:
    """A process still holding the server's GPU memory or port after the stop. ``ours``: one of the server's own
    processes (proven by pid and start time when the stop began); only those are ever killed."""

    pid: int
    command: str
    used_mib: float | None
    user: str | None
    why: str
    killable: bool
    killed: bool = False
    ours: bool = False
    proc: psutil.Process | None = field(default=None, repr=False, compare=False)

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

    @property
    def ok(self) -> bool:
        """Stopped, its port free and no leftover of it alive; when it was gone already, what holds its port or
        pid now is not its business."""
        if self.signal is None:
            return self.stopped and not any(x.ours and not x.killed for x in self.leftovers)
        return self.stopped and self.port_free and not any(not x.killed for x in self.leftovers)

    def text(self, server: FoundServer) -> str:
        """What the stop did, a line and its details (`specmon stop`, and the app's quit with "Stop it")."""
        if self.signal is None:
            head = f"{describe(server)} was not running"
        else:
            head = f"stopped {describe(server)} with {self.signal} in {format_seconds(self.took_s)}"
        lines = [head]
        if self.gpus_free_s is not None:
            lines.append(f"  GPUs free after {format_seconds(self.gpus_free_s)}" + (f" ({self.gpu_note})" if self.gpu_note else ""))
        else:
            lines.append("  GPUs NOT free")
        if self.port_free:
            lines.append(f"  port {server.port} free")
        elif self.signal is None:
            lines.append(f"  port {server.port} is taken by another process")
        else:
            lines.append(f"  port {server.port} STILL TAKEN")
        lines.extend(f"  leftover: {x}" for x in self.leftovers)
        return "\n".join(lines)

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


def describe(server: FoundServer) -> str:
    """``server 4f2a1c (eagle3-10, pid 1234, http://127.0.0.1:30000)``."""
    who = server.preset or " ".join(server.argv[:3])
    return f"server {server.id} ({who}, pid {server.pid}, {server.url})"


def own_process(pid: int) -> bool:
    try:
        return psutil.Process(pid).uids().real == os.getuid()
    except psutil.Error:
        return False


def _alive(proc: psutil.Process) -> bool:
    """Still that process (a reused pid is another one) and not a zombie."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _pgid(proc: psutil.Process) -> int | None:
    try:
        return os.getpgid(proc.pid) if proc.is_running() else None
    except (OSError, psutil.Error):
        return None


def _group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for proc in psutil.process_iter():
        with contextlib.suppress(OSError, psutil.Error):
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
    return members


def server_process(server: FoundServer) -> psutil.Process | None:
    """The server's main process, proven to be the one recorded or found: the same pid and start time (and, for
    a server specmon launched, the same command line). None when it is gone or provably another process."""
    if server.record is not None:
        record = server.record
        return state.verified_process(record.pid, record.create_time, record.argv)
    if server.create_time is None:
        return None
    return state.verified_process(server.pid, server.create_time)


def _targets(server: FoundServer) -> tuple[int | None, list[psutil.Process]]:
    """The process group to signal (only one specmon created, or the server leads) and the server's processes,
    each a psutil handle taken while the server is proven to be itself (so a later signal never reaches a
    process that reused one of their pids). Nothing when the server is gone."""
    leader = server_process(server)
    if leader is None:
        return None, []
    procs = {leader.pid: leader}
    with contextlib.suppress(psutil.Error):
        procs.update((child.pid, child) for child in leader.children(recursive=True))
    pgid = None
    group = server.record.pgid if server.launched_by_specmon and server.record is not None else leader.pid
    if _pgid(leader) == group:  # the group specmon created, or the server leads its own: its workers are in it
        pgid = group
        for member in _group_members(pgid):
            procs.setdefault(member.pid, member)
    return pgid, [p for pid, p in sorted(procs.items()) if own_process(pid)]


def _send(pgid: int | None, procs: list[psutil.Process], sig: signal.Signals) -> None:
    """``sig`` to the group while one of its known members lives (a group id is not reused while the group has a
    member), and to each process that is still itself and was not reached through the group: each gets it once
    (a second SIGTERM lands inside the server's handler for the first)."""
    in_group = {p.pid for p in procs if _alive(p) and _pgid(p) == pgid} if pgid is not None else set()
    if pgid is not None and in_group:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            in_group = set()
    for proc in procs:
        if proc.pid not in in_group:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)


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
    """Stop `server` and wait for its GPUs and port. Raises `StopRefused` when it may not be signalled.

    Only the server's own processes are signalled (see ``_targets``); when it is already gone, nothing is, and
    whatever now holds its port or pid is named, never killed."""
    why = server.why_not_signalable()
    if why:
        raise StopRefused(why)
    started = time.monotonic()
    pgid, procs = _targets(server)
    sent = None
    if procs:
        _record_the_stop(server)
        sent = "SIGTERM"
        _send(pgid, procs, signal.SIGTERM)
        if _wait(lambda: not any(_alive(p) for p in procs), timeout) is None:
            sent = "SIGKILL"
            _send(pgid, [p for p in procs if _alive(p)], signal.SIGKILL)
            _wait(lambda: not any(_alive(p) for p in procs), kill_timeout)
    gone_at = time.monotonic()
    stopped = not any(_alive(p) for p in procs)
    baseline = server.record.gpu_baseline_mib if server.record is not None else {}
    pids = [p.pid for p in procs]

    def gpus_free() -> bool:
        return not still_held(read_gpus(server.gpu_url), pids, baseline)

    gpu_wait = _wait(gpus_free, free_timeout if procs else 0.0)
    gpus_free_s = None if gpu_wait is None else time.monotonic() - started
    port_wait = _wait(lambda: port_is_free(server.port, server.host), free_timeout if procs and stopped else 0.0)
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
        leftovers=find_leftovers(server, procs, snapshot),
    )
    return result


def _record_the_stop(server: FoundServer) -> None:
    """The server's state file says it is being stopped, before any signal: whoever sees it gone (a switch
    waiting on it) knows it was stopped, not that it died."""
    if server.record is not None:
        server.record.stopped_at = time.time()
        with contextlib.suppress(OSError):
            state.save(server.record)


def find_leftovers(server: FoundServer, procs: list[psutil.Process], snapshot) -> list[Leftover]:
    """The server's processes still alive, the processes holding GPU memory that are the server's, dead,
    defunct or not visible from here, and the port's holders. Only the server's own are killable."""
    ours = {p.pid: p for p in procs}
    out: dict[int, Leftover] = {}
    for proc in procs:
        if _alive(proc):
            info = ProcessInfo.of(proc.pid)
            out[proc.pid] = Leftover(proc.pid, info.cmdline or info.name, None, None, "still running",
                                     own_process(proc.pid), ours=True, proc=proc)  # fmt: skip
    if snapshot.available:
        for held in snapshot.processes:
            if held.pid in ours or held.zombie or held.state == "not visible":
                why = "holds GPU memory" + ("" if held.alive else f" ({held.state})")
                previous = out.get(held.pid)
                used = (previous.used_mib or 0.0) + (held.used_mib or 0.0) if previous else held.used_mib
                mine = ours.get(held.pid)
                killable = mine is not None and held.alive and _alive(mine) and own_process(held.pid)
                out[held.pid] = Leftover(held.pid, held.name, used, held.user, why, killable,
                                         ours=mine is not None, proc=mine)  # fmt: skip
    if not port_is_free(server.port, server.host):
        for holder in port_holders(server.port):
            if holder.pid in out:
                continue
            mine = ours.get(holder.pid)
            if mine is not None and _alive(mine):
                out[holder.pid] = Leftover(holder.pid, holder.cmdline or holder.name, None, None,
                                           f"holds port {server.port}", own_process(holder.pid), ours=True,
                                           proc=mine)  # fmt: skip
            else:
                out[holder.pid] = Leftover(holder.pid, holder.cmdline or holder.name, None, None,
                                           f"holds port {server.port}; not the recorded server (not signalled)",
                                           False)  # fmt: skip
    return list(out.values())


def kill_leftovers(leftovers: list[Leftover], timeout: float = 10.0) -> None:
    """SIGKILL each killable leftover, through the handle taken when it was proven to be the server's (a pid
    reused since is never signalled), and wait for it to go."""
    for leftover in leftovers:
        proc = leftover.proc
        if not leftover.killable or proc is None or not own_process(leftover.pid):
            continue
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)
        leftover.killed = _wait(lambda p=proc: not _alive(p), timeout) is not None
