"""Handlers of `specmon monitor` and `specmon demo` (the only commands that import Textual)."""

from __future__ import annotations

import argparse
import atexit
import errno
import functools
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from specmon import exits
from specmon.text import printable

if TYPE_CHECKING:
    from specmon.gpu.sampler import GpuSource
    from specmon.launch.presets import Preset

HEADLESS_SIZE = (200, 50)
HEADLESS_SIZE_ENV = "SPECMON_HEADLESS_SIZE"
"""Environment variable overriding the headless terminal size, e.g. ``80x24``."""


def headless_size() -> tuple[int, int]:
    """The terminal size of a ``--headless`` run: $SPECMON_HEADLESS_SIZE (``WxH``) or 200x50."""
    value = os.environ.get(HEADLESS_SIZE_ENV, "")
    try:
        width, height = (int(part) for part in value.lower().split("x"))
    except ValueError:
        return HEADLESS_SIZE
    return (width, height) if width >= 20 and height >= 10 else HEADLESS_SIZE


def demo_log_dir() -> Path:
    """The private directory for demo server logs: ``<state dir>/demo`` (mode 0700, as are the parents it
    creates). Raises OSError when it cannot be made or written."""
    from specmon.private_files import make_private_dir, state_dir

    directory = make_private_dir(state_dir() / "demo")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, "not writable", str(directory))
    return directory


def _run_app(config, args: argparse.Namespace) -> int:
    from specmon.tui.app import SpecmonApp
    from specmon.view.state import parse_milestone_specs

    if args.headless:
        config.exit_after_s = args.duration
        config.screenshot_path = args.screenshot
        try:
            config.screenshots_at = parse_milestone_specs(args.screenshot_at)
        except ValueError as exc:
            raise SystemExit(f"specmon: {exc}") from None
        config.exit_on = frozenset(e.strip() for e in args.exit_on.split(",") if e.strip())
    app = SpecmonApp(config)
    if args.headless:
        app.run(headless=True, size=headless_size())
    else:
        app.run()
    exits.install()  # the app's loop handlers are gone (SIGTERM back to its default): 130/143 again, to the end
    return app.return_code or 0


def _followable(path: str) -> bool:
    """Whether ``path`` can be followed as a log (a regular file, or not there yet); says why not on stderr."""
    from specmon.logs.follower import check_followable

    try:
        check_followable(path)
    except OSError as exc:
        print(f"specmon: {printable(path)}: {exc.strerror or exc}", file=sys.stderr)
        return False
    return True


