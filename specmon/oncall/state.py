"""State files of the servers specmon launched: one private JSON file per server, checked against live pids.

`<state dir>/servers/ID.json` (0600 in 0700 directories, never through a symlink). The state directory is
`specmon.private_files.state_dir()`: `$SPECMON_STATE_DIR`, else platformdirs' user state directory for specmon. Every file is outside input: a
file that cannot be read or has the wrong shape becomes a `StateProblem`, never an exception.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import msgspec
import psutil
from msgspec import Meta

from specmon.inputs import InputError, kind_of, parse_json
from specmon.launch.marks import LAUNCH_TOKEN_ENV
from specmon.private_files import make_private_dir, open_private_file, state_dir
from specmon.typed import FLOAT_MAX, FieldError, Time, convert
from specmon.urls import base_url

MAX_STATE_BYTES = 256 * 1024
START_TIME_TOLERANCE_S = 0.5
PENDING_SUFFIX = ".launching"
PID_MAX_LIMIT = 4 * 1024 * 1024
"""Linux's highest pid_max (and above every other system's): a larger pid is no process."""
PENDING_GRACE_S = 30.0
"""A pending launch with no process after this long started nothing (its launch failed); its file goes."""


def servers_dir() -> Path:
    return state_dir() / "servers"


def runs_dir() -> Path:
    """Where detached servers' logs go."""
    return state_dir() / "runs"


def new_server_id() -> str:
    return secrets.token_hex(3)


def new_launch_token() -> str:
    return secrets.token_hex(16)


Pid = Annotated[int, Meta(ge=2, le=PID_MAX_LIMIT, description="a process id (2 to 4,194,304)")]
Port = Annotated[int, Meta(ge=1, le=65535, description="a port (1 to 65535)")]
GpuIndex = Annotated[str, Meta(pattern=r"^[0-9]{1,4}$", description="a GPU index")]
MiB = Annotated[float, Meta(ge=0, le=FLOAT_MAX, description="MiB (0 or more)")]
LaunchToken = Annotated[str, Meta(pattern=r"^(?:[0-9a-f]{32})?$", description="32 hex digits, or nothing")]


class ServerRecord(msgspec.Struct):
    """A server specmon launched: enough to find it again, check it is the same process, and stop it. The
    state file's declaration: a file is read back through it strictly (`from_json`); keys it does not know
    (a later specmon's) are left aside."""

    id: Annotated[str, Meta(min_length=1)]
    preset: str
    argv: Annotated[list[str], Meta(min_length=1, description="a non-empty array of strings")]
    pid: Pid
    pgid: Pid
    create_time: Time  # the process's start time (psutil), so a reused pid is never taken for the server
    url: str
    host: str
    port: Port
    log: str
    started_at: Time
    demo: bool = False
    gpu_url: str | None = None  # the emulator's simulated GPUs (demo presets)
    gpu_baseline_mib: dict[GpuIndex, MiB] = {}  # per GPU index, before launch
    stopped_at: Time | None = None  # when `specmon stop` began to stop it (written before its first signal)
    launch_token: LaunchToken = ""  # what the launched process has in $SPECMON_LAUNCH_TOKEN (a pending launch's key)

    def to_json(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)

    @classmethod
    def from_json(cls, data: Any) -> ServerRecord:
        """Raises ValueError with what is wrong."""
        try:
            record = convert(data, cls, table="an object")
        except FieldError as exc:
            raise ValueError(exc.message) from None
        for key in ("url", "gpu_url"):
            if (value := getattr(record, key)) is not None:
                base_url(value, what=f"'{key}'")  # UrlRefused (a ValueError): no user:password@, an http(s) URL
        return record

    def is_alive(self) -> bool:
        """The recorded process is running now: same pid, same start time, same command line, not a zombie."""
        return process_matches(self.pid, self.create_time, self.argv)


