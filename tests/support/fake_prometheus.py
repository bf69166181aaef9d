"""Something in Prometheus' place on loopback, for the answers a real Prometheus cannot give (a compatible
backend without status/config, values as JSON numbers, duplicated series, hostile bodies): each request is
answered by a script `(path, query, headers) -> (status, body)` and recorded. Where the case is about what
Prometheus answers, tests use a real one (tests/support/prometheus.py)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

CONFIG = {"status": "success", "data": {"yaml": "global:\n  scrape_interval: 15s\nscrape_configs:\n"
                                               "- job_name: sglang\n  scrape_interval: 10s\n"}}
UP_SAMPLE = {"metric": {"__name__": "up", "job": "sglang", "instance": "10.0.0.1:30000", "specmon_column": "up"},
             "value": [1, "1"]}
EMPTY = {"status": "success", "data": {"resultType": "vector", "result": []}}
MATRIX = {"status": "success", "data": {"resultType": "matrix", "result": []}}


def vector(*samples: dict) -> dict:
    return {"status": "success", "data": {"resultType": "vector", "result": list(samples)}}


def now_sample() -> dict:
    """The combined query's `vector(time())` part, as Prometheus answers it (its time)."""
    return {"metric": {"specmon_column": "now"}, "value": [time.time(), f"{time.time():.3f}"]}


def with_now(answer: dict) -> dict:
    """An answer to the combined query with Prometheus' time in it."""
    return {**answer, "data": {**answer["data"], "result": [*answer["data"]["result"], now_sample()]}}


UP = vector(UP_SAMPLE)


def is_combined(path: str, query: str) -> bool:
    """Whether a request is the combined query of every column (the one holding `up`)."""
    return path.endswith("/api/v1/query") and "label_replace(up{" in query


def good(path: str, query: str) -> tuple[int, bytes]:
    """A Prometheus with one server up, nothing else."""
    if path.endswith("/api/v1/status/config"):
        return 200, json.dumps(CONFIG).encode()
    if path.endswith("/api/v1/query_range"):
        return 200, json.dumps(MATRIX).encode()
    if is_combined(path, query):
        return 200, json.dumps(with_now(UP)).encode()
    return 200, json.dumps(EMPTY).encode()


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        url = urlparse(self.path)
        query = parse_qs(url.query).get("query", [""])[0]
        self.server.seen.append((url.path, dict(self.headers)))
        self.server.queries.append((url.path, query))
        status, body = self.server.script(url.path, query, self.headers)
        if status == 0:  # hang: answer nothing until the client gives up
            time.sleep(5)
            return
        self.send_response(status)
        self.send_header("content-type", "application/json" if body[:1] in (b"{", b"[") else "text/plain")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class FakePrometheus:
    """A scripted server on 127.0.0.1 (see the module doc); `seen`: (path, headers), `queries`: (path, query)."""

    def __init__(self, script) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.script, self.server.seen, self.server.queries = script, [], []
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def seen(self) -> list:
        return self.server.seen

    @property
    def queries(self) -> list:
        return self.server.queries

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
