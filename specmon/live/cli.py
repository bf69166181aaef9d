"""`specmon monitor --once [--window S] [--json]`: one live snapshot printed (no Textual)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from specmon.text import strict_json

if TYPE_CHECKING:
    from specmon.live.paying import CurveFinder

Addendum = Callable[[], tuple[str, Any, list[str]]]
"""What a layer above adds to the snapshot (production traffic): (its JSON key, its value, its text lines)."""


def run_once(args: argparse.Namespace, addenda: Sequence[Addendum] = ()) -> int:
    """Print one snapshot (with the serving configuration's measured curve, given `args.curves`, and each
    addendum); exit 0, or 1 when the server is unreachable or an alert is an error (a stall, acceptance about 1 or
    far below the preset's benchmark), 2 for an unknown preset or an unusable API key."""
    curves: CurveFinder | None = getattr(args, "curves", None)
    from specmon.http.headers import HeaderRefused
    from specmon.live.once import baseline_accept, collect, describe
    from specmon.serving.client import resolve_api_key
    from specmon.text import printable

    try:
        api_key = resolve_api_key(None)
    except HeaderRefused as exc:
        print(f"specmon: {printable(str(exc))}", file=sys.stderr)
        return 2
    asked = preset_name = None
    if args.preset:
        from specmon.launch.presets import load_presets, require_preset

        preset = require_preset(load_presets(args.presets), args.preset)
        asked, preset_name = dict(preset.args), preset.name
    if args.log:
        from specmon.logs.follower import check_followable

        try:
            check_followable(args.log)
        except OSError as exc:
            print(f"specmon: {printable(args.log)}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    window = max(1.0, float(args.window))
    snapshot = asyncio.run(collect(
        args.url, window, log_path=args.log, api_key=api_key, preset=preset_name, asked=asked,
        baseline=baseline_accept(preset_name), curves=curves,
    ))
    added = [addendum() for addendum in addenda]
    if args.json:
        print(strict_json({**snapshot.to_json(), **{key: value for key, value, _ in added}}, indent=2))
    else:
        print(describe(snapshot))
        for _, _, lines in added:
            for line in lines:
                print(printable(line))
    failing = snapshot.state == "unreachable" or any(alert.severity == "error" for alert in snapshot.alerts)
    return 1 if failing else 0
