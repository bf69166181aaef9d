"""Handlers of `specmon monitor` and `specmon demo` (the only commands that import Textual)."""

from __future__ import annotations

import argparse
import atexit
import functools
import os
import signal
import sys
from pathlib import Path

from specmon import exits
from specmon.text import printable

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
    """The private directory for demo server logs: ``<user_state_dir>/specmon/demo`` (mode 0700, as are the
    parents it creates)."""
    from platformdirs import user_state_dir

    from specmon.private_files import make_private_dir

    return make_private_dir(Path(user_state_dir("specmon")) / "demo")


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


def _named_preset(preset_set, name: str):
    """The preset called ``name`` in a ``PresetSet``, or None after saying so on stderr."""
    preset = preset_set.get(name)
    if preset is None:
        print(f"specmon: no preset named {printable(name)!r} (see `specmon presets`)", file=sys.stderr)
    return preset


def _interrupt_exits_130(handler):
    """A Ctrl-C (SIGINT) that lands before the app installs its own handler ends the command with 130, never by
    the signal itself (the ``finally`` blocks, such as stopping the demo's server, still run)."""

    @functools.wraps(handler)
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except KeyboardInterrupt:
            return 128 + signal.SIGINT

    return run


@_interrupt_exits_130
def run_monitor(args: argparse.Namespace) -> int:
    """`specmon monitor --url URL [--log PATH]`: attach to a server someone else started."""
    from specmon.gpu.nvml import NvmlSource
    from specmon.serving.client import normalize_base_url, resolve_api_key
    from specmon.tui.config import AppConfig

    found = None
    if getattr(args, "web", False):
        if not args.url:
            print("specmon: --web needs --url", file=sys.stderr)
            return 2
        from specmon.tui.web import serve

        return serve(args)
    if not args.url:
        found = _attach_target(args)
        if found is None:
            return 2
        args.url, args.log = found.url, args.log or found.log
        if not args.preset and found.preset:
            from specmon.launch.presets import load_presets

            args.preset = found.preset if load_presets(args.presets).get(found.preset) else None
        print(f"specmon: attaching to {found.id} ({found.preset or 'pid ' + str(found.pid)}) at {found.url}",
              file=sys.stderr)  # fmt: skip
    if args.log and not os.path.exists(args.log):
        print(f"specmon: note: {printable(args.log)} does not exist yet; it will be followed once it appears",
              file=sys.stderr)
    if args.log and not _followable(args.log):
        return 2
    preset = None
    presets = {}
    if args.preset or found is not None:
        from specmon.launch.presets import load_presets

        preset_set = load_presets(args.presets)
        preset = _named_preset(preset_set, args.preset) if args.preset else None
        if args.preset and preset is None:
            return 2
        if found is not None:  # offered for switching: those that run what it runs (the emulator, or SGLang)
            presets = {n: p for n, p in preset_set.presets.items() if p.demo == found.emulator}
    gpu_source = NvmlSource()
    if found is not None and found.gpu_url:
        from specmon.gpu.demo import DemoGpuSource

        gpu_source = DemoGpuSource(found.gpu_url)
    config = AppConfig(
        url=normalize_base_url(args.url),
        log_path=args.log,
        preset=preset,
        presets=presets,
        gpu_source=gpu_source,
        api_key=resolve_api_key(None),
        emulator=bool(found and found.emulator),
        attached=found,
        read_only=getattr(args, "read_only", False),
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


def _with_speed(preset, speed: float):
    """The preset with the emulator's speed factor added (only for emulator presets)."""
    import dataclasses

    if speed == 1.0:
        return preset
    return dataclasses.replace(preset, args={**preset.args, "emulator-speed": speed})


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signal.SIGTERM)


@_interrupt_exits_130
def run_demo(args: argparse.Namespace) -> int:
    """`specmon demo`: launch the emulator with a demo preset as a child process and monitor it."""
    from specmon.gpu.demo import DemoGpuSource
    from specmon.launch.presets import load_presets
    from specmon.launch.supervisor import ServerSupervisor, SupervisorError
    from specmon.ports import free_port_pair
    from specmon.tui.config import AppConfig

    preset_set = load_presets(args.presets)
    demos = {p.name: _with_speed(p, args.speed) for p in preset_set.demo_presets()}
    if args.preset:
        preset = _named_preset(preset_set, args.preset)
        if preset is None:
            return 2
        if not preset.demo:
            print(f"specmon demo: preset {printable(preset.name)!r} launches real SGLang "
                  f"({printable(' '.join(preset.launcher))}), not the emulator; demo presets: "
                  f"{', '.join(demos) or 'none'}. To watch a real server, use `specmon monitor`.", file=sys.stderr)
            return 2
        preset = _with_speed(preset, args.speed)
    else:
        default = preset_set.default_demo()
        if default is None:
            print("specmon: no demo preset found", file=sys.stderr)
            return 2
        preset = demos[default.name]
    port = free_port_pair()
    log_path = demo_log_dir() / f"{preset.name}-{port}.log"
    supervisor = ServerSupervisor(
        preset, log_path, port, preflight=not getattr(args, "no_preflight", False), lifeline=True
    )  # lifeline: no orphan, whatever ends us
    atexit.register(supervisor.stop)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # the finally below stops the server (the app, too)
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
        )
        return _run_app(config, args)
    finally:
        supervisor.stop()
