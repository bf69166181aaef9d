"""`specmon switch`'s core: check the new preset first (the preflight, with the port and GPU memory the running
server will free, the launcher, the state directory), and only then stop the running server, wait for its GPUs
and port, start the new preset on the same port, follow it to ready, run a quick sanity benchmark and compare it
with what served before.

Each step reports to `on_step(name, status, took_s)` ("running", then "done" or "failed"), so the app can show
them as they happen; the same steps, with their times, are in the report.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specmon.launch.presets import Preset
from specmon.oncall.discovery import FoundServer

if TYPE_CHECKING:
    from specmon.bench.model import BenchResult

ALERT_DROP_PCT = 10.0
STEPS = ("preflight", "stopping", "gpus free", "port free", "launching", "startup", "sanity")

StepCallback = Callable[[str, str, float | None], None]


@dataclass
class SwitchReport:
    """What the switch did, in `specmon switch --json`'s shape."""

    from_: str | None
    to: str
    state: str = "running"  # "ready", "failed"
    steps: list[dict[str, Any]] = field(default_factory=list)
    effective: dict[str, Any] = field(default_factory=dict)
    sanity: dict[str, Any] | None = None
    before: dict[str, Any] | None = None
    """What served before the switch: its preset's last stored result and its live figures."""
    previous: dict[str, Any] | None = None
    """The new preset's own last stored result (its outputs are compared with the sanity run's)."""
    change_pct: dict[str, float | None] = field(default_factory=dict)
    alerts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    old_still_serving: bool = False
    """The switch failed before it stopped the running server, which still serves."""
    id: str | None = None
    url: str | None = None
    log: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["from"] = data.pop("from_")
        return data


class _Steps:
    def __init__(self, report: SwitchReport, on_step: StepCallback | None) -> None:
        self.report = report
        self.on_step = on_step or (lambda *a: None)

    def run(self, name: str, work: Callable[[], Any]) -> Any:
        self.on_step(name, "running", None)
        started = time.monotonic()
        try:
            value = work()
        except Exception:
            self.done(name, time.monotonic() - started, "failed")
            raise
        self.done(name, time.monotonic() - started)
        return value

    def done(self, name: str, took_s: float | None, status: str = "done") -> None:
        entry = {"name": name, "took_s": None if took_s is None else round(took_s, 3)}
        if status != "done":
            entry["status"] = status
        self.report.steps.append(entry)
        self.on_step(name, status, took_s)


class SwitchFailed(Exception):
    """A step failed; the report says which and why."""


class SwitchCancelled(SwitchFailed):
    """``should_stop`` said stop: the switch ended after the step under way, leaving the servers as they were."""


