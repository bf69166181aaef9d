"""`specmon ps --prometheus-sd` writes only `host:port` targets: a server whose recorded URL holds a path, a
query or a `user:password@` is said on stderr and left out, and the real Prometheus that reads the file finds
exactly the good targets (a bad one would be refused by it, or scraped wrong with the password in its
`instance` label)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from specmon.ports import free_port
from tests.support.prometheus import Job, Prometheus

pytestmark = pytest.mark.timeout(240)
PASSWORD = "sd-hunter2-secret"
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


@pytest.fixture
def sleeper():
    """A live process the records name (`ps` lists a launched server only while its process runs)."""
    proc = subprocess.Popen(SLEEPER, stdin=subprocess.DEVNULL)
    yield proc
    proc.kill()
    proc.wait(10)


def write_record(state, server_id: str, proc: subprocess.Popen, url: str, port: int) -> None:
    servers = state / "servers"
    servers.mkdir(parents=True, exist_ok=True, mode=0o700)
    record = {"id": server_id, "preset": "p", "argv": SLEEPER, "pid": proc.pid, "pgid": proc.pid,
              "create_time": psutil.Process(proc.pid).create_time(), "url": url, "host": "127.0.0.1",
              "port": port, "log": str(state / "log"), "started_at": time.time() - 60}
    path = servers / f"{server_id}.json"
    path.write_text(json.dumps(record))
    path.chmod(0o600)


def active_targets(prom: Prometheus) -> list[dict]:
    import httpx

    answer = httpx.get(prom.url + "/api/v1/targets", timeout=10).json()
    return [t for t in answer["data"]["activeTargets"] if t["scrapePool"] == "sglang"]


def test_only_host_port_targets_reach_prometheus(tmp_path, sleeper):
    state = tmp_path / "state"
    good = [free_port(), free_port()]
    bad_port = free_port()
    write_record(state, "good01", sleeper, f"http://127.0.0.1:{good[0]}", good[0])
    write_record(state, "good02", sleeper, f"http://localhost:{good[1]}/", good[1])
    bad = {"path01": f"http://127.0.0.1:{bad_port}/prefix", "query1": f"http://127.0.0.1:{bad_port}?a=1",
           "creds1": f"http://alice:{PASSWORD}@127.0.0.1:{bad_port}", "space1": f"http://127.0.0.1:{bad_port}/a\nb"}
    for server_id, url in bad.items():
        write_record(state, server_id, sleeper, url, bad_port)
    env = {**os.environ, "SPECMON_STATE_DIR": str(state), "XDG_STATE_HOME": str(tmp_path / "xdg")}
    done = subprocess.run([sys.executable, "-m", "specmon", "ps", "--prometheus-sd"], env=env, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    groups = json.loads(done.stdout)
    assert sorted(t for g in groups for t in g["targets"]) == sorted(f"127.0.0.1:{p}" for p in good), groups
    said = done.stderr.splitlines()
    for server_id in bad:
        assert sum(server_id in line for line in said) == 1, (server_id, done.stderr)
    assert PASSWORD not in done.stdout + done.stderr

    prom = Prometheus(tmp_path, [Job("sglang", [])])
    try:
        (prom.dir / "sglang.json").write_text(done.stdout)  # file_sd reads the file as `ps` printed it
        deadline = time.monotonic() + 60
        while len(active_targets(prom)) < len(good):
            assert time.monotonic() < deadline, prom.log()[-3000:]
            time.sleep(0.2)
        found = active_targets(prom)
        assert sorted(t["labels"]["instance"] for t in found) == sorted(f"127.0.0.1:{p}" for p in good), found
        assert {t["labels"]["server"] for t in found} == {"good01", "good02"}
        assert "Creating target failed" not in prom.log()
    finally:
        prom.stop()
