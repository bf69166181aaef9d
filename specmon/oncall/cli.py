"""Handlers of `specmon start`, `ps`, `stop` and `switch` (headless: no Textual).

Exit 0 ok, 1 failed, 2 bad usage; with `--json` one JSON object on stdout; every message about outside input
is a line, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from specmon import exits
from specmon.exits import UsageError
from specmon.sglang.metric_names import STARTUP_TIME_SECONDS
from specmon.text import aligned_rows, printable, strict_json
from specmon.units import format_seconds

EXIT_OK, EXIT_FAILED = 0, 1


def _emit(args: argparse.Namespace, data: dict[str, Any], text: str) -> None:
    """The command's result on stdout: JSON (`strict_json`), or text with its control characters shown as escapes
    (state files, presets, logs and servers fill it)."""
    if getattr(args, "json", False):
        print(strict_json(data, indent=2))
    elif text:
        print(printable(text, newlines=True))
    sys.stdout.flush()


def _note(message: str) -> None:
    print(f"specmon: {printable(message, newlines=True)}", file=sys.stderr)


def _progress_line(line: str) -> None:
    """A starting server's phase or capture progress, on stderr (stdout keeps the result, JSON or text)."""
    print(f"    {printable(line)}", file=sys.stderr, flush=True)


def confirm(question: str, assume_yes: bool) -> bool:
    """True with `--yes`; else asks on the terminal; without one it is a usage error."""
    if assume_yes:
        return True
    if not sys.stdin.isatty():
        raise UsageError(f"{question} Not asked: stdin is not a terminal (give --yes)")
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def _load_preset(args: argparse.Namespace, name: str):
    from specmon.launch.presets import load_presets, require_preset
    from specmon.oncall.launcher import with_speed

    preset = require_preset(load_presets(getattr(args, "presets", None) or ()), name)
    return with_speed(preset, getattr(args, "speed", None))


# ------------------------------------------------------------------------------------------------ start


def run_start(args: argparse.Namespace) -> int:
    """`specmon start PRESET`: preflight, launch detached, record; `--wait` for ready or failure."""
    from specmon.launch.supervisor import SupervisorError
    from specmon.oncall.launcher import gone, start_detached, wait_ready
    from specmon.oncall.preflight import preflight

    preset = _load_preset(args, args.preset)
    if not args.no_preflight:
        checked = preflight(preset, port=args.port)
        if checked.skipped:
            _note(checked.skipped)
        elif not checked.ok:
            _emit(
                args,
                {
                    "preset": preset.name,
                    "state": "failed",
                    "error": "the preflight failed",
                    "preflight": checked.to_json(),
                },
                "preflight failed:\n" + "\n".join(f"  {p}" for p in checked.problems),
            )
            return EXIT_FAILED
    try:
        record = start_detached(preset, args.port)
    except SupervisorError as exc:
        _emit(args, {"preset": preset.name, "state": "failed", "error": str(exc)}, f"not started: {exc}")
        return EXIT_FAILED
    data = {k: record.to_json()[k] for k in ("id", "preset", "pid", "pgid", "url", "log", "started_at")}
    text = f"started {record.preset} as {record.id}: pid {record.pid}, {record.url}\n  log: {record.log}"
    if not args.wait:
        _emit(args, data, text)
        return EXIT_OK
    if not args.json:
        print(printable(text, newlines=True), flush=True)
    from specmon.textfile import textfile_dir

    exporter = _StartExporter(textfile_dir(args.textfile_dir), record.url)
    outcome = wait_ready(record.url, record.log, record.pid, record.create_time, timeout=args.timeout,
                         on_state=exporter.progress, on_line=_progress_line, since=record.started_at)
    exporter.finished(preset.name, outcome)
    data.update(
        state="ready" if outcome.state == "ready" else "failed",
        error=None if outcome.state == "ready" else gone(record, "its startup", stopped_only=True) or outcome.error,
        ready_after_s=round(outcome.took_s, 3),
    )
    if outcome.state == "ready":
        _emit(args, data, f"ready after {format_seconds(outcome.took_s)}")
        return EXIT_OK
    _emit(args, data, f"failed after {format_seconds(outcome.took_s)}: {data['error']}")
    return EXIT_FAILED


