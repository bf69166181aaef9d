"""`specmon check --url URL [--preset NAME] [--json]`: the handler."""

from __future__ import annotations

import argparse
import asyncio
import sys

from specmon.exits import UsageError
from specmon.http.headers import HeaderRefused
from specmon.serving.check import EXIT_FAILED, format_report
from specmon.serving.check import run_check as check_server
from specmon.serving.client import resolve_api_key
from specmon.text import printable, strict_json

EXIT_USAGE = 2


def run_check(args: argparse.Namespace) -> int:
    """The `specmon check` handler: `check PRESET` (the preflight) or `check --url URL` (a running server)."""
    if (args.preset_name is None) == (args.url is None):
        raise UsageError("give exactly one of PRESET (preflight) and --url URL (a running server)")
    if args.preset_name is not None:
        from specmon.preflight.cli import run_check_preset

        return run_check_preset(args)
    try:
        api_key = resolve_api_key(
            args.api_key_file, warn=lambda line: print(f"specmon check: warning: {printable(line)}", file=sys.stderr))
    except OSError as exc:
        message = f"cannot read the API key file {args.api_key_file}: {exc.strerror}"
        if args.json:
            print(strict_json({"url": args.url, "ok": False, "exit_code": EXIT_FAILED, "error": message}))
        print(f"specmon check: {printable(message)}", file=sys.stderr)
        return EXIT_FAILED
    except HeaderRefused as exc:
        if args.json:
            print(strict_json({"url": args.url, "ok": False, "exit_code": EXIT_USAGE, "error": str(exc)}))
        print(f"specmon check: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    asked = None
    if args.preset:
        from specmon.launch.presets import host_warning, load_presets, require_preset

        preset = require_preset(load_presets(args.presets), args.preset)
        if host_warning(preset):
            print(f"specmon check: warning: preset {preset.name}: {host_warning(preset)}", file=sys.stderr)
        asked = dict(preset.args)
    report = asyncio.run(check_server(args.url, api_key, asked=asked))
    if args.json:
        print(strict_json(report.to_json(), indent=2))
    else:
        print(format_report(report))
    return report.exit_code
