"""A real Prometheus for tests: Debian's `prometheus` binary on a loopback port, a temporary TSDB and config,
stopped by its own pid (the package's service is never used). Skips, with the reason, only where the binary
is absent outside CI (CI installs it: .ci/run)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import yaml

from specmon.ports import free_port


def prometheus_binary() -> str:
    """The prometheus binary, or a skip (a failure in CI, where .ci/run installs it)."""
    path = shutil.which("prometheus")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is not installed (.ci/run installs Debian's prometheus package)")
        pytest.skip("prometheus is not installed (apt-get install -y --no-install-recommends prometheus)")
    return path


def promtool_binary() -> str:
    path = shutil.which("promtool")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is not installed (.ci/run installs Debian's prometheus package)")
        pytest.skip("promtool is not installed (apt-get install -y --no-install-recommends prometheus)")
    return path


@dataclass
class Job:
    """One scrape job: its name, targets (`host:port`), labels per target and scrape interval. `honor`: the
    scraped labels and timestamps are kept (a target that serves other targets' series, with their times)."""

    name: str
    targets: list[str]
    interval: str = "1s"
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    honor: bool = False

    def config(self, sd_dir: Path) -> dict:
        groups = [{"targets": [t], "labels": self.labels.get(t, {})} for t in self.targets]
        sd_file = sd_dir / f"{self.name}.json"
        write_json(sd_file, groups)
        config = {"job_name": self.name, "scrape_interval": self.interval, "scrape_timeout": self.interval,
                  "file_sd_configs": [{"files": [str(sd_file)], "refresh_interval": "1s"}]}
        if self.honor:
            config |= {"honor_labels": True, "honor_timestamps": True}
        return config


def write_json(path: Path, data: object) -> None:
    import json

    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


class Prometheus:
    """A running Prometheus; `url`, `query(expr)`, `set_targets(job, targets)`, `stop()`."""

    def __init__(self, tmp_path: Path, jobs: list[Job], rule_files: list[Path] = (), evaluation: str = "1s",
                 extra_args: list[str] = (), scrape_interval: str = "1s", query_log: Path | None = None) -> None:
        self.dir = tmp_path / "prometheus"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.jobs = {job.name: job for job in jobs}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {"global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation,
                             **({"query_log_file": str(query_log)} if query_log else {})},
                  "rule_files": [str(p) for p in rule_files],
                  "scrape_configs": [job.config(self.dir) for job in jobs]}
        self.config_path = self.dir / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = self.dir / "prometheus.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [prometheus_binary(), f"--config.file={self.config_path}",
                 f"--storage.tsdb.path={self.dir / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                 *(() if any(a.startswith("--storage.tsdb.retention") for a in extra_args) else
                   ("--storage.tsdb.retention.time=1d",)), *extra_args],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )
        self.wait_ready()

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited {self.proc.returncode}:\n{self.log()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/-/ready", timeout=2).status_code == 200:
                    return
            time.sleep(0.1)
        raise AssertionError(f"prometheus not ready:\n{self.log()[-3000:]}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        answer = httpx.get(self.url + "/api/v1/query", params=params, timeout=10).json()
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def set_targets(self, job: str, targets: list[str], labels: dict[str, dict[str, str]] | None = None) -> None:
        spec = self.jobs[job]
        spec.targets = targets
        if labels is not None:
            spec.labels = labels
        spec.config(self.dir)

    def wait_scraped(self, expr: str, count: int, minimum: int = 2, timeout: float = 60.0) -> None:
        """Until `count` series of `expr` each hold at least `minimum` samples over the last 5 minutes."""
        deadline = time.monotonic() + timeout
        result: list[dict] = []
        while time.monotonic() < deadline:
            result = self.query(f"count_over_time({expr}[5m]) >= {minimum}")
            if len(result) >= count:
                return
            time.sleep(0.2)
        raise AssertionError(f"only {len(result)} of {count} series of {expr} scraped {minimum} times")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class StaticMetrics:
    """A loopback HTTP server answering `GET /metrics` with fixed exposition text (a recorded capture), until
    `text` is set to another."""

    def __init__(self, text: str) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.text = text
        metrics = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = metrics.text.encode()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("content-type", "text/plain; version=0.0.4")
                self.send_header("content-length", str(len(body) if self.path == "/metrics" else 0))
                self.end_headers()
                if self.path == "/metrics":
                    self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Load:
    """Generation requests to each URL from `streams` threads until stopped (bounded: at most `deadline_s`)."""

    def __init__(self, urls: list[str], streams: int = 2, max_new_tokens: int = 300, deadline_s: float = 240) -> None:
        import threading

        self.stopping = threading.Event()
        self.deadline = time.monotonic() + deadline_s
        self.body = {"text": "hello", "sampling_params": {"max_new_tokens": max_new_tokens, "ignore_eos": True}}
        self.threads = [threading.Thread(target=self._run, args=(url,), daemon=True)
                        for url in urls for _ in range(streams)]
        for thread in self.threads:
            thread.start()

    def _run(self, url: str) -> None:
        with httpx.Client(timeout=30) as client:
            while not self.stopping.is_set() and time.monotonic() < self.deadline:
                try:
                    client.post(url + "/generate", json=self.body)
                except httpx.HTTPError:
                    self.stopping.wait(0.2)  # the server is restarting or gone

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(35)