def switch(
    server: FoundServer | None,
    preset: Preset,
    *,
    preflight: bool = True,
    requests: int = 4,
    ready_timeout: float = 1800.0,
    stop_timeout: float = 30.0,
    on_step: StepCallback | None = None,
    on_line: Callable[[str], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> SwitchReport:
    """Replace `server` (None: nothing runs) by `preset` on the same port. Never raises for server faults.

    ``requests`` is the sanity benchmark's size; 0 leaves it out. ``on_line`` gets the new server's startup
    progress (phases, captures) as it happens. Once ``should_stop()`` is true (Ctrl+C), the switch ends after
    the step under way, as "cancelled": it stops nothing more, launches nothing more, and a server starting is
    left starting.
    """
    report = SwitchReport(from_=(server.preset or f"pid {server.pid}") if server else None, to=preset.name)
    steps = _Steps(report, on_step)
    try:
        _switch(server, preset, report, steps, preflight, requests, ready_timeout, stop_timeout, on_line,
                should_stop or (lambda: False))
    except SwitchFailed as exc:
        report.state = "cancelled" if isinstance(exc, SwitchCancelled) else "failed"
        report.error = str(exc)
    if report.state == "running":
        report.state = "ready"
    return report


def _switch(server, preset, report, steps, preflight, requests, ready_timeout, stop_timeout, on_line,
            should_stop) -> None:
    from specmon.launch.supervisor import SupervisorError
    from specmon.oncall.launcher import gone, launch_problems, start_detached, wait_ready
    from specmon.oncall.preflight import preflight as run_preflight
    from specmon.oncall.stopper import StopRefused, stop_server

    port = server.port if server is not None else None
    serving = server is not None and server.alive
    replacing = list(server.pids) if serving else []
    kept = (f"; {report.from_} was not stopped and still serves at {server.url}" if serving else "")

    def checks() -> None:
        problems = launch_problems(preset)
        if preflight:
            outcome = run_preflight(preset, port=port, replacing=replacing)
            problems += [] if outcome.ok else outcome.problems
            if outcome.skipped:
                report.notes.append(outcome.skipped)
        if problems:
            report.old_still_serving = serving
            raise SwitchFailed(f"{preset.name} would not start: " + "; ".join(problems) + kept)

    # Everything that can be checked is checked before the running server is stopped: a bad preset leaves it
    # serving (on a big model a stop is a reload of many minutes).
    if preflight:
        steps.run("preflight", checks)
    else:
        checks()
    if should_stop():
        report.old_still_serving = serving
        raise SwitchCancelled("cancelled before anything was stopped" + kept)
    if serving:
        if requests > 0:  # what the sanity run is compared with (a sweep, at 0, measures the server itself)
            report.before = what_served(server)
        steps.on_step("stopping", "running", None)
        try:
            result = stop_server(server, timeout=stop_timeout)
        except StopRefused as exc:
            steps.done("stopping", 0.0, "failed")
            raise SwitchFailed(f"cannot stop the running server: {exc}") from None
        gpus_at = result.gpus_free_s if result.gpus_free_s is not None else result.took_s
        steps.done("stopping", result.took_s, "done" if result.stopped else "failed")
        steps.done(
            "gpus free", gpus_at - result.took_s, "done" if result.gpus_free_s is not None else "failed"
        )
        port_at = result.port_free_s if result.port_free_s is not None else gpus_at
        steps.done("port free", max(0.0, port_at - gpus_at), "done" if result.port_free else "failed")
        if not result.stopped or not result.port_free or result.gpus_free_s is None:
            left = "; ".join(str(x) for x in result.leftovers) or "no process named"
            raise SwitchFailed(f"the old server did not free its GPUs and port: {left}")
        if server.record is not None:  # replaced for good: its record would only be a dead row in `ps`
            from specmon.oncall.state import remove

            remove(server.record)
    if should_stop():
        raise SwitchCancelled(f"cancelled after {report.from_} was stopped: {preset.name} was not started"
                              if serving else f"cancelled: {preset.name} was not started")
    try:
        record = steps.run("launching", lambda: start_detached(preset, port))
    except SupervisorError as exc:
        raise SwitchFailed(f"not started: {exc}") from None
    launched_at = time.time()  # the startup counts from here: the server starts while the wait sets itself up
    report.id, report.url, report.log = record.id, record.url, record.log
    steps.on_step("startup", "running", None)
    outcome = wait_ready(record.url, record.log, record.pid, record.create_time, timeout=ready_timeout,
                         on_line=on_line, should_stop=should_stop, since=launched_at)
    steps.done("startup", outcome.took_s, {"ready": "done", "cancelled": "cancelled"}.get(outcome.state, "failed"))
    if outcome.state == "cancelled":
        raise SwitchCancelled(f"cancelled while {preset.name} started: it was left starting ({record.id}, "
                              f"pid {record.pid}, {record.url})")
    if outcome.state != "ready":
        raise SwitchFailed(gone(record, "its startup", "the new server", stopped_only=True)
                           or f"the new server did not become ready: {outcome.error}")
    report.effective = _effective(record.url)
    if requests > 0 and should_stop():
        raise SwitchCancelled(f"cancelled once {preset.name} was ready, before its sanity run")
    if requests > 0:  # 0: the caller measures the server itself (a sweep)

        def sanity_run():
            result = sanity_bench(record.url, preset, requests)
            if ended := gone(record, "the sanity run", "the new server"):  # its failed requests measured nothing
                raise SwitchFailed(ended)
            return result

        compare_with_before(report, steps.run("sanity", sanity_run), preset.name)
    if ended := gone(record, "the switch, after it was ready", "the new server"):
        raise SwitchFailed(ended)


def _effective(url: str) -> dict[str, Any]:
    from specmon.http.blocking import BlockingFetcher
    from specmon.http.errors import HttpError
    from specmon.serving.client import MAX_INFO_BYTES
    from specmon.serving.spec import spec_settings

    fetcher = BlockingFetcher(connect_timeout_s=10.0)
    try:
        info = fetcher.fetch("GET", url + "/server_info", limit=MAX_INFO_BYTES, deadline_s=10.0).json("/server_info")
        return dataclasses.asdict(spec_settings(info)) if isinstance(info, dict) else {}
    except (HttpError, ValueError, TypeError):
        return {}
    finally:
        fetcher.close()


def sanity_bench(url: str, preset: Preset, requests: int):
    """A few requests with the preset's benchmark settings (kept apart from the stored results)."""
    import msgspec

    from specmon.bench.results import ResultStore
    from specmon.bench.run import BenchRun, RunSettings
    from specmon.oncall.state import state_dir
    from specmon.serving.client import resolve_api_key

    settings = msgspec.structs.replace(RunSettings.of(preset.bench), requests=max(1, requests), warmup=1)
    run = BenchRun(
        url, preset.name, settings, api_key=resolve_api_key(None), store=ResultStore(state_dir() / "sanity"),
        asked=dict(preset.args),
    )
    return run.run_blocking()


def _figures(result: BenchResult) -> tuple[float | None, float | None]:
    return result.summary.median_tok_s, result.summary.accept_length.token_weighted


def last_result(preset_name: str, notes: list[str] | None = None):
    """The preset's last finished benchmark in the result store, or None; what the reader skipped (unreadable
    runs, records of the chosen run) is added to `notes`."""
    from specmon.bench.results import ResultStore, skipped_note

    unreadable: list[str] = []
    try:
        results = ResultStore().load_all(unreadable.append)
    except (OSError, ValueError) as exc:
        if notes is not None:
            notes.append(f"stored results unreadable: {exc}")
        return None
    runs_lost = [w for w in unreadable if ": skipped (" in w]
    if notes is not None and runs_lost:
        notes.append(f"{len(runs_lost)} stored run(s) unreadable, left out of the comparison: {runs_lost[0]}")
    finished = [r for r in results if r.preset == preset_name and r.status == "finished" and r.measured]
    chosen = max(finished, key=lambda r: r.started_at) if finished else None
    if chosen is not None and notes is not None and (note := skipped_note(chosen)):
        notes.append(f"previous result: {note}")
    return chosen


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def live_figures(url: str, timeout_s: float = 5.0) -> dict[str, float | None]:
    """The running server's own figures: its lifetime acceptance length (from /metrics counters) and the
    decode tok/s of its last decode-log window (/server_info). Each None when the server cannot say."""
    import asyncio

    from specmon.serving.client import SGLangClient, SGLangError, resolve_api_key

    async def read() -> dict[str, float | None]:
        out: dict[str, float | None] = {"accept_length": None, "last_gen_tok_s": None}
        async with SGLangClient(url, api_key=resolve_api_key(None), timeout=timeout_s) as client:
            try:
                metrics = await client.metrics()
            except SGLangError:
                metrics = None
            if metrics is not None:
                generated, verify = _finite(metrics.generation_tokens), _finite(metrics.spec_verify_calls)
                if generated and verify:
                    out["accept_length"] = generated / verify
            try:
                info = await client.server_info()
            except SGLangError:
                info = {}
            states = info.get("internal_states")
            state0 = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else info
            out["last_gen_tok_s"] = _finite(state0.get("last_gen_throughput"))
            if out["accept_length"] is None:
                out["accept_length"] = _finite(state0.get("avg_spec_accept_length"))
        return out

    try:
        return asyncio.run(asyncio.wait_for(read(), timeout_s * 2))
    except (TimeoutError, OSError, ValueError):
        return {"accept_length": None, "last_gen_tok_s": None}


def what_served(server: FoundServer) -> dict[str, Any]:
    """The server a switch replaces, as "before": its preset's last stored result and its live figures."""
    before: dict[str, Any] = {"preset": server.preset, "run_id": None, "started_at": None, "decode_tok_s": None,
                              "decode_ci95": None, "accept_length": None, "live": live_figures(server.url)}
    last = last_result(server.preset) if server.preset else None
    if last is not None:
        decode, accept = _figures(last)
        ci = last.summary.tok_s_ci95
        before.update(run_id=last.run_id, started_at=last.started_at, decode_tok_s=decode, accept_length=accept,
                      decode_ci95=ci if ci is not None and len(ci) == 2 else None)
    elif before["live"]["accept_length"] is not None:
        before["accept_length"] = before["live"]["accept_length"]
    return before


def _pct(now: float | None, before: float | None) -> float | None:
    if now is None or not before:
        return None
    return round((now - before) / before * 100.0, 1)


def noise_pct(before: dict[str, Any]) -> float:
    """How far below "before" a figure may land and still be noise: 10%, or the half-width of the earlier
    run's 95% CI of decode tok/s when that is wider."""
    ci, median = before.get("decode_ci95"), before.get("decode_tok_s")
    if not ci or not median:
        return ALERT_DROP_PCT
    return max(ALERT_DROP_PCT, (median - ci[0]) / median * 100.0)


def compare_with_before(report: SwitchReport, sanity: BenchResult, preset_name: str) -> None:
    """Fill sanity, before → after (change_pct) and alerts: a drop from what served before beyond the noise,
    outputs that diverged from the new preset's own last result at temperature 0, failed sanity requests."""
    from specmon.bench.compare import compare

    decode, accept = _figures(sanity)
    ok = sanity.summary.requests_ok
    report.sanity = {
        "decode_tok_s": decode,
        "accept_length": accept,
        "requests_ok": ok,
        "requests": len(sanity.measured),
        "run_id": sanity.run_id,
    }
    if ok < len(sanity.measured) or not ok:
        report.alerts.append(f"sanity: {len(sanity.measured) - ok} of {len(sanity.measured)} requests failed")
    before = report.before or {}
    report.change_pct = {"decode_tok_s": _pct(decode, before.get("decode_tok_s")),
                         "accept_length": _pct(accept, before.get("accept_length"))}
    limit = noise_pct(before)
    source = (f"{before.get('preset')}'s run {before['run_id']}" if before.get("run_id")
              else f"{before.get('preset') or 'the old server'}'s live figure")
    for key, label in (("decode_tok_s", "decode tok/s"), ("accept_length", "acceptance length")):
        change = report.change_pct[key]
        if change is not None and change < -limit:
            report.alerts.append(f"{label} fell {-change:.1f}% against what served before ({source}; noise "
                                 f"{limit:.0f}%)")
    previous = last_result(preset_name, report.notes)
    if previous is None:
        return
    p_decode, p_accept = _figures(previous)
    report.previous = {
        "run_id": previous.run_id,
        "started_at": previous.started_at,
        "decode_tok_s": p_decode,
        "accept_length": p_accept,
    }
    diverged = _diverged(sanity, previous) or compare(sanity, previous).diverged
    if diverged:
        report.alerts.append(
            f"outputs diverged from run {previous.run_id} at temperature 0 on {len(diverged)} prompt(s)"
        )


def _diverged(sanity: BenchResult, previous: BenchResult) -> list[str]:
    """Prompts whose outputs differ within the shorter output (runs of different lengths), at temperature 0."""
    if sanity.settings.temperature != 0 or previous.settings.temperature != 0:
        return []
    if sanity.settings.max_new_tokens == previous.settings.max_new_tokens:
        return []  # compare() decides
    before = {r.prompt_id: r.output_text for r in previous.measured if r.ok}
    out = []
    for request in sanity.measured:
        if request.ok and request.prompt_id in before:
            a, b = request.output_text.split(), before[request.prompt_id].split()
            n = min(len(a), len(b))
            if n > 2 and a[: n - 2] != b[: n - 2]:
                out.append(request.prompt_id)
    return out
