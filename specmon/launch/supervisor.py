"""Launch, stop and restart an SGLang server (or the emulator) from a preset, safely.

The server runs as a child in its own process group (its own session), so a stop reaches every process it
spawned: SIGTERM to the group, a bounded wait, then SIGKILL to the group. Leftover processes of the old
group (the ones that keep GPU memory and make the next launch run out of memory) are reported, and a
restart waits until they are gone and the port is free before it launches the next server.

The port is checked before launching: SGLang itself only finds a taken port after loading the whole model.
stdout and stderr go, merged, to a log file created 0600 in a private (0700) run directory.

UI-free: no Textual here. Methods block (up to their timeouts); call them from a worker thread in the app.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from specmon.launch.marks import LAUNCH_MARKS, PRESET_ENV, PortHolders
from specmon.launch.presets import Preset, host_warning
from specmon.ports import PortCheckError, ProcessInfo, port_holders, port_is_free
from specmon.private_files import make_private_dir, open_private_file, state_dir

_POLL_S = 0.05
LIFELINE_ENV = "SPECMON_LIFELINE_FD"


class SupervisorError(RuntimeError):
    """The server could not be started, stopped or restarted as asked."""


class PreflightFailed(SupervisorError):
    """The preflight found an error: the launch would fail. `report` is the PreflightReport."""

    def __init__(self, message: str, report: object):
        super().__init__(message)
        self.report = report


PreflightCheck = Callable[[Preset, int | None, frozenset[int]], object]
"""A check of a preset before its launch, given the port and the pids of the server it replaces (whose port and GPU
memory it will free): its report, or PreflightFailed (`specmon.preflight.launch_check`)."""


class PortInUseError(SupervisorError):
    """The server's port is taken; `holders` are the listening processes psutil could see. One held by a server
    `specmon start` launched is named as that server, with the switch to `preset` that replaces it."""

    def __init__(self, host: str, port: int, holders: Iterable[ProcessInfo], preset: str | None = None):
        self.host = host
        self.port = port
        self.holders = tuple(holders)
        super().__init__(PortHolders.of(host, port, self.holders).refusal(preset))


@dataclass(frozen=True)
class StopReport:
    """What `ServerSupervisor.stop()` did."""

    returncode: int | None  # negative: killed by that signal (subprocess convention)
    signal: str | None  # the last signal sent: "SIGTERM", "SIGKILL", or None (nothing was left to stop)
    leftovers: tuple[ProcessInfo, ...]  # processes of the old group still alive (not zombies) at the end
    elapsed_s: float
    was_running: bool  # the server process itself was running when stop() was called


def default_run_dir() -> Path:
    """`<state dir>/runs`: where server logs go unless told otherwise."""
    return state_dir() / "runs"


def _port_free(port: int, host: str) -> bool:
    try:
        return port_is_free(port, host)
    except PortCheckError as exc:
        raise SupervisorError(str(exc)) from exc


def check_port_free(port: int, host: str = "127.0.0.1", preset: str | None = None) -> None:
    """Raise `PortInUseError` (naming the holders) when host:port is taken; `preset` is the one to launch."""
    if not _port_free(port, host):
        raise PortInUseError(host, port, port_holders(port), preset)


def group_members(pgid: int) -> list[ProcessInfo]:
    """Live (non-zombie) processes whose process group is `pgid`."""
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) != pgid or proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except (ProcessLookupError, psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        members.append(ProcessInfo.of(proc.pid))
    return [m for m in members if m.status not in ("gone", psutil.STATUS_ZOMBIE)]


def log_stem(preset_name: str) -> str:
    """A launch's log name without its suffix, the same for every launch: ``20261203-154751-eagle3-10``."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{preset_name}"


