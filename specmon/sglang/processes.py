"""Telling SGLang's processes from a command line: a server's main process (SGLang's launchers, or specmon's
emulator standing in for one) and SGLang's worker processes. Used by the GPU pane (orphaned workers) and `ps`."""

from __future__ import annotations

import os

EMULATOR_MODULES = ("specmon.emulator", "specmon.tui.emulator")
"""`python -m` names of specmon's emulator: today's, and the one before specmon's core left specmon.tui (an
on-call server started by an older specmon can still be running)."""


def is_emulator_cmdline(argv: list[str]) -> bool:
    """specmon's SGLang emulator: `python -m specmon.emulator ...` or `specmon emulate ...` (the console script,
    run directly or by an interpreter)."""
    joined = " ".join(argv)
    if any(module in joined for module in EMULATOR_MODULES):
        return True
    return any(os.path.basename(arg) == "specmon" and argv[i + 1 : i + 2] == ["emulate"]
               for i, arg in enumerate(argv[:3]))


def is_server_cmdline(argv: list[str]) -> bool:
    """An SGLang server's main process (or the emulator standing in for one)."""
    joined = " ".join(argv)
    if "sglang.launch_server" in joined or is_emulator_cmdline(argv):
        return True
    for i, arg in enumerate(argv[:3]):
        if os.path.basename(arg) == "sglang" and "serve" in argv[i + 1 : i + 2]:
            return True
    return False


def is_sglang_child(argv: list[str]) -> bool:
    """One of SGLang's worker processes (setproctitle `sglang::scheduler_TP0` and the like)."""
    return bool(argv) and argv[0].strip().startswith("sglang::")
