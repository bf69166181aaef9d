"""State files of the servers specmon launched: one private JSON file per server, checked against live pids.

`<state dir>/servers/ID.json` (0600 in 0700 directories, never through a symlink). The state directory is
`$SPECMON_STATE_DIR`, else platformdirs' user state directory for specmon. Every file is outside input: a
file that cannot be read or has the wrong shape becomes a `StateProblem`, never an exception.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from specmon.inputs import InputError, kind_of, parse_json
from specmon.private_files import make_private_dir, open_private_file

STATE_DIR_ENV = "SPECMON_STATE_DIR"
MAX_STATE_BYTES = 256 * 1024
START_TIME_TOLERANCE_S = 0.5


def state_dir() -> Path:
    """`$SPECMON_STATE_DIR`, else `<platformdirs user_state_dir>/specmon`."""
    override = os.environ.get(STATE_DIR_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_state_dir("specmon"))


def servers_dir() -> Path:
    return state_dir() / "servers"


def runs_dir() -> Path:
    """Where detached servers' logs go."""
    return state_dir() / "runs"


def new_server_id() -> str:
    return secrets.token_hex(3)


@dataclass
class ServerRecord:
    """A server specmon launched: enough to find it again, check it is the same process, and stop it."""

    id: str
    preset: str
    argv: list[str]
    pid: int
    pgid: int
    create_time: float  # the process's start time (psutil), so a reused pid is never taken for the server
    url: str
    host: str
    port: int
    log: str
    started_at: float
    demo: bool = False
    gpu_url: str | None = None  # the emulator's simulated GPUs (demo presets)
    gpu_baseline_mib: dict[str, float] = field(default_factory=dict)  # per GPU index, before launch
    stopped_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> ServerRecord:
        """Raises ValueError with what is wrong."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        checks: dict[str, tuple[type, ...]] = {
            "id": (str,),
            "preset": (str,),
            "argv": (list,),
            "pid": (int,),
            "pgid": (int,),
            "create_time": (int, float),
            "url": (str,),
            "host": (str,),
            "port": (int,),
            "log": (str,),
            "started_at": (int, float),
        }
        for key, types in checks.items():
            value = data.get(key)
            if isinstance(value, bool) or not isinstance(value, types):
                raise ValueError(f"'{key}' is missing or of the wrong type")
        if data["pid"] <= 1 or data["pgid"] <= 1 or not 0 < data["port"] < 65536:
            raise ValueError("pid, pgid or port out of range")
        if not all(isinstance(a, str) for a in data["argv"]):
            raise ValueError("'argv' must be a list of strings")
        baseline = data.get("gpu_baseline_mib") or {}
        if not isinstance(baseline, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in baseline.values()
        ):
            raise ValueError("'gpu_baseline_mib' must map GPU indexes to numbers")
        gpu_url = data.get("gpu_url")
        stopped_at = data.get("stopped_at")
        return cls(
            id=data["id"],
            preset=data["preset"],
            argv=list(data["argv"]),
            pid=data["pid"],
            pgid=data["pgid"],
            create_time=float(data["create_time"]),
            url=data["url"],
            host=data["host"],
            port=data["port"],
            log=data["log"],
            started_at=float(data["started_at"]),
            demo=bool(data.get("demo", False)),
            gpu_url=gpu_url if isinstance(gpu_url, str) else None,
            gpu_baseline_mib={str(k): float(v) for k, v in baseline.items()},
            stopped_at=float(stopped_at) if isinstance(stopped_at, int | float) else None,
        )

    def is_alive(self) -> bool:
        """The recorded process is running now: same pid, same start time, not a zombie."""
        return process_matches(self.pid, self.create_time)


@dataclass(frozen=True)
class StateProblem:
    """A state file specmon could not use, and why."""

    path: Path
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def process_matches(pid: int, create_time: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return (
            abs(proc.create_time() - create_time) < START_TIME_TOLERANCE_S
            and proc.status() != psutil.STATUS_ZOMBIE
        )
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError, OverflowError):
        return False


def save(record: ServerRecord) -> Path:
    """Write the record atomically (a private temp file renamed over the old one)."""
    directory = make_private_dir(servers_dir())
    path = directory / f"{record.id}.json"
    tmp = directory / f".{record.id}.{os.getpid()}.tmp"
    fd = open_private_file(tmp, exclusive=True)
    try:
        os.write(fd, (json.dumps(record.to_json(), indent=2) + "\n").encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def read(path: Path) -> ServerRecord:
    """One state file; raises ValueError (with the reason) for anything unusable."""
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
        data = parse_json(raw, where="the state file")
    except InputError as exc:
        raise ValueError(str(exc).removeprefix("the state file: ")) from None
    except ValueError as exc:  # UnicodeDecodeError and json.JSONDecodeError included
        raise ValueError(f"not valid JSON: {exc}") from None
    try:
        record = ServerRecord.from_json(data)
    except (TypeError, KeyError, AttributeError, OverflowError) as exc:
        raise ValueError(f"not a server record ({type(exc).__name__}: {exc})"[:200]) from None
    if path.stem != record.id:
        raise ValueError(f"the file name does not match its id {record.id!r}")
    return record


def load_all() -> tuple[list[ServerRecord], list[StateProblem]]:
    """Every record (oldest first) and the files that could not be used."""
    directory = servers_dir()
    records: list[ServerRecord] = []
    problems: list[StateProblem] = []
    if not directory.is_dir():
        return records, problems
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
