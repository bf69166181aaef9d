"""`specmon presets`: list every preset with its source and resolved command line, and the bad files."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from specmon.launch.presets import Preset, PresetSet, load_presets, preset_warnings
from specmon.text import printable, strict_json


def run_presets(args: argparse.Namespace) -> int:
    """Print the presets (text or `--json`); exit 1 when any preset file is bad."""
    preset_set = load_presets(getattr(args, "presets", None) or ())
    if getattr(args, "json", False):
        print(strict_json(to_json(preset_set), indent=2))
    else:
        print_presets(preset_set, sys.stdout)
        print_errors(preset_set, sys.stderr)
    return 1 if preset_set.errors else 0


def to_json(preset_set: PresetSet) -> dict:
    return {
        "presets": [preset.to_json() for preset in preset_set.presets.values()],
        "errors": [error.to_json() for error in preset_set.errors],
    }


def print_presets(preset_set: PresetSet, out: TextIO) -> None:
    for i, preset in enumerate(preset_set.presets.values()):
        if i:
            out.write("\n")
        out.write(printable(_describe(preset), newlines=True))


def print_errors(preset_set: PresetSet, err: TextIO) -> None:
    for error in preset_set.errors:
        err.write(f"error: {printable(error)}\n")


def _describe(preset: Preset) -> str:
    title = preset.name + ("  [demo]" if preset.demo else "")
    lines = [title]
    if preset.description:
        lines.append(f"  {preset.description}")
    source = f"  from: {preset.origin} {preset.source}"
    if preset.extends:
        source += f"  (extends {preset.extends})"
    lines.append(source)
    if preset.overrides:
        lines.append(f"  overrides: {preset.overrides}")
    lines.append(f"  command: {preset.command_line()}")
    if preset.env:
        lines.append("  env: " + " ".join(f"{k}={v}" for k, v in preset.display_env().items()))
    lines.extend(f"  warning: {warning}" for warning in preset_warnings(preset))
    return "\n".join(lines) + "\n"
