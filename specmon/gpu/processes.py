"""What the OS says about the processes NVML lists on each GPU: command line, user, and whether they live.

A pid NVML lists but the OS does not know is "gone", and one in zombie status is "defunct": the memory
they hold is what makes the next server launch run out of memory. Inside a container, NVML reports the
host's pids, which this PID namespace cannot see; so when none of NVML's pids is visible here and this
looks like a container, missing pids are "not visible" rather than gone.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

import psutil

from specmon.gpu.model import GpuProcess, GpuReading
from specmon.redact import redacted_command
from specmon.sglang.processes import is_server_cmdline, is_sglang_child


def orphaned(ps: psutil.Process, name: str) -> bool:
    """An SGLang worker (``sglang::…``) whose parent is no SGLang process: its server is gone (the parent is
    init or a subreaper), and it holds its GPU memory until killed."""
    if not name.startswith("sglang::"):
        return False
    try:
        parent = ps.parent()
        argv = parent.cmdline() if parent is not None else []
    except psutil.Error:
        return False
    return not (is_server_cmdline(argv) or is_sglang_child(argv))


def owner(ps: psutil.Process | int) -> str | None:
    """The user a visible process (a handle already taken, or a pid) runs as (None: gone, or not visible)."""
    try:
        return (psutil.Process(ps) if isinstance(ps, int) else ps).username()
    except (psutil.Error, KeyError, ValueError):  # KeyError: a uid with no name here
        return None


def fill_owners(readings: Iterable[GpuReading]) -> None:
    """The user of each listed process that does not say one, from the OS (its pids are this machine's)."""
    for proc in (p for reading in readings for p in reading.processes):
        if proc.user is None:
            proc.user = owner(proc.pid)


class ProcessInspector:
    """Fills in `name`, `user`, `alive` and `state` of the GpuProcess entries of readings, in place.

    Command lines and users are cached per (pid, create time), so a poll costs one status read per pid.
    """

    def __init__(self, container: Callable[[], bool] | None = None) -> None:
        self._container = container or in_container
        self._in_container: bool | None = None
        self._cache: dict[tuple[int, float], tuple[str, str | None]] = {}

    @property
    def in_container(self) -> bool:
        if self._in_container is None:
            self._in_container = bool(self._container())
        return self._in_container

    def describe(self, readings: Iterable[GpuReading]) -> None:
        processes = [p for reading in readings for p in reading.processes]
        missing = []
        seen_keys = set()
        for proc in processes:
            try:
                ps = psutil.Process(proc.pid)
                status = ps.status()
                key = (proc.pid, ps.create_time())
            except psutil.NoSuchProcess:
                missing.append(proc)
                continue
            except psutil.Error:
                proc.name = proc.name or f"pid {proc.pid}"
                proc.state, proc.alive = "unknown", True
                continue
            seen_keys.add(key)
            if key not in self._cache:
                self._cache[key] = self._command_and_user(ps)
            proc.name, proc.user = self._cache[key]
            if status == psutil.STATUS_ZOMBIE:
                proc.state, proc.alive = "defunct", False
            else:
                proc.state, proc.alive = str(status), True
                proc.orphan = orphaned(ps, proc.name)
        hidden = self.in_container and len(missing) == len(processes)
        for proc in missing:
            proc.alive = False
            proc.state = "not visible" if hidden else "gone"
            proc.name = proc.name or ("(host pid, not in this container)" if hidden else "(process gone)")
        for key in [k for k in self._cache if k not in seen_keys]:
            del self._cache[key]

    @staticmethod
    def _command_and_user(ps: psutil.Process) -> tuple[str, str | None]:
        try:
            # setproctitle (SGLang's `sglang::scheduler`) pads the title with spaces: strip them.
            cmdline = redacted_command(ps.cmdline()).strip()
        except psutil.Error:
            cmdline = ""
        if not cmdline:
            try:
                cmdline = ps.name()
            except psutil.Error:
                cmdline = f"pid {ps.pid}"
        return cmdline, owner(ps)


def why_not_killable(proc: GpuProcess) -> str | None:
    """Why specmon will not kill this leftover process (None: it may, after the user confirms).

    Only an orphaned SGLang worker of the user's own, still alive, is killed: a defunct one is reaped by its
    parent, a gone or not-visible pid cannot be signalled from here, and other users' processes are theirs.
    """
    import os

    reason = proc.leftover
    if reason is None:
        return f"pid {proc.pid} is not a leftover"
    if reason == "defunct":
        return f"pid {proc.pid} is defunct: only its parent can reap it (or ending the parent frees it)"
    if reason in ("gone", "not visible"):
        return f"pid {proc.pid} is {reason} here: kill it where it runs (the host, or its container)"
    try:
        if psutil.Process(proc.pid).uids().real != os.getuid():
            return f"pid {proc.pid} belongs to another user ({proc.user or '?'}); specmon kills only yours"
    except psutil.Error as exc:
        return f"pid {proc.pid}: {exc}"
    return None


def kill_leftover(proc: GpuProcess, timeout: float = 5.0) -> str:
    """SIGTERM the orphaned process, SIGKILL it after ``timeout``; what happened, in a sentence.

    Checked again just before the signal (its user, that it is still an orphaned ``sglang::`` worker), so a pid
    reused in the meantime is left alone.
    """
    refused = why_not_killable(proc)
    if refused is not None:
        return refused
    try:
        ps = psutil.Process(proc.pid)
        if not orphaned(ps, " ".join(ps.cmdline()).strip()):
            return f"pid {proc.pid} is no longer an orphaned SGLang worker: left alone"
        ps.terminate()
        try:
            ps.wait(timeout)
            return f"pid {proc.pid} ended (SIGTERM)"
        except psutil.TimeoutExpired:
            ps.kill()
            ps.wait(timeout)
            return f"pid {proc.pid} killed (SIGKILL after {timeout:.0f} s)"
    except psutil.NoSuchProcess:
        return f"pid {proc.pid} is gone"
    except psutil.Error as exc:
        return f"pid {proc.pid}: {exc}"


def in_container() -> bool:
    """A best guess at whether this process runs in a container (its own PID namespace)."""
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    if os.environ.get("KUBERNETES_SERVICE_HOST") or os.environ.get("container"):  # noqa: SIM112 - podman's name
        return True
    try:
        with open("/proc/1/cgroup", encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    except OSError:
        return False
    return any(word in text for word in ("docker", "kubepods", "containerd", "lxc", "libpod"))
