"""A raw HTTP/1.1 server on 127.0.0.1 that writes exactly the bytes a test gives it, on kept-alive connections.

Where `hostile_http.HostileServer` closes every connection after its answer, this one keeps reading requests on
each connection until the script says otherwise, so the framing between answers can be wrong on purpose: bytes
after an answer, a 1xx before it, a close where a keep-alive was promised.

    async def script(request: RawRequest) -> Steps:
        return [b"HTTP/1.1 103 Early Hints\\r\\n\\r\\n", 0.05, final_answer, CLOSE]

A step is bytes (written and drained), a float (seconds slept) or CLOSE (the connection is closed, at once).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

CLOSE = object()
Step = bytes | float | object
Script = Callable[["RawRequest"], Awaitable[Sequence[Step]]]


@dataclass(frozen=True)
class RawRequest:
    """One request as read: its connection (counted from 1), its number over all connections (from 1)."""

    method: str
    path: str
    head: bytes
    body: bytes
    connection: int
    number: int


def answer(body: bytes, status: str = "200 OK", headers: Sequence[str] = (),
           content_type: str = "application/json") -> bytes:
    """A Content-Length answer with `headers` (lines without their CRLF) after the usual ones."""
    lines = [f"HTTP/1.1 {status}", f"Content-Type: {content_type}", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def chunked(events: Sequence[bytes], headers: Sequence[str] = ()) -> bytes:
    """A chunked text/event-stream answer, one chunk per event, ending with the last chunk."""
    lines = ["HTTP/1.1 200 OK", "Content-Type: text/event-stream", "Transfer-Encoding: chunked", *headers]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


@dataclass
class RawServer:
    """The server on a thread of its own; `requests` lists every request read, `connections` counts the
    connections accepted and `closed` those that ended (the client closed it, or the script did)."""

    script: Script
    requests: list[RawRequest] = field(default_factory=list)
    connections: int = 0
    closed: int = 0

    def __post_init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="raw-http", daemon=True)
        self._tasks: set[asyncio.Task] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> RawServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the raw server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._shutdown)
        self._thread.join(10)

    async def __aenter__(self) -> RawServer:
        return self.__enter__()

    async def __aexit__(self, *exc: object) -> None:
        self.__exit__()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    def _shutdown(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        self._loop.call_later(0.05, self._loop.stop)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        connection = self.connections
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                method, path = (head.split(b"\r\n", 1)[0].decode("latin-1").split(" ") + ["", ""])[:2]
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length) if length else b""
                request = RawRequest(method, path, head, body, connection, len(self.requests) + 1)
                self.requests.append(request)
                for step in await self.script(request):
                    if step is CLOSE:
                        return
                    if isinstance(step, float | int):
                        await asyncio.sleep(step)
                    else:
                        writer.write(step)  # type: ignore[arg-type]
                        await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
            self.closed += 1