class _StartExporter:
    """`start --wait` to the textfile collector: capture progress while starting (at most once a second, on a
    change of 5 % or more), then the phases and time to ready, or a failure by its kind."""

    def __init__(self, directory, url: str) -> None:
        self.directory, self.url = directory, url
        self.shown: float | None = None
        self.shown_at = 0.0

    def progress(self, startup_state) -> None:
        from specmon.textfile import STARTUP_CAPTURE_PROGRESS_RATIO, capture_ratio, export, server_label

        ratio = capture_ratio(startup_state)
        if self.directory is None or ratio is None or time.monotonic() - self.shown_at < 1.0:
            return
        if self.shown is not None and abs(ratio - self.shown) < 0.05:
            return
        self.shown, self.shown_at = ratio, time.monotonic()
        export(self.directory, _note,
               set_=[(STARTUP_CAPTURE_PROGRESS_RATIO, {"server": server_label(self.url)}, ratio)])

    def finished(self, preset: str, outcome) -> None:
        from specmon.textfile import (
            STARTUP_CAPTURE_PROGRESS_RATIO,
            STARTUP_FAILURES,
            export,
            server_label,
            startup_samples,
        )

        if self.directory is None:
            return
        server = server_label(self.url)
        if outcome.state == "ready":
            samples = startup_samples(self.url, preset, outcome.startup, outcome.took_s,
                                      with_phases=not _exports_startup_phases(self.url))
            export(self.directory, _note, set_=samples)
            return
        error = (outcome.startup or {}).get("error") or {}
        reason = error.get("kind") if isinstance(error, dict) and error.get("kind") else outcome.state
        export(self.directory, _note, add=[(STARTUP_FAILURES, {"server": server, "reason": reason}, 1.0)],
               drop=[(STARTUP_CAPTURE_PROGRESS_RATIO, {"server": server})])


def _exports_startup_phases(url: str) -> bool:
    """Whether the server's /metrics already has SGLang's own `sglang:startup_time_seconds` (0.5.17+)."""
    from specmon.http.blocking import BlockingFetcher
    from specmon.http.errors import HttpError
    from specmon.serving.client import MAX_METRICS_BYTES

    try:
        with BlockingFetcher(connect_timeout_s=2.0) as fetcher:
            answer = fetcher.fetch("GET", url.rstrip("/") + "/metrics", limit=MAX_METRICS_BYTES, deadline_s=2.0)
    except HttpError:
        return False
    return answer.status_code == 200 and STARTUP_TIME_SECONDS.encode() in answer.content


# --------------------------------------------------------------------------------------------------- ps


def _format_ps(inventory) -> str:
    if not inventory.servers:
        return "no servers (none launched by specmon, no SGLang server running on this host)"
    rows = [("ID", "PRESET", "PID", "URL", "STATE", "BY", "GPU MiB", "STARTED", "LOG")]
    for s in inventory.servers:
        rows.append(
            (
                s.id,
                s.preset or "-",
                str(s.pid),
                s.url,
                "alive" if s.alive else "dead",
                "specmon" if s.launched_by_specmon else ("orphan" if s.orphan else (s.user or "?")),
                "-" if s.gpu_memory_mib is None else f"{s.gpu_memory_mib:.0f}",
                format_seconds(time.time() - s.started_at) + " ago" if s.started_at else "-",
                s.log or "-",
            )
        )
    return "\n".join(aligned_rows(rows))


def run_ps(args: argparse.Namespace, also_listed: Mapping[str, Callable[[], Sequence[Listed]]] | None = None) -> int:
    """`specmon ps`'s servers: those specmon launched and other SGLang servers on this host; `--alive` only those
    running, `--prune` removes the records of servers that are gone. `also_listed` adds, under each key, what else
    is listed after them (`specmon.ps` adds the sweeps left unfinished)."""
    from specmon.oncall import state
    from specmon.oncall.discovery import find_servers

    inventory = find_servers(with_gpus=not getattr(args, "prometheus_sd", False))
    for problem in inventory.problems:
        _note(f"ignored state file {problem}")
    if getattr(args, "prometheus_sd", False):
        groups, refused = prometheus_sd(inventory)
        for refusal in refused:
            _note(f"left out of the file_sd targets: {refusal}")
        print(strict_json(groups, indent=2))
        return EXIT_OK
    pruned = []
    if getattr(args, "prune", False):
        for server in inventory.servers:
            if server.record is not None and not server.alive:
                state.remove(server.record)
                pruned.append(server.id)
        inventory.servers = [s for s in inventory.servers if s.id not in pruned]
    dead = [s for s in inventory.servers if not s.alive]
    if getattr(args, "alive", False):
        inventory.servers = [s for s in inventory.servers if s.alive]
    listed = {key: list(read()) for key, read in (also_listed or {}).items()}
    data = inventory.to_json() | {key: [item.to_json() for item in items] for key, items in listed.items()}
    text = "\n".join([_format_ps(inventory), *(item.line() for items in listed.values() for item in items)])
    if args.prune:
        data["pruned"] = pruned
        text += f"\nremoved the records of {len(pruned)} server(s) that are gone" + (
            f": {', '.join(pruned)}" if pruned else "")
    elif dead and not args.alive:
        text += f"\n{len(dead)} of these are gone: `specmon ps --alive` hides them, `specmon ps --prune` removes them"
    _emit(args, data, text)
    return EXIT_OK