def run_monitor(args: argparse.Namespace) -> int:
    """`specmon monitor --url URL [--log PATH]`: attach to a server someone else started."""
    from specmon.gpu.nvml import NvmlSource
    from specmon.http.headers import HeaderRefused
    from specmon.serving.client import resolve_api_key
    from specmon.tui.config import AppConfig
    from specmon.urls import base_url

    try:
        api_key = resolve_api_key(None)
    except HeaderRefused as exc:
        print(f"specmon: {printable(str(exc))}", file=sys.stderr)
        return 2
    found = None
    sweep_lines: list[str] = []
    if getattr(args, "web", False):
        if not args.url:
            print("specmon: --web needs --url", file=sys.stderr)
            return 2
        from specmon.tui.web import serve

        return serve(args)
    if not args.url:
        from specmon.sweep.status import unfinished_sweeps

        sweep_lines = [sweep.line() for sweep in unfinished_sweeps()]
        found = _attach_target(args)
        if found is None:
            for line in sweep_lines:  # a sweep cut mid-switch may be why nothing runs
                print(f"specmon: {line}", file=sys.stderr)
            return 2
        args.url, args.log = found.url, args.log or found.log
        if not args.preset and found.preset:
            from specmon.launch.presets import load_presets

            args.preset = found.preset if load_presets(args.presets).get(found.preset) else None
        print(f"specmon: attaching to {found.id} ({found.preset or 'pid ' + str(found.pid)}) at {found.url}",
              file=sys.stderr)  # fmt: skip
        for line in sweep_lines:
            print(f"specmon: {line}", file=sys.stderr)
    if args.log and not os.path.exists(args.log):
        print(f"specmon: note: {printable(args.log)} does not exist yet; it will be followed once it appears",
              file=sys.stderr)
    if args.log and not _followable(args.log):
        return 2
    preset = None
    presets = {}
    if args.preset or found is not None:
        from specmon.launch.presets import load_presets, require_preset

        preset_set = load_presets(args.presets)
        preset = require_preset(preset_set, args.preset) if args.preset else None
        if found is not None:  # offered for switching: those that run what it runs (the emulator, or SGLang)
            presets = {n: p for n, p in preset_set.presets.items() if p.demo == found.emulator}
    gpu_source: GpuSource = NvmlSource()
    if found is not None and found.gpu_url:
        from specmon.gpu.demo import DemoGpuSource

        gpu_source = DemoGpuSource(found.gpu_url)
    from specmon.traffic.cli import check_by
    from specmon.traffic.locate import record_paths, records_of

    traffic_paths = list(getattr(args, "traffic", None) or [])
    if not traffic_paths and found is not None and found.launched_by_specmon and found.argv:
        traffic_paths = records_of(found)
    elif not traffic_paths and preset is not None:
        traffic_paths = record_paths(preset.argv(), args.log)
    elif not traffic_paths and args.url:  # a server of yours named by its URL (a fleet drill-down's way)
        from specmon.traffic.locate import launched_at

        traffic_paths = launched_at(args.url)
    config = AppConfig(
        url=base_url(args.url),
        log_path=args.log,
        preset=preset,
        presets=presets,
        gpu_source=gpu_source,
        api_key=api_key,
        emulator=bool(found and found.emulator),
        attached=found,
        read_only=getattr(args, "read_only", False),
        notices=sweep_lines if found is not None else [],
        traffic_paths=traffic_paths,
        traffic_by=check_by(getattr(args, "by", None)),
        traffic_categories=getattr(args, "prompt_categories", None),
    )
    return _run_app(config, args)


def _attach_target(args: argparse.Namespace):
    """The server `specmon ps` finds (asking which on a terminal when several run), or None after saying why."""
    from specmon.oncall.attach import NothingToAttach, ask_on_terminal, choose_server, find_by_key

    try:
        if args.server:
            return find_by_key(args.server)
        return choose_server(ask_on_terminal if sys.stdin.isatty() and not args.headless else None)
    except NothingToAttach as exc:
        print(f"specmon: {exc}", file=sys.stderr)
        return None


