"""What a process carries of the specmon launch that started it: every launch's environment names its preset,
and a server `specmon start` launched also carries its id and its launch token. Read back from a port's holder,
it names the holder as specmon's own server (a refusal to launch says which, and what to do); the token finds
the process of a launch cut short before it was recorded (`specmon.oncall.state`).

A process's environment is outside input: a value that does not have the shape specmon writes is not used.
Nothing here decides what to signal: that stays pid, start time and command line against the state files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

from specmon.ports import ProcessInfo
from specmon.text import printable

PRESET_ENV = "SPECMON_PRESET"
SERVER_ID_ENV = "SPECMON_SERVER_ID"
LAUNCH_TOKEN_ENV = "SPECMON_LAUNCH_TOKEN"
LAUNCH_MARKS = (PRESET_ENV, SERVER_ID_ENV, LAUNCH_TOKEN_ENV)
"""Set by specmon alone: a launch never inherits them (from specmon's own environment or a preset's)."""
_SERVER_ID = re.compile(r"[0-9a-f]{6}")
_PRESET = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass(frozen=True)
class LaunchMark:
    """A process started by a specmon launch: its preset, and its server id when `specmon start` launched it."""

    pid: int
    preset: str
    server_id: str | None = None

    def __str__(self) -> str:
        if self.server_id:
            return f"specmon server {self.server_id} (preset {self.preset}, pid {self.pid})"
        return f"a server specmon launched (preset {self.preset}, pid {self.pid})"


def launch_mark(pid: int) -> LaunchMark | None:
    """The specmon launch `pid` came from, as its environment says; None for any other process (or another
    user's, whose environment cannot be read)."""
    try:
        proc = psutil.Process(pid)
        if proc.uids().real != os.getuid():
            return None
        env = proc.environ()
    except (psutil.Error, OSError):
        return None
    preset = env.get(PRESET_ENV, "")
    if not _PRESET.fullmatch(preset):
        return None
    server_id = env.get(SERVER_ID_ENV, "")
    return LaunchMark(pid, preset, server_id if _SERVER_ID.fullmatch(server_id) else None)


@dataclass(frozen=True)
class PortHolders:
    """Who holds a port, each named: specmon's own servers by id and preset, any other process by its command."""

    host: str
    port: int
    names: tuple[str, ...]
    servers: tuple[LaunchMark, ...]  # those of them `specmon start` launched

    @classmethod
    def of(cls, host: str, port: int, holders: Iterable[ProcessInfo]) -> PortHolders:
        names, servers = [], []
        for holder in holders:
            mark = launch_mark(holder.pid)
            names.append(printable(mark) if mark is not None else str(holder))
            if mark is not None and mark.server_id:
                servers.append(mark)
        return cls(host, port, tuple(names), tuple(servers))

    def who(self) -> str:
        return ", ".join(self.names) or "a process specmon cannot see (another user's?)"

    def switch_advice(self, preset: str | None) -> str | None:
        """`specmon switch PRESET --from ID` when one server `specmon start` launched holds the port."""
        if preset is None or len(self.servers) != 1:
            return None
        return f"use `specmon switch {printable(preset)} --from {self.servers[0].server_id}`"

    def refusal(self, preset: str | None) -> str:
        """The port is taken, in one line: by specmon's own server (and what to do), or by whom."""
        advice = self.switch_advice(preset)
        if advice:
            return f"port {self.port} on {self.host} is held by {self.who()}: {advice}"
        return f"port {self.port} on {self.host} is already in use by {self.who()}"