class ServerSupervisor:
    """Runs one server at a time from a preset: `start()`, `stop()`, `restart_with(preset)`.

    `log_path` is used for the first start; later starts get a new file in the run directory (the
    log's directory, or `default_run_dir()`). `port` overrides the preset's `--port` for every start.
    `preflight` checks each preset before its launch (`specmon.preflight.launch_check`; None: no check, which a
    caller says on purpose): an error stops the start (`PreflightFailed`); `last_preflight` keeps the last report.

    With `lifeline`, the server gets the read end of a pipe whose write end only this process holds
    (`$SPECMON_LIFELINE_FD`): when specmon ends, by any signal, SIGKILL included, the server reads EOF and
    exits (the emulator does; `specmon demo` uses it so that a demo never leaves an orphan).

    `env` is added to every launch's environment, over the preset's (`specmon start`'s server id and launch
    token); every launch also carries its preset's name (`specmon.launch.marks`).
    """

    def __init__(
        self,
        preset: Preset,
        log_path: str | Path | None = None,
        port: int | None = None,
        *,
        run_dir: str | Path | None = None,
        preflight: PreflightCheck | None,
        lifeline: bool = False,
        env: dict[str, str] | None = None,
    ):
        self._preset = preset
        self._env = dict(env or {})
        self.preflight = preflight
        self.last_preflight: object = None
        self._port_override = port
        self._first_log = Path(log_path) if log_path is not None else None
        if run_dir is not None:
            self._run_dir = Path(run_dir)
        elif self._first_log is not None:
            self._run_dir = self._first_log.parent
        else:
            self._run_dir = default_run_dir()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        self._argv: list[str] = []
        self._started_at: float | None = None
        self._group_stopped = False
        self._lock = threading.RLock()
        self._lifeline = lifeline
        self._lifeline_fd: int | None = None
        self.last_stop: StopReport | None = None

    # ------------------------------------------------------------------------------------------ state

    @property
    def preset(self) -> Preset:
        return self._preset

    @property
    def port(self) -> int:
        """The port the server listens on: the override given, else the preset's."""
        return self._port_override if self._port_override is not None else self._preset.port

    @property
    def host(self) -> str:
        return self._preset.host

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    @property
    def argv(self) -> list[str]:
        """The command line of the last launch."""
        return list(self._argv)

    @property
    def started_at(self) -> float | None:
        """`time.time()` of the last launch."""
        return self._started_at

    @property
    def returncode(self) -> int | None:
        """The server's exit status once it has exited (negative: killed by that signal), else None."""
        return self._proc.poll() if self._proc else None

    @property
    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the server to exit; its exit status, or None if it is still running after `timeout`."""
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    # ------------------------------------------------------------------------------------ lifecycle

    def start(self, preset: Preset | None = None, port: int | None = None) -> Path:
        """Launch the server (optionally switching preset and port first); returns its log path.

        Raises `PortInUseError` when the port is taken, `SupervisorError` when a server is already running
        or the launcher cannot be executed.
        """
        return self._start(preset, port, preflight=self.preflight is not None)

    def _start(self, preset: Preset | None = None, port: int | None = None, *, preflight: bool) -> Path:
        with self._lock:
            if self.is_running:
                raise SupervisorError(f"a server is already running (pid {self.pid}); stop it first")
            if preset is not None:
                self._preset = preset
            if port is not None:
                self._port_override = port
            check_port_free(self.port, self.host, self._preset.name)
            if preflight:
                self._run_preflight()
            argv = self._preset.argv(self._port_override)
            inherited = {**os.environ, "PYTHONUNBUFFERED": "1", **self._preset.env}
            env = {**{k: v for k, v in inherited.items() if k not in LAUNCH_MARKS}, **self._env,
                   PRESET_ENV: self._preset.name}
            try:
                log_path, fd = self._create_log()
            except OSError as exc:
                raise SupervisorError(f"cannot create the server's log in {exc.filename or self._run_dir}: "
                                      f"{exc.strerror or exc}") from None
            keep: tuple[int, ...] = ()
            if self._lifeline:
                read_end, write_end = os.pipe()
                keep = (read_end,)
                env[LIFELINE_ENV] = str(read_end)
            if host_warning(self._preset):  # said first in the server's log, where the app shows it
                os.write(fd, f"specmon: warning: {host_warning(self._preset)}\n".encode())
            try:
                proc = subprocess.Popen(  # noqa: S603 - an argv list from the preset, never a shell
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=fd,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=keep,
                )
            except OSError as exc:
                if keep:
                    os.close(write_end)
                raise SupervisorError(f"cannot launch {argv[0]}: {exc.strerror or exc}") from exc
            finally:
                os.close(fd)
                for read_end in keep:
                    os.close(read_end)
            if keep:
                self._close_lifeline()
                self._lifeline_fd = write_end
            self._proc = proc
            self._group_stopped = False
            self._log_path = log_path
            self._argv = argv
            self._started_at = time.time()
            return log_path

    def stop(self, timeout: float = 10.0, kill_timeout: float = 5.0) -> StopReport:
        """SIGTERM the server's process group, wait up to `timeout`, then SIGKILL it; reap and report.

        Descendants that left the group (a new session) are signalled too. Also cleans up a group whose
        leader already exited (a crashed server whose workers live on).
        """
        with self._lock:
            report = self._stop(timeout, kill_timeout)
            self.last_stop = report
            if not report.leftovers:
                self._close_lifeline()
            return report

    def _close_lifeline(self) -> None:
        if self._lifeline_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._lifeline_fd)
            self._lifeline_fd = None

    def restart_with(
        self, preset: Preset, port: int | None = None, timeout: float = 10.0, free_timeout: float = 30.0
    ) -> Path:
        """Check `preset` first (the preflight, with the port and GPU memory the running server will free, and
        its launcher), then stop the server, wait (up to `free_timeout`) until its processes are gone and the
        port is free, then start `preset`; returns the new log path. A check that fails raises before
        anything is stopped: the running server keeps serving."""
        with self._lock:
            old_pgid = self._proc.pid if self._proc else None
            new_port = port if port is not None else self._port_override
            running = [m.pid for m in group_members(old_pgid)] if old_pgid and self.is_running else []
            if (problem := launcher_problem(preset)) is not None:
                raise SupervisorError(problem)
            if self.preflight is not None:
                self._run_preflight(preset, new_port if new_port is not None else preset.port, running)
            self.stop(timeout)
            if port is not None:
                self._port_override = port
            self._preset = preset
            deadline = time.monotonic() + free_timeout
            while True:
                leftovers = group_members(old_pgid) if old_pgid else []
                free = _port_free(self.port, self.host)
                if not leftovers and free:
                    break
                if time.monotonic() >= deadline:
                    if leftovers:
                        raise SupervisorError(
                            "the old server's processes are still alive: " + ", ".join(map(str, leftovers))
                        )
                    raise PortInUseError(self.host, self.port, port_holders(self.port), preset.name)
                time.sleep(_POLL_S)
            return self._start(preflight=False)  # checked above, before the stop

    def __enter__(self) -> ServerSupervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------- internals

    def _run_preflight(self, preset: Preset | None = None, port: int | None = None,
                       replacing: Iterable[int] = ()) -> None:
        if self.preflight is None:
            return
        try:
            self.last_preflight = self.preflight(preset or self._preset, port or self.port, frozenset(replacing))
        except PreflightFailed as error:
            self.last_preflight = error.report
            raise

    def _create_log(self) -> tuple[Path, int]:
        if self._first_log is not None:
            path, self._first_log = self._first_log, None
            make_private_dir(path.parent)
            return path, open_private_file(path)
        make_private_dir(self._run_dir)
        stem = log_stem(self._preset.name)
        for n in range(1, 1000):
            path = self._run_dir / (f"{stem}.log" if n == 1 else f"{stem}-{n}.log")
            try:
                return path, open_private_file(path, exclusive=True)
            except FileExistsError:
                continue
        raise SupervisorError(f"cannot create a log file in {self._run_dir}")

    def _stop(self, timeout: float, kill_timeout: float) -> StopReport:
        proc = self._proc
        started = time.monotonic()
        if proc is None:
            return StopReport(None, None, (), 0.0, False)
        if self._group_stopped and proc.poll() is not None:
            # Stopped cleanly before: the group is gone and its id may belong to someone else by now.
            return StopReport(proc.returncode, None, (), 0.0, False)
        pgid = proc.pid  # start_new_session: the server leads its own process group
        was_running = proc.poll() is None
        targets = _watch_list(pgid, proc.pid)
        sent = None
        if targets:
            sent = "SIGTERM"
            _signal_all(pgid, targets, signal.SIGTERM)
            if not _wait_gone(proc, targets, timeout):
                sent = "SIGKILL"
                _signal_all(pgid, targets, signal.SIGKILL)
                _wait_gone(proc, targets, kill_timeout)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=kill_timeout if proc.poll() is None else None)
        leftovers = {p.pid: p for p in group_members(pgid)}
        for watched in targets:
            if watched.pid not in leftovers and _alive(watched):
                leftovers[watched.pid] = ProcessInfo.of(watched.pid)
        self._group_stopped = not leftovers and proc.poll() is not None
        return StopReport(
            returncode=proc.poll(),
            signal=sent,
            leftovers=tuple(leftovers.values()),
            elapsed_s=time.monotonic() - started,
            was_running=was_running,
        )


def launcher_problem(preset: Preset) -> str | None:
    """Why the preset's launcher cannot be executed (not found, not executable), or None: checked before a
    switch or restart stops the running server."""
    program = preset.argv()[0]
    search = preset.env.get("PATH", os.environ.get("PATH"))
    path = program if os.sep in program else shutil.which(program, path=search)
    if path is None or not os.path.isfile(path) or not os.access(path, os.X_OK):
        return f"cannot launch {program}: not found, or not executable"
    return None


def _watch_list(pgid: int, leader: int) -> list[psutil.Process]:
    """The live processes to stop: the group's members plus the leader's descendants in other groups."""
    pids = {m.pid for m in group_members(pgid)}
    with contextlib.suppress(psutil.NoSuchProcess):
        pids.update(child.pid for child in psutil.Process(leader).children(recursive=True))
    procs = []
    for pid in sorted(pids):
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    return [p for p in procs if _alive(p)]


def _alive(proc: psutil.Process | ProcessInfo) -> bool:
    try:
        if isinstance(proc, ProcessInfo):
            proc = psutil.Process(proc.pid)
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _signal_all(pgid: int, procs: list[psutil.Process], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)
    for proc in procs:
        try:
            if proc.is_running() and os.getpgid(proc.pid) != pgid:
                proc.send_signal(sig)
        except (psutil.NoSuchProcess, ProcessLookupError):
            continue


def _wait_gone(leader: subprocess.Popen[bytes], procs: list[psutil.Process], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    pause = 0.002
    while True:
        leader.poll()  # reaps the server as soon as it exits, so it does not linger as a zombie
        if not any(_alive(p) for p in procs):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, _POLL_S)
