"""`specmon start`'s core: launch a preset's server detached (its own session and process group, so it
outlives specmon and the SSH session), record it in a private state file, and wait for ready or failure."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import psutil

from specmon.launch.presets import Preset
from specmon.launch.supervisor import ServerSupervisor
from specmon.oncall import state
from specmon.oncall.discovery import url_of
from specmon.oncall.gpus import memory_by_gpu, read_gpus
from specmon.oncall.state import ServerRecord

DEFAULT_READY_TIMEOUT_S = 1800.0
HEALTH_LIMIT = 64 * 1024


def with_speed(preset: Preset, speed: float | None) -> Preset:
    """A demo preset with the emulator's speed factor (other presets are left as they are)."""
    if not speed or speed == 1.0 or not preset.demo:
        return preset
    return dataclasses.replace(preset, args={**preset.args, "emulator-speed": speed})


def start_detached(preset: Preset, port: int | None = None) -> ServerRecord:
    """Launch `preset` detached and save its state file. Raises `SupervisorError` (or `PortInUseError`).

    The caller runs the preflight (it says its warnings and honours --no-preflight), so the supervisor does not.
    """
    real_port = port if port is not None else preset.port
    gpu_url = f"http://{preset.host}:{real_port + 1}/_emulator/gpus" if preset.demo else None
    baseline = memory_by_gpu(read_gpus()) if gpu_url is None else {}
    supervisor = ServerSupervisor(preset, port=port, run_dir=state.runs_dir(), preflight=False)
    log = supervisor.start()
    pid = supervisor.pid
    assert pid is not None
    try:
        create_time = psutil.Process(pid).create_time()
    except psutil.Error:
        create_time = time.time()
    record = ServerRecord(
        id=state.new_server_id(),
        preset=preset.name,
        argv=supervisor.argv,
        pid=pid,
        pgid=pid,
        create_time=create_time,
        url=url_of(preset.host, real_port),
        host=preset.host,
        port=real_port,
        log=str(log),
        started_at=supervisor.started_at or time.time(),
        demo=preset.demo,
        gpu_url=gpu_url,
        gpu_baseline_mib=baseline,
    )
    state.save(record)
    return record


@dataclass
class ReadyOutcome:
    """How a wait for ready ended: "ready", "failed" (with the error) or "timeout"."""

    state: str
    error: str | None = None
    took_s: float = 0.0
    startup: dict[str, Any] | None = None


def wait_ready(
    url: str,
    log: str | None,
    pid: int | None,
    create_time: float | None = None,
    timeout: float = DEFAULT_READY_TIMEOUT_S,
    poll_s: float = 0.1,
) -> ReadyOutcome:
    """Follow the log (StartupTracker) and `/health` until the server is ready, fails, dies, or time runs out."""
    import httpx

    from specmon.bounded_http import BlockingFetcher
    from specmon.logs.follower import LogFollower
    from specmon.logs.tracker import StartupTracker
    from specmon.oncall.state import process_matches

    started = time.monotonic()
    tracker = StartupTracker()
    follower = LogFollower(log, from_start=True) if log else None
    client = BlockingFetcher(timeout=2.0, trust_env=False)
    def read_log() -> None:
        while follower is not None and (items := follower.poll()):
            tracker.feed_items(items)

    def failure(took: float) -> ReadyOutcome | None:
        st = tracker.state
        if st.state != "failed":
            return None
        error = st.error.message if st.error else "the startup failed"
        if st.error and st.error.hint:
            error += f" (hint: {st.error.hint})"
        return ReadyOutcome("failed", error, took, st.to_json())

    try:
        while True:
            read_log()
            took = time.monotonic() - started
            st = tracker.state
            if (failed := failure(took)) is not None:
                return failed
            try:
                answer = client.fetch("GET", url.rstrip("/") + "/health", limit=HEALTH_LIMIT, deadline_s=2.0)
                healthy = answer.status_code == 200
            except httpx.HTTPError:
                healthy = False
            if healthy:
                return ReadyOutcome("ready", None, took, st.to_json())
            if pid is not None and create_time is not None and not process_matches(pid, create_time):
                read_log()  # what it wrote as it died (its traceback) says why, not only that it exited
                return failure(took) or ReadyOutcome(
                    "failed", f"the server (pid {pid}) exited before it was ready", took, tracker.state.to_json()
                )
            if took >= timeout:
                return ReadyOutcome("timeout", f"not ready after {timeout:.0f} s", took, st.to_json())
            time.sleep(poll_s)
    finally:
        client.close()
        if follower is not None:
            follower.close()
