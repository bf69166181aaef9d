"""Free loopback ports: for the demo's emulator, the tests and the benchmarks (the kernel picks them)."""

from __future__ import annotations

import socket

from specmon.tui.launch.supervisor import port_is_free


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