def run_demo(args: argparse.Namespace) -> int:
    """`specmon demo`: launch the emulator with a demo preset as a child process and monitor it."""
    from specmon.gpu.demo import DemoGpuSource
    from specmon.launch.presets import load_presets, require_preset
    from specmon.launch.supervisor import ServerSupervisor, SupervisorError, log_stem
    from specmon.oncall.launcher import with_speed
    from specmon.ports import free_port_pair
    from specmon.traffic.cli import check_by
    from specmon.tui.config import AppConfig

    by = check_by(getattr(args, "by", None) or DEMO_TRAFFIC_BY)
    preset_set = load_presets(args.presets)
    records_dir = tempfile.mkdtemp(prefix="specmon-demo-records-")  # private (0700): the emulator's request records
    atexit.register(shutil.rmtree, records_dir, True)
    demos = {p.name: with_records(with_speed(p, args.speed), records_dir) for p in preset_set.demo_presets()}
    if args.preset:
        preset = require_preset(preset_set, args.preset)
        if not preset.demo:
            print(f"specmon demo: preset {printable(preset.name)!r} launches real SGLang "
                  f"({printable(' '.join(preset.launcher))}), not the emulator; demo presets: "
                  f"{', '.join(demos) or 'none'}. To watch a real server, use `specmon monitor`.", file=sys.stderr)
            return 2
        preset = with_records(with_speed(preset, args.speed), records_dir)
    else:
        default = preset_set.default_demo()
        if default is None:
            print("specmon: no demo preset found", file=sys.stderr)
            return 2
        preset = demos[default.name]
    port = free_port_pair()
    try:
        log_path = demo_log_dir() / f"{log_stem(preset.name)}.log"  # named as the switches' logs beside it
    except OSError as exc:
        from specmon.private_files import STATE_DIR_ENV

        print(f"specmon demo: cannot keep the demo's log in {printable(exc.filename or '?')}: "
              f"{exc.strerror or exc} (point ${STATE_DIR_ENV} at a writable directory)", file=sys.stderr)
        return 1
    from specmon.preflight import launch_check

    supervisor = ServerSupervisor(
        preset, log_path, port, preflight=None if getattr(args, "no_preflight", False) else launch_check,
        lifeline=True,
    )  # lifeline: no orphan, whatever ends us
    atexit.register(supervisor.stop)
    exits.install()  # a SIGTERM is SystemExit(143): the finally below stops the server (the app, too)
    try:
        try:
            supervisor.start()
        except SupervisorError as exc:
            print(f"specmon demo: {exc}", file=sys.stderr)
            report = getattr(exc, "report", None)
            if report is not None:
                print(report.format_text(), file=sys.stderr)
            return 1
        config = AppConfig(
            url=f"http://127.0.0.1:{port}",
            log_path=str(log_path),
            preset=preset,
            presets=demos,
            supervisor=supervisor,
            emulator=True,
            gpu_source=DemoGpuSource(f"http://127.0.0.1:{port + 1}/_emulator/gpus"),
            traffic_paths=[records_dir],
            traffic_by=by,
            traffic_categories=getattr(args, "prompt_categories", None),
        )
        return _run_app(config, args)
    finally:
        supervisor.stop()


DEMO_PRODUCTION_RPS = 1
"""The demo emulator's own production-like requests a second (`--emulator-production-traffic`)."""
DEMO_TRAFFIC_BY = "custom_labels.route"
"""The demo's Traffic tab classes by the production requests' route unless --by says otherwise."""


def with_records(preset: Preset, directory: str) -> Preset:
    """A demo preset whose emulator serves its production-like mix and writes SGLang's export records into
    `directory` (the Traffic tab reads them)."""
    import dataclasses

    return dataclasses.replace(preset, args={**preset.args, "export-metrics-to-file": True,
                                             "export-metrics-to-file-dir": directory,
                                             "emulator-production-traffic": DEMO_PRODUCTION_RPS})


def fleet_argv(args: argparse.Namespace) -> list[str]:
    """The `fleet` command line of ``args`` (what to read and how; no app or output flags): the fleet app runs
    it again with `--server NAME` to open one server, and --web runs it per browser tab. Secret files are
    passed by path, never their content."""
    argv = ["fleet", "--prometheus", args.prometheus, "--selector", args.selector, "--server-label",
            args.server_label, "--gpu-selector", args.gpu_selector, "--window", f"{args.window:g}",
            "--interval", f"{args.interval:g}"]
    for flag, value in (("--host-label", args.host_label), ("--bearer-token-file", args.bearer_token_file),
                        ("--basic-auth-file", args.basic_auth_file), ("--ca-file", args.ca_file)):
        if value:
            argv += [flag, value]
    for router in args.router:
        argv += ["--router", router]
    return argv


def run_fleet(args: argparse.Namespace) -> int:
    """`specmon fleet --prometheus URL ...`: the fleet screen (or, with --server NAME, one server's screen)."""
    from specmon.fleet.cli import EXIT_PROMETHEUS, options_from

    options = options_from(args)
    problems = options.problems() + ([] if args.prometheus else ["give --prometheus URL"])
    if problems:
        for problem in problems:
            print(f"specmon fleet: {problem}", file=sys.stderr)
        return EXIT_PROMETHEUS
    argv = fleet_argv(args)
    if args.web:
        from specmon.tui.web import serve

        return serve(args, [sys.executable, "-m", "specmon", *argv, "--read-only"])
    if args.server:
        return _run_fleet_server(args, options)
    from specmon.tui.fleet import FleetApp

    app = FleetApp(options, argv, read_only=args.read_only, exit_after_s=args.duration if args.headless else None,
                   screenshot_path=args.screenshot if args.headless else None)
    if args.headless:
        app.run(headless=True, size=headless_size())
    else:
        app.run()
    exits.install()
    return app.return_code or 0


