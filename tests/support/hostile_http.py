"""A hostile HTTP server on 127.0.0.1 for tests: each path answers what the test scripts, as badly as it likes.

`HostileServer` runs its own asyncio loop on a thread, so the code under test may be async or not, in this
process or in a child (`specmon monitor --once --url server.url`). Each route is an `Answer` (a status, a body,
its encodings, its framing, and how slowly it comes: dripped, held, endless, lying about its length) or a raw
script `async def script(writer)` that writes whatever bytes it wants. Every request is recorded.

    with HostileServer({"/metrics": Answer(bomb(512 << 20, "gzip", "gzip"), encodings=("gzip", "gzip"),
                                           encoded=True)}) as server:
        ... server.url ...

`bomb(size, *layers)` is `size` zero bytes compressed once per layer (1 GiB is 1 MB gzipped, 1.8 KB twice);
`deep_json(depth)` and `SGLANG_INFO` / `SGLANG_METRICS` (real 0.5.16 answers) build the usual bodies.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import json
import math
import struct
import threading
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

API_FIXTURES = Path(__file__).parents[1] / "fixtures" / "api"
SGLANG_INFO = (API_FIXTURES / "h200-0.5.16-server-info-eagle3.json").read_bytes()
SGLANG_METRICS = (API_FIXTURES / "h200-0.5.16-metrics-eagle3.txt").read_bytes()

Script = Callable[[asyncio.StreamWriter], Awaitable[None]]


@dataclass(frozen=True)
class Answer:
    """One scripted HTTP answer.

    `encodings` are named in Content-Encoding in the order applied ("gzip, gzip": gzipped twice); the body is
    encoded here unless `encoded` says it already is (a `bomb`). `framing`: "length" (Content-Length, or
    `length` when it should lie), "chunked", or "close" (no length: the body ends with the connection).
    `drip_s` pauses between bytes of the body (of the head too with `drip_head`); `hold_s` pauses after the
    head (math.inf: forever); `endless` is repeated after the body until the client goes away.
    """

    body: bytes = b""
    status: int = 200
    content_type: str = "application/json"
    encodings: tuple[str, ...] = ()
    encoded: bool = False
    headers: tuple[tuple[str, str], ...] = ()
    framing: str = "length"
    length: int | None = None
    drip_s: float = 0.0
    drip_head: bool = False
    hold_s: float = 0.0
    endless: bytes | None = None

    @classmethod
    def json(cls, value: Any, **options: Any) -> Answer:
        """`value` as JSON (NaN and Infinity written as Python writes them)."""
        return cls(json.dumps(value).encode(), **options)

    @classmethod
    def text(cls, text: str | bytes, **options: Any) -> Answer:
        data = text.encode() if isinstance(text, str) else text
        return cls(data, content_type="text/plain; version=0.0.4", **options)

    def encoded_body(self) -> bytes:
        data = self.body
        if self.encoded:
            return data
        for encoding in self.encodings:
            if encoding in ("gzip", "x-gzip"):
                data = gzip.compress(data, 1)
            elif encoding == "deflate":
                data = zlib.compress(data, 1)
        return data

    def head(self, body: bytes) -> bytes:
        reason = {200: "OK", 404: "Not Found", 500: "Internal Server Error", 503: "Service Unavailable"}
        lines = [f"HTTP/1.1 {self.status} {reason.get(self.status, 'Whatever')}", f"Content-Type: {self.content_type}"]
        if self.encodings:
            lines.append("Content-Encoding: " + ", ".join(self.encodings))
        if self.framing == "length":
            lines.append(f"Content-Length: {len(body) if self.length is None else self.length}")
        elif self.framing == "chunked":
            lines.append("Transfer-Encoding: chunked")
        lines += [f"{name}: {value}" for name, value in self.headers]
        lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def write(self, writer: asyncio.StreamWriter) -> None:
        body = self.encoded_body()
        head = self.head(body)
        await _send(writer, head, self.drip_s if self.drip_head else 0.0)
        if self.hold_s:
            await asyncio.sleep(3600 * 24 if math.isinf(self.hold_s) else self.hold_s)
        chunked = self.framing == "chunked"
        await _send(writer, _chunk(body) if chunked and body else body, self.drip_s)
        while self.endless is not None:
            await _send(writer, _chunk(self.endless) if chunked else self.endless, self.drip_s)
        if chunked:
            await _send(writer, b"0\r\n\r\n", 0.0)


NOT_FOUND = Answer(b'{"detail":"Not Found"}', status=404)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _send(writer: asyncio.StreamWriter, data: bytes, drip_s: float) -> None:
    if not drip_s:
        writer.write(data)
        await writer.drain()
        return
    for i in range(len(data)):
        writer.write(data[i : i + 1])
        await writer.drain()
        await asyncio.sleep(drip_s)


@dataclass
class Request:
    """One request as the server read it (`head`: its bytes up to the blank line)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    head: bytes = b""