class Listed(Protocol):
    """Something `ps` lists after the servers: a line of text and its JSON."""

    def line(self) -> str: ...

    def to_json(self) -> dict[str, Any]: ...


def prometheus_sd(inventory) -> tuple[list[dict[str, Any]], list[str]]:
    """Prometheus file_sd groups for the live servers specmon launched: one target each, labelled with
    `server` (its id), `preset` and `role` (the preset's --disaggregation-mode, else unified); and, each in one
    line, the servers left out because their URL is no plain `host:port` target (`urls.address_of`: a path,
    a query, a user:password@, a newline), which Prometheus would refuse or scrape wrong."""
    from specmon.launch.presets import load_presets
    from specmon.urls import UrlRefused, address_of

    presets = load_presets().presets
    groups, refused = [], []
    for server in inventory.servers:
        if not (server.alive and server.launched_by_specmon):
            continue
        try:
            target = address_of(server.url, what=f"server {server.id}'s url")
        except UrlRefused as exc:
            refused.append(str(exc))
            continue
        preset = presets.get(server.preset) if server.preset else None
        role = str(preset.args.get("disaggregation-mode", "unified")) if preset is not None else "unified"
        groups.append({"targets": [target],
                       "labels": {"server": server.id, "preset": server.preset or "none",
                                  "role": "unified" if role in ("null", "None") else role}})
    return groups, refused


# ------------------------------------------------------------------------------------------------- stop


def pick_server(inventory, key: str | None, what: str, how_to_name: str):
    """The server `key` names, else the one running server specmon launched (`discovery.pick_server`), and the
    line on the servers it left alone (`discovery.not_launched_note`) when it picked none. UsageError otherwise."""
    from specmon.oncall.discovery import NotPicked, not_launched_note
    from specmon.oncall.discovery import pick_server as pick

    try:
        server = pick(inventory, key, what, how_to_name)
    except NotPicked as exc:
        raise UsageError(str(exc)) from None
    return server, None if server is not None else not_launched_note(inventory, how_to_name)


def _export_stop(args: argparse.Namespace, server, result) -> None:
    """GPU memory left over by the stopped server (processes not killed) to the textfile collector."""
    from specmon.textfile import (
        LEFTOVER_GPU_MEMORY_BYTES,
        STARTUP_CAPTURE_PROGRESS_RATIO,
        export,
        server_label,
        textfile_dir,
    )

    label = {"server": server_label(server.url)}
    left_mib = sum(x.used_mib or 0.0 for x in result.leftovers if not x.killed)
    update: dict[str, Any] = {"drop": [(STARTUP_CAPTURE_PROGRESS_RATIO, label)]}
    if left_mib > 0:
        update["set_"] = [(LEFTOVER_GPU_MEMORY_BYTES, label, left_mib * 1024 * 1024)]
    else:
        update["drop"].append((LEFTOVER_GPU_MEMORY_BYTES, label))
    export(textfile_dir(getattr(args, "textfile_dir", None)), _note, **update)


def _describe(server) -> str:
    from specmon.oncall.stopper import describe

    return describe(server)


def run_stop(args: argparse.Namespace) -> int:
    """`specmon stop [ID|PID]`: asks first; SIGTERM, SIGKILL after a timeout; GPUs and port free; leftovers."""
    from specmon.oncall.discovery import find_servers
    from specmon.oncall.stopper import StopRefused, kill_leftovers, stop_server

    server, left_alone = pick_server(find_servers(with_gpus=False), args.server, "stop", "specmon stop {pid}")
    if server is None:
        raise UsageError(f"nothing stopped: no server specmon launched is running; {left_alone}" if left_alone
                         else "no running server (see `specmon ps`)")
    if server.alive and not confirm(f"Stop {_describe(server)}? It may be serving traffic.", args.yes):
        _emit(args, {"id": server.id, "stopped": False, "error": "not confirmed"}, "not stopped")
        return EXIT_FAILED
    try:
        result = stop_server(server, timeout=args.timeout)
    except StopRefused as exc:
        _emit(args, {"id": server.id, "stopped": False, "error": str(exc)}, f"not stopped: {exc}")
        return EXIT_FAILED
    lines = [result.text(server)]
    killable = [x for x in result.leftovers if x.killable]
    if killable and (
        args.yes
        or (
            not args.json
            and sys.stdin.isatty()
            and confirm(
                "Kill the leftovers " + ", ".join(str(x.pid) for x in killable) + " (SIGKILL, by pid)?", False
            )
        )
    ):
        kill_leftovers(killable)
        lines.extend(
            f"  killed pid {x.pid}" if x.killed else f"  could not kill pid {x.pid}" for x in killable
        )
    _emit(args, result.to_json(), "\n".join(lines))
    _export_stop(args, server, result)
    return EXIT_OK if result.ok else EXIT_FAILED


