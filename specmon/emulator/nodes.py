"""A multi-node launch (`--nnodes N --node-rank K --dist-init-addr HOST:PORT`), as SGLang 0.5.16 runs one.

Node 0 serves SGLang's API. A node of rank >= 1 runs only schedulers: after its startup it serves SGLang's dummy
health server (srt/utils/common.py:3041): `/health`, `/health_generate` and `/ping` answer 200, and `/metrics`
(with `--enable-metrics`) holds that node's scheduler ranks only, no tokenizer or HTTP metrics.

The emulator's stand-in for torch's rendezvous: node 0 listens on `--dist-init-addr` (as torch's TCP store does)
and its startup waits there until every other node has joined; the other nodes' startups wait until node 0
answers. Node 0 answers with its DP groups' scheduler figures, which the other nodes then poll: a DP group's
ranks on node K report what that group does, as its schedulers would. A node that loses node 0 for
`LEADER_LOST_S` ends the way SGLang's does when its schedulers die.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from specmon.emulator.metrics import EmulatorMetrics
from specmon.http.blocking import BlockingFetcher
from specmon.http.errors import HttpError
from specmon.inputs import parse_json

RANKS_PATH = "/_emulator/ranks"
POLL_S = 0.5
LEADER_LOST_S = 5.0
MAX_ANSWER_BYTES = 4 * 1024 * 1024


class DistInitAddrError(ValueError):
    """`--dist-init-addr` is missing or is not HOST:PORT."""


def parse_dist_init_addr(text: str | None) -> tuple[str, int]:
    """`HOST:PORT` (or `[v6]:PORT`) as (host, port)."""
    if not text:
        raise DistInitAddrError("a multi-node launch needs --dist-init-addr HOST:PORT (node 0's address)")
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not sep or not host or not 0 < number < 65536:
        raise DistInitAddrError(f"--dist-init-addr {text!r} is not HOST:PORT")
    return host, number


class _RendezvousHandler(BaseHTTPRequestHandler):
    server: Rendezvous
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        url = urlsplit(self.path)
        if url.path != RANKS_PATH:
            self._answer(404, {"detail": "Not Found"})
            return
        node = (parse_qs(url.query).get("node") or [""])[0]
        if node.isdigit():
            self.server.joined(int(node))
        self._answer(200, self.server.answer())

    def _answer(self, status: int, obj: Any) -> None:
        body = json.dumps(obj, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - not part of SGLang's log
        return


class Rendezvous(ThreadingHTTPServer):
    """Node 0's side: who has joined, and the DP groups' scheduler figures for the other nodes."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], nnodes: int, metrics: EmulatorMetrics | None) -> None:
        self.nnodes = nnodes
        self.metrics = metrics
        self._joined: set[int] = set()
        self._all_joined = threading.Event()
        super().__init__(address, _RendezvousHandler)

    def start(self) -> None:
        threading.Thread(target=self.serve_forever, name="emulator-rendezvous", daemon=True).start()

    def joined(self, node: int) -> None:
        if 0 < node < self.nnodes:
            self._joined.add(node)
            if len(self._joined) == self.nnodes - 1:
                self._all_joined.set()

    def answer(self) -> dict[str, Any]:
        groups = self.metrics.scheduler.group_snapshot() if self.metrics is not None else {}
        return {"nnodes": self.nnodes, "groups": groups}

    def wait_for_nodes(self) -> None:
        """Block until every other node has joined (torch's init_process_group waits for the whole world)."""
        self._all_joined.wait()


class LeaderLink:
    """A node of rank >= 1's side: join node 0, then follow its DP groups' figures."""

    def __init__(self, host: str, port: int, node_rank: int, speed: float = 1.0) -> None:
        self.url = f"http://{'[' + host + ']' if ':' in host else host}:{port}{RANKS_PATH}?node={node_rank}"
        self.lost_after_s = max(1.0, LEADER_LOST_S / max(speed, 1e-6))
        self._client = BlockingFetcher(connect_timeout_s=2.0)

    def fetch(self) -> dict[str, Any] | None:
        """Node 0's answer, or None when it does not answer or answers something unreadable."""
        try:
            got = self._client.fetch("GET", self.url, limit=MAX_ANSWER_BYTES, deadline_s=2.0)
            # node 0 is specmon's own emulator: its figures may hold NaN (json.dumps' default), so not strict
            answer = parse_json(got.content, where="node 0's groups") if got.status_code == 200 else None
        except (HttpError, ValueError):
            return None
        return answer if isinstance(answer, dict) and isinstance(answer.get("groups"), dict) else None

    def wait_for_leader(self) -> dict[str, Any]:
        """Block until node 0 answers (a rank of torch's world waits at its rendezvous)."""
        while True:
            answer = self.fetch()
            if answer is not None:
                return answer
            time.sleep(POLL_S)

    def follow(self, metrics: EmulatorMetrics | None, on_lost: Callable[[], None]) -> None:
        """Poll node 0 on a thread: load its groups into `metrics`; `on_lost` once it stays silent too long."""

        def run() -> None:
            last_answer = time.monotonic()
            while True:
                answer = self.fetch()
                now = time.monotonic()
                if answer is not None:
                    last_answer = now
                    if metrics is not None:
                        metrics.scheduler.load_groups(answer["groups"])
                elif now - last_answer > self.lost_after_s:
                    on_lost()
                    return
                time.sleep(POLL_S)

        threading.Thread(target=run, name="emulator-leader-link", daemon=True).start()


class _WorkerHandler(BaseHTTPRequestHandler):
    server: WorkerHealthServer
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    def version_string(self) -> str:
        return "uvicorn"

    def _answer(self) -> None:
        path = urlsplit(self.path).path
        length = int(self.headers.get("content-length") or 0)
        if length > 0:
            self.rfile.read(length)
        if path in ("/health", "/health_generate", "/ping"):
            self._send(200, b"", "text/plain")
        elif path == "/metrics" and self.server.metrics is not None and self.command == "GET":
            self._send(200, self.server.metrics.render(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._send(404, b'{"detail":"Not Found"}', "application/json")

    do_GET = _answer  # noqa: N815 (http.server's naming)
    do_POST = _answer  # noqa: N815

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - uvicorn runs at log_level warning
        return


class WorkerHealthServer(ThreadingHTTPServer):
    """SGLang's dummy health check server of a node of rank >= 1 (its own /metrics when enabled)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], metrics: EmulatorMetrics | None) -> None:
        self.metrics = metrics
        super().__init__(address, _WorkerHandler)


def close_quietly(server: ThreadingHTTPServer | None) -> None:
    """Stop and close a server started on a thread, whatever state it is in."""
    if server is None:
        return
    with contextlib.suppress(OSError):
        server.shutdown()
        server.server_close()
