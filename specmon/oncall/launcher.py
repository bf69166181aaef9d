"""`specmon start`'s core: launch a preset's server detached (its own session and process group, so it
outlives specmon and the SSH session), record it in a private state file, and wait for ready or failure."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

from specmon.launch.marks import LAUNCH_TOKEN_ENV, SERVER_ID_ENV
from specmon.launch.presets import Preset
from specmon.launch.supervisor import ServerSupervisor, SupervisorError, launcher_problem
from specmon.oncall import state
from specmon.oncall.gpus import memory_by_gpu, read_gpus
from specmon.oncall.state import ServerRecord
from specmon.private_files import make_private_dir
from specmon.units import format_seconds
from specmon.urls import url_of

DEFAULT_READY_TIMEOUT_S = 1800.0
HEALTH_LIMIT = 64 * 1024


def with_speed(preset: Preset, speed: float | None) -> Preset:
    """A demo preset with the emulator's speed factor (other presets are left as they are)."""
    if not speed or speed == 1.0 or not preset.demo:
        return preset
    return dataclasses.replace(preset, args={**preset.args, "emulator-speed": speed})


def launch_problems(preset: Preset) -> list[str]:
    """What would make launching `preset` fail at once, checked without launching (a switch checks it before it
    stops the running server): the launcher cannot be executed, the state directory cannot be written."""
    problem = launcher_problem(preset)
    problems = [problem] if problem else []
    for directory in (state.servers_dir(), state.runs_dir()):
        try:
            make_private_dir(directory)
            writable = os.access(directory, os.W_OK | os.X_OK)
        except OSError as exc:
            problems.append(f"{directory} cannot be used: {exc.strerror or exc}")
            continue
        if not writable:
            problems.append(f"{directory} is not writable")
    return problems


def start_detached(preset: Preset, port: int | None = None) -> ServerRecord:
    """Launch `preset` detached and record it. Raises `SupervisorError` (or `PortInUseError`).

    The launch is recorded before it happens (a pending file: specmon killed between launch and record, the
    next look-up adopts the server, found by the token it was launched with), and a record that cannot be
    written after the launch stops the server: a server is never left running with no record. The caller runs the preflight (it says its warnings and
    honours --no-preflight), so the supervisor does not.
    """
    real_port = port if port is not None else preset.port
    url = url_of(preset.host, real_port, what="the preset's host and port")  # UrlRefused before any launch
    gpu_url = url_of(preset.host, real_port + 1) + "/_emulator/gpus" if preset.demo else None
    baseline = memory_by_gpu(read_gpus()) if gpu_url is None else {}
    token, server_id = state.new_launch_token(), state.new_server_id()
    supervisor = ServerSupervisor(preset, port=port, run_dir=state.runs_dir(), preflight=None,
                                  env={LAUNCH_TOKEN_ENV: token, SERVER_ID_ENV: server_id})
    record = ServerRecord(
        id=server_id,
        preset=preset.name,
        argv=preset.argv(port),
        pid=0,
        pgid=0,
        create_time=0.0,
        url=url,
        host=preset.host,
        port=real_port,
        log="",
        started_at=time.time(),
        demo=preset.demo,
        gpu_url=gpu_url,
        gpu_baseline_mib=baseline,
        launch_token=token,
    )
    try:
        state.save_pending(record)
    except OSError as exc:
        raise SupervisorError(f"not launched: its state file cannot be written in {state.servers_dir()}: "
                              f"{exc.strerror or exc}") from None
    try:
        log = supervisor.start()
    except SupervisorError:
        state.drop_pending(record.id)  # nothing was launched
        raise
    _record_launch(supervisor, record, log)
    return record


