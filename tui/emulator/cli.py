"""`specmon emulate <SGLang flags>`: the emulator started like SGLang."""

from __future__ import annotations

import argparse

from specmon.tui.emulator.__main__ import main


def run_emulate(args: argparse.Namespace) -> int:
    """`specmon emulate <SGLang flags>`."""
    return main(list(args.sglang_args or []), module_launch=False)
