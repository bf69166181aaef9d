"""A small HTTP server on 127.0.0.1 that replays real SGLang 0.5.16 answers from tests/fixtures/api/.

Used in a thread (`ReplayServer(...).start()`) or as a process (`python tests/support/serving_replay.py --port N`,
which prints `LISTENING <port>` once it accepts connections) so tests can kill it for real.
Behaviour knobs: /health answers from a queue of status codes then 200; /server_info can 404 (old servers,
only /get_server_info); /flush_cache answers 400 a given number of times; /metrics can 404; an API key makes
every route but /health* and /metrics answer 401 without `Authorization: Bearer <key>`, as SGLang does;
`gpus`/`gpus_status` make it answer the emulator's `GET /_emulator/gpus` (404 by default, like SGLang).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

API_FIXTURES = Path(__file__).parents[1] / "fixtures" / "api"
FLUSH_BODY = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting "
    "requests, the operation will not be performed.)\n"
)


def first_stream(name: str) -> list[bytes]:
    """The SSE events of the first request in a recorded generate stream, through `data: [DONE]`."""
    events = []
    for block in (API_FIXTURES / name).read_text().split("\n\n"):
        if not block.strip():
            continue
        events.append(block.strip().encode() + b"\n\n")
        if block.strip() == "data: [DONE]":
            break
    return events


@dataclass
class ReplayBehaviour:
    """What the replay server answers; mutable while it runs."""

    server_info: str = "h200-0.5.16-server-info-eagle3.json"
    metrics: str | None = "h200-0.5.16-metrics-eagle3.txt"
    generate: str = "h200-0.5.16-generate-eagle3.txt"
    health_codes: deque[int] = field(default_factory=deque)
    legacy_info_only: bool = False
    flush_busy_times: int = 0
    api_key: str | None = None
    meta_overrides: dict[str, Any] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    # Added to the recorded counters by each /generate answered, as a live server counts.
    generated_tokens: int = 0
    verify_calls: int = 0
    gpus: bytes | None = None  # the body of GET /_emulator/gpus; None: 404
    gpus_status: int = 200


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ReplayHTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    @property
    def behaviour(self) -> ReplayBehaviour:
        return self.server.behaviour

    def _send(self, code: int, body: str | bytes, content_type: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self) -> None:
        self._send(404, json.dumps({"detail": "Not Found"}))

    def _authorized(self) -> bool:
        key = self.behaviour.api_key
        if key is None or self.path.startswith(("/health", "/metrics")):
            return True
        return self.headers.get("Authorization") == f"Bearer {key}"

    def _dispatch(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.behaviour.requests.append(
            {
                "method": method,
                "path": self.path,
                "authorization": self.headers.get("Authorization"),
                "content_type": self.headers.get("Content-Type"),
                "client_port": self.client_address[1],
                "body": body,
            }
        )
        if not self._authorized():
            self._send(401, json.dumps({"error": "Unauthorized"}))
            return
        route = getattr(self, "route_" + self.path.split("?")[0].strip("/").replace("/", "_"), None)
        if route is None:
            self._not_found()
            return
        route(method, body)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def route_health(self, method: str, body: bytes) -> None:
        codes = self.behaviour.health_codes
        code = codes.popleft() if codes else 200
        self._send(code, b"")

    route_health_generate = route_health

    def route_server_info(self, method: str, body: bytes) -> None:
        if self.behaviour.legacy_info_only:
            self._not_found()
            return
        self.route_get_server_info(method, body)

    def route_get_server_info(self, method: str, body: bytes) -> None:
        self._send(200, (API_FIXTURES / self.behaviour.server_info).read_bytes())

    def route_model_info(self, method: str, body: bytes) -> None:
        if self.behaviour.legacy_info_only:
            self._not_found()
            return
        self.route_get_model_info(method, body)

    def route_get_model_info(self, method: str, body: bytes) -> None:
        info = json.loads((API_FIXTURES / self.behaviour.server_info).read_text())
        self._send(200, json.dumps({"model_path": info["model_path"], "tokenizer_path": info["tokenizer_path"],
                                    "is_generation": True}))

    def route__emulator_gpus(self, method: str, body: bytes) -> None:
        if self.behaviour.gpus is None:
            self._not_found()
        else:
            self._send(self.behaviour.gpus_status, self.behaviour.gpus)

    def route_flush_cache(self, method: str, body: bytes) -> None:
        if self.behaviour.flush_busy_times > 0:
            self.behaviour.flush_busy_times -= 1
            self._send(400, FLUSH_BODY, "text/plain")
        else:
            self._send(200, FLUSH_BODY, "text/plain")

    def route_metrics(self, method: str, body: bytes) -> None:
        if self.behaviour.metrics is None:
            self._not_found()
            return
        text = (API_FIXTURES / self.behaviour.metrics).read_text()
        for name, added in (
            ("sglang:generation_tokens_total", self.behaviour.generated_tokens),
            ("sglang:spec_verify_calls_total", self.behaviour.verify_calls),
        ):
            text = re.sub(
                rf"^({re.escape(name)}(?:{{[^}}]*}})?) (\S+)$",
                lambda m, added=added: f"{m[1]} {float(m[2]) + added}",
                text,
                flags=re.M,
            )
        self._send(200, text, "text/plain; version=0.0.4")

    def route_generate(self, method: str, body: bytes) -> None:
        if not (self.headers.get("Content-Type") or "").startswith("application/json"):
            self._send(400, json.dumps({"error": {"message": "JSON body required"}}))
            return
        request = json.loads(body)
        events = first_stream(self.behaviour.generate)
        final_meta = json.loads(self._override(events[-2]).decode()[len("data: ") :])["meta_info"]
        self.behaviour.generated_tokens += final_meta["completion_tokens"]
        self.behaviour.verify_calls += final_meta.get("spec_verify_ct", 0)
        if request.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for event in events:
                self.wfile.write(self._override(event))
                self.wfile.flush()
            self.close_connection = True
            return
        final = json.loads(self._override(events[-2]).decode()[len("data: "):])
        self._send(200, json.dumps(final))

    def _override(self, event: bytes) -> bytes:
        overrides = self.behaviour.meta_overrides
        if not overrides or event.startswith(b"data: [DONE]"):
            return event
        chunk = json.loads(event.decode()[len("data: "):])
        if chunk["meta_info"].get("finish_reason"):
            chunk["meta_info"].update(overrides)
        return b"data: " + json.dumps(chunk).encode() + b"\n\n"


class _ReplayHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    behaviour: ReplayBehaviour


class ReplayServer:
    """The replay server in a background thread of the test process."""

    def __init__(self, port: int = 0, **behaviour: Any) -> None:
        self.behaviour = ReplayBehaviour(**behaviour)
        self._httpd = _ReplayHTTPServer(("127.0.0.1", port), _Handler)
        self._httpd.behaviour = self.behaviour
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05})

    def __enter__(self) -> ReplayServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop answering and close the port (again: no-op)."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--server-info", default="h200-0.5.16-server-info-eagle3.json")
    parser.add_argument("--generate", default="h200-0.5.16-generate-eagle3.txt")
    parser.add_argument("--health-503", type=int, default=0, help="answer 503 to this many /health first")
    parser.add_argument("--meta", action="append", default=[], metavar="KEY=INT", help="final meta_info override")
    args = parser.parse_args(argv)
    overrides = {k: int(v) for k, v in (item.split("=", 1) for item in args.meta)}
    server = ReplayServer(
        args.port,
        server_info=args.server_info,
        generate=args.generate,
        health_codes=deque([503] * args.health_503),
        api_key=os.environ.get("REPLAY_API_KEY") or None,
        meta_overrides=overrides,
    )
    print(f"LISTENING {server.port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server._httpd.serve_forever(poll_interval=0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
