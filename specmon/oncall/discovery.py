"""`specmon ps`'s core: the servers specmon launched (state files checked against live pids and start times)
and the other SGLang servers on this host, found in the process list.

A found process's command line is outside input: the port and host are read from it defensively, and a
value that does not parse leaves SGLang's default.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from specmon.oncall import state
from specmon.oncall.gpus import memory_of, read_gpus
from specmon.oncall.state import ServerRecord, StateProblem, stdout_log
from specmon.sglang.processes import is_emulator_cmdline, is_server_cmdline, is_sglang_child
from specmon.urls import UrlRefused, url_of

DEFAULT_PORT = 30000
DEFAULT_HOST = "127.0.0.1"


@dataclass
class FoundServer:
    """One server as `specmon ps` lists it: launched by specmon (`record`) or found in the process list."""

    id: str
    preset: str | None
    pid: int
    url: str
    host: str
    port: int
    log: str | None
    alive: bool
    launched_by_specmon: bool
    started_at: float | None
    create_time: float | None = None
    user: str | None = None
    own_user: bool = True
    emulator: bool = False
    orphan: bool = False  # an SGLang worker whose server is gone (a detached or nohup'd server is not one)
    pids: list[int] = field(default_factory=list)  # the server and its descendants
    gpu_memory_mib: float | None = None
    record: ServerRecord | None = None
    argv: list[str] = field(default_factory=list)

    @property
    def gpu_url(self) -> str | None:
        if self.record is not None and self.record.gpu_url:
            return self.record.gpu_url
        return url_of(self.host, self.port + 1) + "/_emulator/gpus" if self.emulator else None

    def why_not_signalable(self) -> str | None:
        """Why specmon may not signal this server (None: it may)."""
        if not self.alive:
            return None
        if not self.own_user:
            return (
                f"pid {self.pid} belongs to user {self.user or '?'}; specmon signals only your own processes"
            )
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "preset": self.preset,
            "pid": self.pid,
            "url": self.url,
            "log": self.log,
            "alive": self.alive,
            "launched_by_specmon": self.launched_by_specmon,
            "started_at": self.started_at,
            "gpu_memory_mib": self.gpu_memory_mib,
            "user": self.user,
            "emulator": self.emulator,
            "orphan": self.orphan,
        }


@dataclass
class Inventory:
    """Everything `specmon ps` found, and the state files it could not use."""

    servers: list[FoundServer]
    problems: list[StateProblem]

    def alive(self) -> list[FoundServer]:
        return [s for s in self.servers if s.alive]

    def find(self, key: str) -> FoundServer | None:
        """A server by id, unique id prefix or pid (alive ones first)."""
        ordered = sorted(self.servers, key=lambda s: not s.alive)
        if key.isdigit():
            for server in ordered:
                if server.pid == int(key) or server.id == key:
                    return server
        matches = [s for s in ordered if s.id == key] or [s for s in ordered if s.id.startswith(key)]
        return matches[0] if matches else None

    def to_json(self) -> dict[str, Any]:
        return {
            "servers": [s.to_json() for s in self.servers],
            "problems": [{"path": str(p.path), "message": p.message} for p in self.problems],
        }


class NotPicked(Exception):
    """No server may be acted on without more from the user; the message says what was found and how to name
    one, in one line."""


MAX_NAMED = 5
"""At most this many servers are named in one line, the newest first (then "and N more")."""


def _label(server: FoundServer) -> str:
    if server.launched_by_specmon:
        return f"{server.id} ({server.preset or '?'}, pid {server.pid}, {server.url})"
    return f"pid {server.pid} ({server.url})"


def _listed(servers: list[FoundServer]) -> str:
    names = ", ".join(_label(s) for s in servers[:MAX_NAMED])
    return names + (f" and {len(servers) - MAX_NAMED} more" if len(servers) > MAX_NAMED else "")


def not_launched_note(inventory: Inventory, how_to_name: str) -> str | None:
    """One line on the running servers specmon did not launch, left alone because nobody named them, and how to
    name one (``how_to_name`` with ``{pid}``); None when there are none."""
    others = sorted((s for s in inventory.alive() if not s.launched_by_specmon), key=lambda s: -(s.started_at or 0))
    if not others:
        return None
    return (f"{len(others)} running server(s) specmon did not launch, left alone: {_listed(others)}; specmon acts on "
            f"one only when you name it: {how_to_name.format(pid=others[0].pid)}")


def pick_server(
    inventory: Inventory,
    key: str | None,
    what: str,
    how_to_name: str,
    ask: Callable[[list[FoundServer]], FoundServer | None] | None = None,
) -> FoundServer | None:
    """The server to ``what`` (stop, switch, sweep, attach to): the one ``key`` names (id, id prefix or pid),
    launched by specmon or not; else the one running server specmon launched, or the one ``ask`` picks when
    several run. A server specmon did not launch is never picked unless named. None when no server specmon
    launched runs (`not_launched_note` says what else runs); NotPicked when ``key`` names none or several run
    and none is picked. ``how_to_name`` is the command that names one, with ``{pid}``."""
    if key:
        server = inventory.find(key)
        if server is None:
            raise NotPicked(f"no server {key!r} (see `specmon ps`)")
        return server
    launched = sorted((s for s in inventory.alive() if s.launched_by_specmon), key=lambda s: -(s.started_at or 0))
    if len(launched) <= 1:
        return launched[0] if launched else None
    picked = ask(launched) if ask is not None else None
    if picked is None:
        example = how_to_name.format(pid=launched[0].id)
        raise NotPicked(f"{len(launched)} servers specmon launched are running: {_listed(launched)}; say which "
                        f"to {what}: {example}")
    return picked


def flag_value(argv: list[str], flag: str) -> str | None:
    """The last value of `--flag V` or `--flag=V` in argv (argparse keeps the last one)."""
    value = None
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(flag + "="):
            value = arg[len(flag) + 1 :]
    return value


def address_of(argv: list[str]) -> tuple[str, int]:
    """Host and port from an SGLang command line (SGLang's defaults when absent or malformed)."""
    host = flag_value(argv, "--host") or DEFAULT_HOST
    try:
        port = int(flag_value(argv, "--port") or DEFAULT_PORT)
    except ValueError:
        port = DEFAULT_PORT
    if not 0 < port < 65535:
        port = DEFAULT_PORT
    if host in ("0.0.0.0", "::", ""):
        host = DEFAULT_HOST
    return host, port


def descendants(pid: int) -> list[int]:
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return []


def _scan() -> list[dict[str, Any]]:
    found = []
    for proc in psutil.process_iter(["pid", "ppid", "cmdline", "username", "uids", "create_time", "status"]):
        info = proc.info
        argv = info.get("cmdline") or []
        if not argv or info.get("status") == psutil.STATUS_ZOMBIE:
            continue
        if is_server_cmdline(argv) or is_sglang_child(argv):
            found.append(info)
    return found


def _launched(record: ServerRecord) -> FoundServer:
    """A server specmon launched, from its record: alive when its process is still the one recorded (pid, start
    time and command line), with its descendants' pids."""
    alive = record.is_alive()
    return FoundServer(
        id=record.id,
        preset=record.preset,
        pid=record.pid,
        url=record.url,
        host=record.host,
        port=record.port,
        log=record.log,
        alive=alive,
        launched_by_specmon=True,
        started_at=record.started_at,
        create_time=record.create_time,
        emulator=record.demo,
        pids=[record.pid, *descendants(record.pid)] if alive else [],
        record=record,
        argv=list(record.argv),
    )


def find_launched(server_id: str) -> FoundServer | None:
    """The server specmon launched with this id (alive or dead), as `find_servers` lists it, without scanning the
    process list for the servers it did not launch (a sweep's look at its own server); None without its record."""
    records, _ = state.load_all()
    return next((_launched(record) for record in records if record.id == server_id), None)


def find_servers(with_gpus: bool = True) -> Inventory:
    """Every server specmon launched (alive or dead) and every other SGLang server running on this host."""
    records, problems = state.load_all()
    processes = _scan()
    servers = [_launched(record) for record in records]
    claimed: set[int] = {pid for server in servers for pid in server.pids}
    by_pid = {info["pid"]: info for info in processes}
    my_uid = os.getuid()
    for info in processes:
        pid = info["pid"]
        if pid in claimed:
            continue
        argv = [a.strip() for a in info["cmdline"]]
        parent = by_pid.get(info.get("ppid"))
        if parent is not None and parent["pid"] not in claimed:
            continue  # a worker (or a wrapper's child) of a server listed on its own
        if parent is not None:
            continue  # a worker of a server specmon launched
        pids = [pid, *descendants(pid)]
        claimed.update(pids)
        host, port = address_of(argv)
        try:
            url = url_of(host, port)
        except UrlRefused:
            continue  # no host (a user:password@, a path): SGLang cannot listen there, so nothing serves on it
        uids = info.get("uids")
        servers.append(
            FoundServer(
                id=str(pid),
                preset=None,
                pid=pid,
                url=url,
                host=host,
                port=port,
                log=stdout_log(pid),
                alive=True,
                launched_by_specmon=False,
                started_at=info.get("create_time"),
                create_time=info.get("create_time"),
                user=info.get("username"),
                own_user=uids is not None and uids.real == my_uid,
                emulator=is_emulator_cmdline(argv),
                orphan=is_sglang_child(argv),
                pids=pids,
                argv=argv,
            )
        )
    if with_gpus:
        _add_gpu_memory(servers)
    return Inventory(servers, problems)


def _add_gpu_memory(servers: list[FoundServer]) -> None:
    nvml = None
    for server in servers:
        if not server.alive:
            continue
        if server.gpu_url:
            snapshot = read_gpus(server.gpu_url)
        else:
            nvml = nvml or read_gpus()
            snapshot = nvml
        server.gpu_memory_mib = memory_of(snapshot, server.pids)