@dataclass
class HostileServer:
    """The hostile server on a thread of its own (see the module doc). Routes may change while it runs."""

    routes: dict[str, Answer | Script] = field(default_factory=dict)
    default: Answer | Script = NOT_FOUND
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.routes = dict(self.routes)
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="hostile-http", daemon=True)
        self._tasks: set[asyncio.Task] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def route(self, path: str, answer: Answer | Script) -> None:
        self.routes[path] = answer

    def paths(self) -> list[str]:
        return [request.path for request in self.requests]

    def start(self) -> HostileServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the hostile server did not start")
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        self._loop.call_soon_threadsafe(self._shutdown)
        self._thread.join(10)

    def __enter__(self) -> HostileServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> HostileServer:
        return self.start()

    async def __aexit__(self, *exc: object) -> None:
        self.stop()

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
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                self.requests.append(request)
                answer = self.routes.get(request.path.split("?")[0], self.default)
                if isinstance(answer, Answer):
                    await answer.write(writer)
                else:
                    await answer(writer)
                return  # every answer closes its connection
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, *_ = lines[0].split(" ") + ["", ""]
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length") or 0)
    body = await reader.readexactly(length) if length else b""
    return Request(method, path, headers, body, head)


@functools.lru_cache(maxsize=8)
def bomb(size: int, *layers: str) -> bytes:
    """`size` zero bytes (a whole number of MiB) gzipped (or deflated) once per layer, the first layer built
    block by block (1 GiB in under a second)."""
    mib = 1 << 20
    assert size % mib == 0 and layers
    zeros = bytes(mib)
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = packer.compress(zeros) + packer.flush(zlib.Z_SYNC_FLUSH)
    block = packer.compress(zeros) + packer.flush(zlib.Z_SYNC_FLUSH)  # every later MiB compresses the same
    deflated = first + block * (size // mib - 1) + packer.flush()
    crc = 0
    for _ in range(size // mib):
        crc = zlib.crc32(zeros, crc)
    if layers[0] == "deflate":
        adler = 1
        for _ in range(size // mib):
            adler = zlib.adler32(zeros, adler)
        data = b"\x78\xda" + deflated + struct.pack(">I", adler)
    else:
        data = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + deflated + struct.pack("<II", crc, size & 0xFFFFFFFF)
    for layer in layers[1:]:
        data = zlib.compress(data, 9) if layer == "deflate" else gzip.compress(data, 9)
    return data


def bomb_answer(size: int, *layers: str, **options: Any) -> Answer:
    """An answer whose body decodes to `size` bytes through `layers` (Content-Encoding names them)."""
    return Answer(bomb(size, *layers), encodings=layers, encoded=True, **options)


def deep_json(depth: int, opener: str = "[", leaf: str = "1") -> bytes:
    """A JSON value nested `depth` levels ("[[[...1...]]]", or objects with opener "{")."""
    if opener == "{":
        return ('{"a":' * depth + leaf + "}" * depth).encode()
    return ("[" * depth + leaf + "]" * depth).encode()


def info_with(**changes: Any) -> Answer:
    """The real 0.5.16 /server_info with some keys replaced (a value of ... removes the key)."""
    info = json.loads(SGLANG_INFO)
    for key, value in changes.items():
        if value is ...:
            info.pop(key, None)
        else:
            info[key] = value
    return Answer.json(info)


def with_options(answer: Answer, **options: Any) -> Answer:
    return replace(answer, **options)


def routes_of(info: Answer | None = None, metrics: Answer | None = None, **more: Answer) -> Mapping[str, Answer]:
    """A plausible SGLang: /health, /model_info, /server_info and /metrics, with any of them replaced."""
    routes: dict[str, Answer] = {
        "/health": Answer(b""),
        "/health_generate": Answer(b""),
        "/model_info": Answer.json({"model_path": "m", "is_generation": True}),
        "/server_info": info or Answer(SGLANG_INFO),
        "/metrics": metrics or Answer.text(SGLANG_METRICS),
    }
    routes.update({"/" + name.strip("/"): answer for name, answer in more.items()})
    return routes
