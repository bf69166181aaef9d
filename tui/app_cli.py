"""Handlers of `specmon monitor` and `specmon demo` (the only commands that import Textual)."""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import socket
import sys
from pathlib import Path

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


def _free_port_pair() -> int:
    """A port P with P and P+1 free on 127.0.0.1 (the emulator serves its GPUs on P+1)."""
    from specmon.tui.supervisor import port_is_free

    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port < 65535 and port_is_free(port + 1):
            return port
    raise RuntimeError("no free port pair on 127.0.0.1")


def demo_log_dir() -> Path:
    """The private directory for demo server logs: ``<user_state_dir>/specmon/demo`` (mode 0700, as are the
    parents it creates)."""
    from platformdirs import user_state_dir
    from specmon.tui.private_files import make_private_dir

    return make_private_dir(Path(user_state_dir("specmon")) / "demo")


MILESTONES = ("capture", "ready", "failed")


def milestone_screenshots(specs: list[str]) -> dict[str, str]:
    """``["ready:/tmp/r.svg", ...]`` as ``{"ready": "/tmp/r.svg"}``; an unknown event is an error."""
    shots = {}
    for spec in specs:
        event, _, path = spec.partition(":")
        if event not in MILESTONES or not path:
            raise SystemExit(f"specmon: --screenshot-at wants EVENT:PATH with EVENT one of {', '.join(MILESTONES)}")
        shots[event] = path
    return shots


def _run_app(config, args: argparse.Namespace) -> int:
    from specmon.tui.app import SpecmonApp

    if args.headless:
        config.exit_after_s = args.duration
        config.screenshot_path = args.screenshot
        config.screenshots_at = milestone_screenshots(args.screenshot_at)
        config.exit_on = frozenset(e.strip() for e in args.exit_on.split(",") if e.strip())
    app = SpecmonApp(config)
    if args.headless:
        app.run(headless=True, size=headless_size())
    else:
        app.run()
    return app.return_code or 0


def _named_preset(preset_set, name: str):
    """The preset called ``name`` in a ``PresetSet``, or None after saying so on stderr."""
    preset = preset_set.get(name)
    if preset is None:
        print(f"specmon: no preset named {name!r} (see `specmon presets`)", file=sys.stderr)
    return preset


def run_monitor(args: argparse.Namespace) -> int:
    """`specmon monitor --url URL [--log PATH]`: attach to a server someone else started."""
    from specmon.tui.app import AppConfig
    from specmon.tui.gpu.nvml import NvmlSource
    from specmon.tui.serving.client import normalize_base_url, resolve_api_key

    if args.log and not os.path.exists(args.log):
        print(f"specmon: note: {args.log} does not exist yet; it will be followed once it appears", file=sys.stderr)
    preset = None
    if args.preset:
        from specmon.tui.presets import load_presets

        preset = _named_preset(load_presets(args.presets), args.preset)
        if preset is None:
            return 2
    config = AppConfig(
        url=normalize_base_url(args.url),
        log_path=args.log,
        preset=preset,
        gpu_source=NvmlSource(),
        api_key=resolve_api_key(None),
    )
    return _run_app(config, args)


def _with_speed(preset, speed: float):
    """The preset with the emulator's speed factor added (only for emulator presets)."""
    import dataclasses

    if speed == 1.0:
        return preset
    return dataclasses.replace(preset, args={**preset.args, "emulator-speed": speed})


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signal.SIGTERM)


def run_demo(args: argparse.Namespace) -> int:
    """`specmon demo`: launch the emulator with a demo preset as a child process and monitor it."""
    from specmon.tui.app import AppConfig
    from specmon.tui.gpu.demo import DemoGpuSource
    from specmon.tui.presets import load_presets
    from specmon.tui.supervisor import ServerSupervisor

    preset_set = load_presets(args.presets)
    demos = {p.name: _with_speed(p, args.speed) for p in preset_set.demo_presets()}
    if args.preset:
        preset = _named_preset(preset_set, args.preset)
        if preset is None:
            return 2
        preset = _with_speed(preset, args.speed)
    else:
        default = preset_set.default_demo()
        if default is None:
            print("specmon: no demo preset found", file=sys.stderr)
            return 2
        preset = demos[default.name]
    port = _free_port_pair()
    log_path = demo_log_dir() / f"{preset.name}-{port}.log"
    supervisor = ServerSupervisor(preset, log_path, port)
    atexit.register(supervisor.stop)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # the finally below stops the server (the app, too)
    try:
        supervisor.start()
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
