"""Ports and hosts: whether a port is free and which processes hold it, free loopback ports (the kernel picks them)
for the demo's emulator, the tests and the benchmarks, and whether a host is this machine's loopback."""

from __future__ import annotations

import errno
import ipaddress
import socket
from dataclasses import dataclass

import psutil

from specmon.redact import redacted_command


def is_loopback_host(host: str) -> bool:
    """Whether `host` is reachable only from this machine (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False  # a name or an interface address: reachable from elsewhere


@dataclass(frozen=True)
class ProcessInfo:
    """A process as seen by psutil: enough to tell the user who it is (its secrets hidden: `redact`)."""

    pid: int
    name: str
    cmdline: str
    status: str

    @classmethod
    def of(cls, pid: int) -> ProcessInfo:
        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                name = proc.name()
                status = proc.status()
                try:
                    cmdline = redacted_command(proc.cmdline())
                except (psutil.AccessDenied, psutil.ZombieProcess):
                    cmdline = ""
        except psutil.NoSuchProcess:
            return cls(pid, "", "", "gone")
        except psutil.AccessDenied:
            return cls(pid, "", "", "unknown")
        return cls(pid, name, cmdline, status)

    def __str__(self) -> str:
        what = self.cmdline or self.name or "?"
        if len(what) > 120:
            what = what[:117] + "..."
        return f"pid {self.pid} ({what})"


class PortCheckError(RuntimeError):
    """A port could not be checked (binding it failed for another reason than its being in use)."""


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when a server could listen on host:port now (checked by binding it, as uvicorn would)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise PortCheckError(f"cannot check port {port} on {host}: {exc.strerror}") from exc
    return True


def port_holders(port: int) -> list[ProcessInfo]:
    """The processes listening on TCP `port` (any address) that psutil can see."""
    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:
        return []
    pids = sorted(
        {
            c.pid
            for c in connections
            if c.pid and c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
        }
    )
    return [ProcessInfo.of(pid) for pid in pids]




def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def free_port_pair(host: str = "127.0.0.1") -> int:
    """A free port P whose successor is free too (the emulator serves its simulated GPUs on P + 1)."""
    for _ in range(200):
        port = free_port(host)
        if port < 65535 and port_is_free(port + 1, host):
            return port
    raise RuntimeError(f"no free port pair on {host}")
