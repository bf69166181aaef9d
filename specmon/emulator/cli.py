"""`specmon emulate <SGLang flags>`: the emulator started like SGLang."""

from __future__ import annotations

import argparse
import sys

from specmon.emulator.__main__ import main
from specmon.emulator.launch_args import emulator_help


def run_emulate(args: argparse.Namespace) -> int:
    """`specmon emulate <SGLang flags>`; with --help, the emulator's own flags first, then SGLang's."""
    argv = list(args.sglang_args or [])
    if "-h" in argv or "--help" in argv:
        sys.stdout.write(emulator_help() + "\nSGLang's flags:\n\n")
        sys.stdout.flush()
    return main(argv, module_launch=False)
