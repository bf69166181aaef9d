"""What the OS says about the processes NVML lists on each GPU: command line, user, and whether they live.

A pid NVML lists but the OS does not know is "gone", and one in zombie status is "defunct": the memory
they hold is what makes the next server launch run out of memory. Inside a container, NVML reports the
host's pids, which this PID namespace cannot see; so when none of NVML's pids is visible here and this
looks like a container, missing pids are "not visible" rather than gone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import psutil

from specmon.tui.gpu.model import GpuReading


class ProcessInspector:
    """Fills in `name`, `user`, `alive` and `state` of the GpuProcess entries of readings, in place.

    Command lines and users are cached per (pid, create time), so a poll costs one status read per pid.
    """

    def __init__(self, container: Callable[[], bool] | None = None) -> None:
        if container is None:
            from specmon.tui.gpu.nvml import in_container

            container = in_container
        self._container = container
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
            cmdline = " ".join(ps.cmdline()).strip()
        except psutil.Error:
            cmdline = ""
        if not cmdline:
            try:
                cmdline = ps.name()
            except psutil.Error:
                cmdline = f"pid {ps.pid}"
        try:
            user = ps.username()
        except (psutil.Error, KeyError):
            user = None
        return cmdline, user
