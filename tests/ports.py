"""Free loopback ports for tests that start real servers (the kernel picks; nothing listens after)."""

from __future__ import annotations

import socket

from specmon.tui.supervisor import port_is_free


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_port_pair() -> int:
    """A free port whose successor is free too (the emulator serves its GPU JSON on port + 1)."""
    for _ in range(200):
        port = free_port()
        if port < 65535 and port_is_free(port + 1):
            return port
    raise RuntimeError("no free port pair")