def _run_fleet_server(args: argparse.Namespace, options) -> int:
    """One server of the fleet in the single-server screen (see `fleet_server_config`)."""
    config = fleet_server_config(args, options)
    return config if isinstance(config, int) else _run_app(config, args)


def fleet_server_config(args: argparse.Namespace, options):
    """The single-server app's AppConfig for `fleet --server NAME`: as `monitor --url` when the server answers
    from here, else its Live view fed from Prometheus and its GPUs from DCGM (read-only: no switching, no
    benchmarks); an exit code, after saying why, when Prometheus cannot say or has no such server."""
    import asyncio

    from specmon.fleet.cli import EXIT_PROMETHEUS, snapshot_once
    from specmon.fleet.drill import PromLiveSampler, reachable_url
    from specmon.gpu.dcgm import DcgmGpuSource
    from specmon.gpu.nvml import NvmlSource
    from specmon.tui.config import AppConfig

    print(f"specmon fleet: {printable(args.server)}: reading its row from Prometheus…", file=sys.stderr, flush=True)
    snapshot = asyncio.run(snapshot_once(options, records={}, history=False))
    if snapshot.error:
        print(f"specmon fleet: {printable(snapshot.error)}", file=sys.stderr)
        return EXIT_PROMETHEUS
    row = next((r for r in snapshot.rows if r.server == args.server), None)
    if row is None:
        print(f"specmon fleet: no server {printable(args.server)!r} in Prometheus (see `specmon fleet --once`)",
              file=sys.stderr)
        return EXIT_PROMETHEUS
    dcgm = DcgmGpuSource(functools.partial(_dcgm_series, options, row.host))
    print(f"specmon fleet: {printable(args.server)}: asking its address whether it answers from here…",
          file=sys.stderr, flush=True)
    url, notes = reachable_url(row.targets)
    for note in notes:
        print(f"specmon fleet: {printable(args.server)}: {printable(note)}", file=sys.stderr)
    if url is not None:
        from specmon.ports import is_loopback_host
        from specmon.traffic.locate import launched_at

        local = is_loopback_host(row.host or "")  # its request records, when it is a server of yours on this host
        return AppConfig(url=url, gpu_source=NvmlSource() if local else dcgm, read_only=True,
                         traffic_paths=launched_at(url) if local else [])
    # on this host's clock (the snapshot's is Prometheus'): the drill-down says "last seen N ago" by it
    last_up_at = None if row.last_seen_s is None else time.time() - row.last_seen_s
    config = AppConfig(
        url=f"{options.prometheus} · {args.server}", poll=False, read_only=True, gpu_source=dcgm,
        live_source=lambda monitor: PromLiveSampler(options.client, options.queries, args.server, monitor,
                                                    row=row, last_up_at=last_up_at),
        sanity_check=False, watched_through="Prometheus",
    )
    print(f"specmon fleet: {printable(args.server)} does not answer from here: reading it through Prometheus",
          file=sys.stderr)
    return config


def _dcgm_series(options, host: str | None) -> list:
    """The DCGM series of `host` from Prometheus (on the GPU sampler's thread)."""
    import asyncio

    from specmon.fleet.tracker import on_host

    if not host:
        return []

    async def read() -> list:
        async with options.client() as client:
            samples = await client.query(options.queries.gpu_series())
        return [(s.labels, s.value) for s in samples if on_host(s.labels, {host}, options.queries.host_label)]

    return asyncio.run(read())
