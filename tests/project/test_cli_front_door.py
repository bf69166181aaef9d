"""One front door for the command line: every option is defined once in specmon/cli.py (a shared one in a parent
parser that every command taking it gets with `parents=`), a preset name from the command line is looked up by one
`require_preset` (an unknown one: one line, exit 2, for every command that takes one), Ctrl+C ends a plain command
with 130 through `main`, and `specmon --version` says the installed version."""

from __future__ import annotations

import argparse
import ast
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections import Counter, defaultdict
from importlib.metadata import version
from pathlib import Path

import pytest

import specmon.cli
from specmon.cli import build_parser, main

CLI_SOURCE = Path(specmon.cli.__file__)
PARSER = build_parser()
SUBPARSERS: dict[str, argparse.ArgumentParser] = next(
    a for a in PARSER._actions if isinstance(a, argparse._SubParsersAction)).choices
# Options whose meaning differs per command (help, default, requiredness): each still has one add_argument call,
# in a function of specmon/cli.py the commands call with their details.
VARIED = {"--url", "--preset", "--server", "--timeout", "--requests", "--window", "--concurrency",
          "--draft-tokens"}


def _defined_in_source() -> Counter[str]:
    """How many add_argument calls in specmon/cli.py and its shared options (cli_options.py) define each option."""
    defined: Counter[str] = Counter()
    sources = CLI_SOURCE.read_text() + "\n" + CLI_SOURCE.with_name("cli_options.py").read_text()
    for node in ast.walk(ast.parse(sources)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("-"):
                    defined[arg.value] += 1
    return defined


def test_no_option_is_defined_twice_in_the_cli():
    defined = _defined_in_source()
    assert defined, "no add_argument call found: the test reads the wrong file"
    twice = {flag: n for flag, n in defined.items() if n > 1}
    assert not twice, f"options defined by more than one add_argument call: {twice}"
    in_parsers = {flag for p in [PARSER, *SUBPARSERS.values()] for a in p._actions for flag in a.option_strings}
    assert in_parsers - {"-h", "--help"} <= set(defined), "an option defined outside specmon/cli.py and cli_options.py"


def test_an_option_several_commands_take_is_one_shared_option():
    actions: dict[str, set[int]] = defaultdict(set)
    commands: dict[str, list[str]] = defaultdict(list)
    for name, parser in SUBPARSERS.items():
        for action in parser._actions:
            for flag in action.option_strings:
                actions[flag].add(id(action))
                commands[flag].append(name)
    shared = {flag for flag, names in commands.items() if len(names) > 1 and flag not in ("-h", "--help")}
    assert {"--json", "--presets", "--yes", "--from", "--api-key-file", "--textfile-dir", "--headless"} <= shared
    copies = {flag: commands[flag] for flag in shared - VARIED if len(actions[flag]) > 1}
    assert not copies, f"options each command defines for itself instead of sharing a parent's: {copies}"


def test_an_option_that_applies_only_with_another_is_in_that_ones_group():
    for name, parser in SUBPARSERS.items():
        for group in parser._action_groups:
            for action in group._group_actions:
                said = action.help or ""
                assert not said.startswith("with --"), f"{name} {action.option_strings}: in a group, not '{said}'"
    titles = {g.title for g in SUBPARSERS["monitor"]._action_groups}
    assert {"with --once", "with --web", "with --headless"} <= titles, titles
    once = next(g for g in SUBPARSERS["monitor"]._action_groups if g.title == "with --once")
    assert {"--json", "--window"} <= {f for a in once._group_actions for f in a.option_strings}


def test_results_json_is_format_json():
    assert PARSER.parse_args(["results", "--json"]).json
    assert PARSER.parse_args(["results"]).format == "table"


def test_version_is_the_installed_distributions():
    done = subprocess.run([sys.executable, "-m", "specmon", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"specmon {version('specmon')}\n", done.stdout


UNKNOWN = "no-such-preset"
PRESET_COMMANDS = {
    "check": ["check", UNKNOWN],
    "check --url": ["check", "--url", "http://127.0.0.1:9", "--preset", UNKNOWN],
    "start": ["start", UNKNOWN],
    "switch": ["switch", UNKNOWN],
    "sweep": ["sweep", UNKNOWN],
    "monitor": ["monitor", "--url", "http://127.0.0.1:9", "--preset", UNKNOWN, "--headless"],
    "monitor --once": ["monitor", "--once", "--url", "http://127.0.0.1:9", "--preset", UNKNOWN],
    "demo": ["demo", "--preset", UNKNOWN, "--headless"],
    "bench": ["bench", "--url", "http://127.0.0.1:9", "--preset", UNKNOWN],
    "doctor": ["doctor", "/nonexistent", "--preset", UNKNOWN],
    "fix-draft-keys": ["fix-draft-keys", "/nonexistent", "{tmp}/copy", "--preset", UNKNOWN],
}


def test_every_command_that_takes_a_preset_is_checked_below():
    takes = {name for name, parser in SUBPARSERS.items() for action in parser._actions
             if "--preset" in action.option_strings or action.dest in ("preset", "preset_name", "presets_to_run")}
    assert takes == {argv[0] for argv in PRESET_COMMANDS.values()}


@pytest.fixture
def own_state(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMON_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("SPECMON_API_KEY", raising=False)
    return tmp_path


@pytest.mark.parametrize("name", list(PRESET_COMMANDS))
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_an_unknown_preset_is_one_line_and_exit_2(name, as_json, own_state, capsys):
    argv = [word.replace("{tmp}", str(own_state)) for word in PRESET_COMMANDS[name]]
    takes_json = any("--json" in a.option_strings for a in SUBPARSERS[argv[0]]._actions)
    if as_json and not takes_json:
        pytest.skip(f"{argv[0]} has no --json")
    assert main(argv + (["--json"] if as_json else [])) == 2
    out, err = capsys.readouterr()
    assert err == f"specmon {argv[0]}: no preset named '{UNKNOWN}' (see `specmon presets`)\n", err
    assert (json.loads(out) == {"error": err.split(": ", 1)[1].strip()}) if as_json else out == "", out
    assert not (own_state / "copy").exists()


def _listening() -> tuple[socket.socket, threading.Event]:
    """A loopback port that accepts connections and never answers; the event is set at the first one."""
    listener = socket.create_server(("127.0.0.1", 0))
    asked = threading.Event()

    def accept() -> None:
        held = []
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                break
            held.append(connection)
            asked.set()
        for connection in held:
            connection.close()

    threading.Thread(target=accept, daemon=True).start()
    return listener, asked


@pytest.mark.parametrize("command", ["monitor --once", "gpus --watch"])
def test_ctrl_c_ends_a_plain_command_with_130(command, tmp_path):
    listener, asked = _listening()
    port = listener.getsockname()[1]
    argv = {"monitor --once": ["monitor", "--once", "--url", f"http://127.0.0.1:{port}", "--window", "600"],
            "gpus --watch": ["gpus", "--watch", "0.2", "--json"]}[command]
    env = os.environ | {"SPECMON_STATE_DIR": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    env.pop("SPECMON_API_KEY", None)
    proc = subprocess.Popen([sys.executable, "-m", "specmon", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        if command == "gpus --watch":
            assert proc.stdout.readline(), "no reading before the Ctrl+C"  # under way: one reading printed
        else:
            assert asked.wait(60), "the server was never asked"  # under way: waiting on the server
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        err = proc.stderr.read()
        assert proc.returncode == 130, (proc.returncode, err)
        assert "Traceback" not in err, err
    finally:
        listener.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
