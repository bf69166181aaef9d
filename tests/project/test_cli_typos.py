"""A mistyped subcommand, flag, choice or preset name: the error says what was probably meant (difflib), and a
subcommand's error is its own, with its own usage (`specmon bench --urll X` shows bench's usage and "did you
mean --url"). Exit 2, one message, never a traceback."""

from __future__ import annotations

import argparse

import pytest

from specmon.cli import build_parser, main

PARSER = build_parser()
SUBPARSERS = next(a for a in PARSER._actions if isinstance(a, argparse._SubParsersAction)).choices
COMMANDS = sorted(name for name in SUBPARSERS if name != "emulate")  # emulate's flags are SGLang's


def _typo(word: str) -> str:
    """`word` with a letter doubled in its middle: no prefix of any flag, so argparse cannot take it."""
    middle = len(word) // 2
    return word[:middle] + word[middle] + word[middle:]


def _fails(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("command", sorted(SUBPARSERS))
def test_a_mistyped_subcommand_is_named(command, capsys):
    err = _fails([_typo(command), "--json"], capsys)
    assert err.startswith("usage: specmon [-h] [--version] COMMAND"), err
    assert f"'{command}'" in err.split("did you mean", 1)[1], err


FLAGS = [(command, flag) for command in COMMANDS for action in SUBPARSERS[command]._actions
         for flag in action.option_strings if flag.startswith("--") and flag != "--help"]


@pytest.mark.parametrize(("command", "flag"), FLAGS, ids=[f"{c} {f}" for c, f in FLAGS])
def test_a_mistyped_flag_is_said_by_its_subcommand_with_what_it_meant(command, flag, capsys):
    err = _fails([command, _typo(flag), "x"], capsys)
    assert err.startswith(f"usage: specmon {command} "), err  # the subcommand's usage, not specmon's
    error = err.strip().splitlines()[-1]
    assert error.startswith(f"specmon {command}: error: ") and _typo(flag) in error, error
    assert "did you mean" in error and flag in error.split("did you mean", 1)[1], error


def test_the_briefs_example_and_flags_argparse_takes_as_they_are(capsys):
    err = _fails(["bench", "--urll", "X"], capsys)
    assert err.startswith("usage: specmon bench ") and "has no --urll (did you mean --url?)" in err, err
    err = _fails(["bench", "--url", "X", "--concurency", "2", "--jsn"], capsys)
    assert "--concurency: did you mean --concurrency?; --jsn: did you mean --json?" in err, err
    err = _fails(["results", "--format", "jsn"], capsys)
    assert "invalid choice: 'jsn'" in err and "(did you mean 'json'?)" in err, err
    err = _fails(["fleet", "rule"], capsys)
    assert "(did you mean 'rules'?)" in err, err
    err = _fails(["ps", "--xyzzy"], capsys)
    assert err.strip().endswith("unrecognized arguments: --xyzzy"), err  # nothing close: nothing made up
    args, extras = PARSER.parse_known_args(["monitor", "--once", "--url", "u", "--window", "-1", "--wind", "5"])
    assert extras == [] and args.window == 5.0  # a negative number and an abbreviation are no typos


PRESET_TYPO = "eagle3-1O"
PRESET_COMMANDS = {
    "check": ["check", PRESET_TYPO],
    "start": ["start", PRESET_TYPO],
    "switch": ["switch", PRESET_TYPO],
    "sweep": ["sweep", "baseline", PRESET_TYPO],
    "monitor --once": ["monitor", "--once", "--url", "http://127.0.0.1:9", "--preset", PRESET_TYPO],
    "monitor": ["monitor", "--url", "http://127.0.0.1:9", "--preset", PRESET_TYPO, "--headless"],
    "demo": ["demo", "--preset", PRESET_TYPO, "--headless"],
    "bench": ["bench", "--url", "http://127.0.0.1:9", "--preset", PRESET_TYPO],
    "check --url": ["check", "--url", "http://127.0.0.1:9", "--preset", PRESET_TYPO],
    "doctor": ["doctor", "/nonexistent", "--preset", PRESET_TYPO],
}


@pytest.mark.parametrize("name", list(PRESET_COMMANDS))
def test_a_mistyped_preset_name_gets_the_close_ones(name, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMON_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert main(PRESET_COMMANDS[name]) in (1, 2)
    err = capsys.readouterr().err
    assert f"no preset named '{PRESET_TYPO}' (did you mean " in err and "'eagle3-10'" in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_a_mistyped_preset_in_a_preset_file_gets_the_close_ones(tmp_path):
    from specmon.launch.presets import load_presets

    (tmp_path / "mine.toml").write_text('extends = "eagle3-1O"\n[servr]\nx = 1\n')
    (tmp_path / "yours.toml").write_text('extends = "eagle3-10"\n[server]\nlanucher = ["x"]\n')
    errors = {e.path.name: e.message for e in load_presets([tmp_path], user_dir=None).errors}
    assert "unknown key 'servr' in the top level (did you mean 'server'?)" in errors["mine.toml"]
    assert "unknown key 'lanucher' in [server] (did you mean 'launcher'?)" in errors["yours.toml"]
    (tmp_path / "mine.toml").write_text('extends = "eagle3-1O"\n')
    errors = {e.path.name: e.message for e in load_presets([tmp_path], user_dir=None).errors}
    assert "extends 'eagle3-1O', which is not a known preset (did you mean " in errors["mine.toml"]