@dataclass(frozen=True)
class StateProblem:
    """A state file specmon could not use, and why."""

    path: Path
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def cmdline_matches(argv: list[str], cmdline: list[str]) -> bool:
    """Whether a process's command line is the one specmon launched: it ends with the launched argv (a script's
    interpreter may come first), or, for a launcher that execs into another program, with its arguments."""
    if not argv or not cmdline:
        return False
    if cmdline[-len(argv) :] == argv:
        return True
    args = argv[1:]
    return bool(args) and cmdline[-len(args) :] == args


def process_matches(pid: int, create_time: float, argv: list[str] | None = None) -> bool:
    """Whether ``pid`` is still the recorded process: the same start time (a reused pid has another), not a
    zombie, and, when ``argv`` is given, the command line specmon launched."""
    proc = verified_process(pid, create_time, argv)
    return proc is not None


def verified_process(pid: int, create_time: float, argv: list[str] | None = None) -> psutil.Process | None:
    """The recorded process as a psutil handle (signals sent through it reach that process or none), or None
    when ``pid`` is gone, a zombie, or provably another process."""
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) >= START_TIME_TOLERANCE_S:
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        if argv is not None and not cmdline_matches(argv, proc.cmdline()):
            return None
        return proc
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError, OverflowError):
        return None


def save(record: ServerRecord) -> Path:
    """Write the record atomically (a private temp file renamed over the old one); its pending file goes."""
    path = _write_atomically(servers_dir() / f"{record.id}.json", record.to_json())
    drop_pending(record.id)
    return path


def _write_atomically(path: Path, data: dict[str, Any]) -> Path:
    directory = make_private_dir(path.parent)
    tmp = directory / f".{path.name}.{os.getpid()}.tmp"
    fd = open_private_file(tmp, exclusive=True)
    try:
        os.write(fd, (json.dumps(data, indent=2) + "\n").encode())
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    os.close(fd)
    os.replace(tmp, path)
    return path


def save_pending(record: ServerRecord) -> Path:
    """Write what is about to be launched (no pid yet) as ``ID.launching``, before the launch: if specmon dies
    between the launch and ``save`` (any signal, SIGKILL too), the next look-up adopts the process it started.
    Raises OSError when the state directory cannot be written, so nothing is launched unrecorded."""
    data = {**record.to_json(), "pid": None, "pgid": None, "create_time": None}
    return _write_atomically(servers_dir() / f"{record.id}{PENDING_SUFFIX}", data)


def drop_pending(server_id: str) -> None:
    with contextlib.suppress(OSError):
        (servers_dir() / f"{server_id}{PENDING_SUFFIX}").unlink()


def _read_json(path: Path) -> Any:
    """A private state file's JSON; raises ValueError (with the reason) for anything unusable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)  # a FIFO: no wait
    except OSError as exc:
        raise ValueError(f"cannot open: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{kind_of(info.st_mode)}, not a state file")
        if info.st_uid != os.getuid():
            raise ValueError("owned by another user")
        if info.st_size > MAX_STATE_BYTES:
            raise ValueError("too large for a state file")
        raw = os.read(fd, MAX_STATE_BYTES + 1)
    finally:
        os.close(fd)
    try:
        return parse_json(raw, where="the state file", finite=True)
    except InputError as exc:
        raise ValueError(str(exc).removeprefix("the state file: ")) from None
    except ValueError as exc:  # UnicodeDecodeError and json.JSONDecodeError included
        raise ValueError(f"not valid JSON: {exc}") from None


def read(path: Path) -> ServerRecord:
    """One state file; raises ValueError (with the reason) for anything unusable."""
    record = ServerRecord.from_json(_read_json(path))
    if path.stem != record.id:
        raise ValueError(f"the file name does not match its id {record.id!r}")
    return record


def was_stopped(record: ServerRecord) -> bool:
    """Whether `specmon stop` began to stop the recorded server: its state file, read now, says so."""
    try:
        return read(servers_dir() / f"{record.id}.json").stopped_at is not None
    except ValueError:
        return False


def stdout_log(pid: int) -> str | None:
    """The file the process's stdout goes to, when it is a regular file."""
    try:
        target = os.readlink(f"/proc/{pid}/fd/1")
    except OSError:
        return None
    target = target.removesuffix(" (deleted)")
    if not target.startswith("/"):
        return None
    try:
        return target if Path(target).is_file() else None
    except OSError:
        return None