def _record_launch(supervisor: ServerSupervisor, record: ServerRecord, log) -> None:
    """Fill the record with the launched process and save it; stop the server when that fails."""
    pid = supervisor.pid
    assert pid is not None
    try:
        try:
            record.create_time = psutil.Process(pid).create_time()
        except psutil.Error:
            record.create_time = time.time()
        record.pid = record.pgid = pid
        record.argv = supervisor.argv
        record.log = str(log)
        record.started_at = supervisor.started_at or record.started_at
        state.save(record)
    except OSError as exc:
        supervisor.stop()
        state.drop_pending(record.id)
        raise SupervisorError(f"stopped the server it launched (pid {pid}): its state file could not be "
                              f"written in {state.servers_dir()}: {exc.strerror or exc}") from None


def gone(record: ServerRecord, during: str, what: str = "the server", *, stopped_only: bool = False) -> str | None:
    """None while the recorded server runs (pid, start time and command line); else how it ended, in one line.
    With `stopped_only`, only when `specmon stop` stopped it (else the caller knows better why it ended)."""
    if record.is_alive():
        return None
    stopped = state.was_stopped(record)
    if stopped_only and not stopped:
        return None
    how = f"was stopped (`specmon stop {record.id}`)" if stopped else "exited"
    return f"{what} (pid {record.pid}) {how} during {during}; nothing serves at {record.url}"


@dataclass
class ReadyOutcome:
    """How a wait for ready ended: "ready", "failed" (with the error), "timeout" or "cancelled"."""

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
    on_state: Callable[[Any], None] | None = None,
    on_line: Callable[[str], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    since: float | None = None,
) -> ReadyOutcome:
    """Follow the log (StartupTracker) and `/health` until the server is ready, fails, dies, time runs out, or
    ``should_stop()`` (Ctrl+C) ends the wait as "cancelled" (the server is left as it is).

    ``on_line`` gets one line per phase change and throttled capture and weight progress, as
    `log-summary --follow` prints them (a real model takes many minutes to start: say what it is doing);
    ``on_state`` gets the tracker's state at every look (the textfile exporter's capture progress). ``took_s``
    counts from ``since`` (the launch's wall time) when given, else from this call."""
    from specmon.http.blocking import BlockingFetcher
    from specmon.http.errors import HttpError
    from specmon.logs.follower import LogFollower
    from specmon.logs.model import ServerBecameReady
    from specmon.logs.summary import ChangePrinter
    from specmon.logs.tracker import StartupTracker
    from specmon.oncall.state import process_matches

    started = time.monotonic() - (max(0.0, time.time() - since) if since is not None else 0.0)
    tracker = StartupTracker()
    follower = LogFollower(log, from_start=True, frame_runs=True) if log else None
    client = BlockingFetcher(connect_timeout_s=2.0)
    printer = ChangePrinter(None)

    def read_log() -> None:
        while follower is not None and (items := follower.poll()):
            tracker.feed_items(items)
        # The log's own "READY after" (first log line to ready line, in the log's whole seconds) is left out:
        # the caller says when the server was ready, as measured here from the launch (one figure per fact).
        events = [event for event in tracker.drain_events() if not isinstance(event, ServerBecameReady)]
        if on_line is not None:
            for line in printer.lines(events, tracker.state):
                on_line(line)

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
            if on_state is not None:
                on_state(st)
            if (failed := failure(took)) is not None:
                return failed
            try:
                answer = client.fetch("GET", url.rstrip("/") + "/health", limit=HEALTH_LIMIT, deadline_s=2.0)
                healthy = answer.status_code == 200
            except HttpError:
                healthy = False
            if healthy:
                return ReadyOutcome("ready", None, took, st.to_json())
            if pid is not None and create_time is not None and not process_matches(pid, create_time):
                read_log()  # what it wrote as it died (its traceback) says why, not only that it exited
                return failure(took) or ReadyOutcome(
                    "failed", f"the server (pid {pid}) exited before it was ready", took, tracker.state.to_json()
                )
            if took >= timeout:
                return ReadyOutcome("timeout", f"not ready after {format_seconds(timeout)}", took, st.to_json())
            if should_stop is not None and should_stop():
                return ReadyOutcome("cancelled", "cancelled while it started", took, st.to_json())
            time.sleep(poll_s)
    finally:
        client.close()
        if follower is not None:
            follower.close()