# ----------------------------------------------------------------------------------------------- switch


def _switch_text(report) -> str:
    lines = [f"switch {report.from_ or '(nothing running)'} -> {report.to}: {report.state}"]
    lines.extend(
        f"  {s['name']:<10} {format_seconds(s['took_s']) or '-':>8}"
        + (f"  {s['status']}" if s.get("status") else "")
        for s in report.steps
    )
    if report.error:
        lines.append(f"  error: {report.error}")
    if report.sanity:
        now, before, change = report.sanity, report.before or {}, report.change_pct
        lines.append(f"  before ({_served_before(report)}) -> after ({report.to}, sanity run):")
        for key, label in (("decode_tok_s", "decode tok/s"), ("accept_length", "accept length")):
            row = f"  {label:<14} {_num(before.get(key)):>8} -> {_num(now.get(key)):>8}"
            if change.get(key) is not None:
                row += f"  ({change[key]:+.1f}%)"
            lines.append(row)
        live = before.get("live") or {}
        if live.get("last_gen_tok_s") is not None or live.get("accept_length") is not None:
            lines.append(f"  the old server's own figures: last decode window {_num(live.get('last_gen_tok_s'))} "
                         f"tok/s, acceptance {_num(live.get('accept_length'))}")
    lines.extend(f"  ALERT: {a}" for a in report.alerts)
    lines.extend(f"  note: {n}" for n in report.notes)
    return "\n".join(lines)


def _served_before(report) -> str:
    before = report.before
    if not before:
        return "nothing served"
    if before.get("run_id"):
        return f"{before.get('preset')}, its run {before['run_id']}"
    return f"{before.get('preset') or 'the old server'}, no stored run: its live figures; `specmon bench` stores one"


def _num(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def run_switch(args: argparse.Namespace) -> int:
    """`specmon switch PRESET`: replace the running server, then compare a sanity benchmark with the last."""
    from specmon.oncall.discovery import find_servers
    from specmon.oncall.switch import switch
    from specmon.serving.client import resolve_api_key

    preset = _load_preset(args, args.preset)
    resolve_api_key(None)  # the sanity run's key: one that cannot be sent is refused before a server is touched
    inventory = find_servers(with_gpus=False)
    naming = f"specmon switch {preset.name} --from {{pid}}"
    server, left_alone = pick_server(inventory, args.server, "switch", naming)
    if left_alone:
        _note(left_alone)
    if server is not None:
        why = server.why_not_signalable()
        if why:
            _emit(
                args,
                {"from": server.id, "to": preset.name, "state": "failed", "error": why},
                f"not switched: {why}",
            )
            return EXIT_FAILED
        if server.alive and not confirm(f"Stop {_describe(server)} and start {preset.name}?", args.yes):
            _emit(
                args,
                {"from": server.id, "to": preset.name, "state": "failed", "error": "not confirmed"},
                "not switched",
            )
            return EXIT_FAILED

    def progress(name: str, status: str, took_s: float | None) -> None:
        if status == "running":
            print(f"  {name}…", file=sys.stderr, flush=True)
        elif took_s is not None:
            print(f"  {name} {status} ({format_seconds(took_s)})", file=sys.stderr, flush=True)

    interrupted = threading.Event()

    def stop_after_step() -> None:  # in a signal handler: os.write, for a print may be under way on stderr
        os.write(sys.stderr.fileno(), b"specmon: Ctrl+C: stopping after the step under way, leaving the servers as "
                 b"they are (Ctrl+C again: at once)\n")
        interrupted.set()

    with exits.first_interrupt_calls(stop_after_step):
        report = switch(
            server,
            preset,
            preflight=not args.no_preflight,
            requests=args.requests,
            ready_timeout=args.timeout,
            on_step=progress,
            on_line=_progress_line,
            should_stop=interrupted.is_set,
        )
    if left_alone and args.json:
        report.notes.append(left_alone)
    _emit(args, report.to_json(), _switch_text(report))
    if report.state == "cancelled":
        return exits.EXIT_SIGINT
    return EXIT_OK if report.state == "ready" and not report.alerts else EXIT_FAILED