def _pending(path: Path) -> ServerRecord:
    """A pending launch's file as a record with pid 0 (not launched, or not recorded yet)."""
    data = _read_json(path)
    if not isinstance(data, dict) or any(data.get(key) is not None for key in ("pid", "pgid", "create_time")):
        raise ValueError("not a pending launch")
    record = ServerRecord.from_json({**data, "pid": 2, "pgid": 2, "create_time": 0.0})
    if path.name != f"{record.id}{PENDING_SUFFIX}":
        raise ValueError(f"the file name does not match its id {record.id!r}")
    record.pid = record.pgid = 0
    return record


def _launched_by(record: ServerRecord) -> psutil.Process | None:
    """The process a pending launch started, and no other: the one started with the launch's token in its
    environment (`LAUNCH_TOKEN_ENV`, random per launch) that leads its own session (the launch made it one; its
    workers inherit the token but not the lead), the user's, running the launched command line.

    No clock is compared: psutil's start times count from the boot second, up to a second before the wall
    clock's, so "started after the launch began" missed the launched process on some hosts; and a command
    line alone also matched a later launch of the same preset and port, which was then listed twice."""
    if not record.launch_token:
        return None
    for proc in psutil.process_iter(["cmdline", "uids", "status"]):
        info = proc.info
        uids = info.get("uids")
        if uids is None or uids.real != os.getuid() or info.get("status") == psutil.STATUS_ZOMBIE:
            continue
        if not cmdline_matches(record.argv, info.get("cmdline") or []):
            continue
        try:
            if os.getsid(proc.pid) == proc.pid and proc.environ().get(LAUNCH_TOKEN_ENV) == record.launch_token:
                return proc
        except (OSError, psutil.Error):
            continue
    return None


def _adopt_pending(directory: Path, problems: list[StateProblem]) -> None:
    """Turn each pending launch into a record of the process it started; drop those that started nothing."""
    import time

    for path in sorted(directory.glob(f"*{PENDING_SUFFIX}")):
        try:
            record = _pending(path)
        except ValueError as exc:
            problems.append(StateProblem(path, str(exc)))
            continue
        proc = _launched_by(record)
        if proc is None:
            if time.time() - record.started_at > PENDING_GRACE_S:
                drop_pending(record.id)  # the launch failed: nothing runs that it started
            continue
        try:
            record.pid, record.create_time = proc.pid, proc.create_time()
            record.pgid = os.getpgid(proc.pid)
        except (OSError, psutil.Error):
            continue
        if not record.log:
            record.log = stdout_log(proc.pid) or ""
        try:
            save(record)
        except OSError as exc:
            problems.append(StateProblem(path, f"a launch could not be recorded: {exc}"))


def load_all() -> tuple[list[ServerRecord], list[StateProblem]]:
    """Every record (oldest first) and the files that could not be used. A launch whose recording was cut
    short (specmon killed between launch and record) is adopted first."""
    directory = servers_dir()
    records: list[ServerRecord] = []
    problems: list[StateProblem] = []
    if not directory.is_dir():
        return records, problems
    _adopt_pending(directory, problems)
    for path in sorted(directory.glob("*.json")):
        try:
            records.append(read(path))
        except ValueError as exc:
            problems.append(StateProblem(path, str(exc)))
    records.sort(key=lambda r: r.started_at)
    return records, problems


def remove(record: ServerRecord) -> None:
    with contextlib.suppress(FileNotFoundError):
        (servers_dir() / f"{record.id}.json").unlink()
