"""Which SGLang a preset's launcher runs: its interpreter, the `sglang` package it sees (found without
importing it: no torch, no GPU), that package's version, flags and rules, or the shipped data for them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from specmon.inputs import InputError, open_regular, parse_json
from specmon.launch.presets import PYTHON_PLACEHOLDER, Preset
from specmon.preflight.report import SGLangInfo
from specmon.sglang.flags import SHIPPED, SOURCE, FlagTable, load_shipped, newest_shipped, read_installed
from specmon.sglang.rules import SGLangRules, load_shipped_rules, read_installed_rules
from specmon.sglang.source import SGLangSourceError

EMULATED_VERSION = "0.5.16"  # the emulator's SGLang (specmon/emulator/launch_args.py)
PROBE_TIMEOUT_S = 15.0
# find_spec of a top-level package finds it without running its __init__; the metadata is the dist-info's.
_PROBE = """
import importlib.metadata, importlib.util, json, sys
spec = importlib.util.find_spec("sglang")
try:
    version = importlib.metadata.version("sglang")
except importlib.metadata.PackageNotFoundError:
    version = None
dirs = list(spec.submodule_search_locations or []) if spec else []
print(json.dumps({"python": sys.executable, "dirs": dirs, "version": version}))
"""
_PYTHON_NAME = re.compile(r"^python[0-9.]*\Z")


@dataclass
class SGLangFacts:
    """The SGLang a preset launches: who runs it, its flag table and its rules."""

    info: SGLangInfo
    table: FlagTable
    rules: SGLangRules
    emulator: bool = False
    missing: str | None = None  # why the launcher would find no sglang at all


def is_emulator(preset: Preset) -> bool:
    """Whether the preset launches specmon's SGLang emulator rather than SGLang: its launcher names it, or it
    passes the emulator's own flags (a wrapper script around it; SGLang would refuse them)."""
    return "specmon.emulator" in preset.launcher or any(key.startswith("emulator-") for key in preset.args)


def launcher_python(launcher: tuple[str, ...], env: dict[str, str]) -> str | None:
    """The interpreter that `launcher` runs: `{python}`, a `python*` on PATH, or a script's shebang."""
    first = launcher[0]
    if first == PYTHON_PLACEHOLDER:
        return sys.executable
    found = first if os.sep in first else shutil.which(first, path=env.get("PATH"))
    if found is None:
        return None
    if _PYTHON_NAME.match(Path(first).name):
        return found
    try:
        with open_regular(found, what="launcher script") as handle:
            line = handle.readline(512)
    except (OSError, InputError):
        return None
    if line.startswith(b"#!"):
        words = line[2:].decode(errors="replace").split()
        if words and Path(words[0]).name == "env" and len(words) > 1:
            return shutil.which(words[1], path=env.get("PATH"))
        return words[0] if words else None
    return None


def probe(python: str, env: dict[str, str]) -> dict:
    """Ask `python` where its `sglang` package is and which version is installed (nothing imported)."""
    done = subprocess.run(  # noqa: S603 - an argv list, never a shell
        [python, "-c", _PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=env,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise OSError(f"{python} failed: {done.stderr.strip().splitlines()[-1:] or done.returncode}")
    return parse_json(done.stdout.strip().splitlines()[-1], where=f"{python}'s answer")


def _shipped(version: str | None, python: str | None, note: str | None) -> SGLangFacts:
    wanted = version or newest_shipped()
    table = load_shipped(wanted)
    rules = load_shipped_rules(wanted)
    notes = [n for n in (note, table.note) if n]
    if version is None:
        notes.append(f"checked against the newest shipped table, SGLang {table.version}")
    info = SGLangInfo(version, python, SHIPPED, None, "; ".join(notes) or None)
    return SGLangFacts(info, table, rules)


def find_sglang(preset: Preset) -> SGLangFacts:
    """The SGLang facts for `preset`: read from the package its launcher sees, else shipped data."""
    if is_emulator(preset):
        facts = _shipped(EMULATED_VERSION, sys.executable, "the SGLang emulator (it emulates SGLang 0.5.16)")
        facts.emulator = True
        return facts
    env = {**os.environ, **preset.env}
    python = launcher_python(preset.launcher, env)
    if python is None:
        return _shipped(None, None, f"cannot tell which Python {preset.launcher[0]!r} runs")
    try:
        found = probe(python, env)
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as error:
        return _shipped(None, python, f"cannot run {python}: {error}")
    version, dirs = found.get("version"), found.get("dirs") or []
    python = found.get("python") or python
    if not dirs:
        facts = _shipped(None, python, f"{python} sees no sglang package")
        facts.missing = f"{python} has no sglang package: the launch fails at once (No module named 'sglang')"
        return facts
    package = Path(dirs[0])
    try:
        table = read_installed(package)
        rules = read_installed_rules(package)
    except SGLangSourceError as error:
        return _shipped(version, python, f"cannot read the source in {package}: {error}")
    version = version or table.version
    info = SGLangInfo(version, python, SOURCE, str(package))
    return SGLangFacts(info, table, rules)
