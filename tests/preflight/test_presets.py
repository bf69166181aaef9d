"""Presets: loading, schema errors with file and line, extends, precedence, argv, and the built-in presets."""

from __future__ import annotations

import re
import sys
import time
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specmon.launch.presets import (
    DEFAULT_LAUNCHER,
    DEFAULT_PORT,
    BenchSettings,
    Preset,
    load_presets,
    preset_warnings,
)
from specmon.presets import BUILTIN_DIR
from specmon.sglang.bounds import tree_candidates

BUILTIN_NAMES = {"kimi-k25-eagle3", "eagle3-16", "eagle3-10", "eagle3-5", "baseline"}
DEMO_NAMES = {"demo-baseline", "demo-eagle3-16", "demo-eagle3-10", "demo-eagle3-5"}


def write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text)
    return path


def load_only(*dirs: Path, user_dir: Path | None = None):
    return load_presets(dirs, user_dir=user_dir)


# ------------------------------------------------------------------------------------- built-in presets


def test_builtin_presets_load_without_errors():
    loaded = load_presets(user_dir=None)
    assert loaded.errors == []
    assert set(loaded.presets) >= BUILTIN_NAMES | DEMO_NAMES
    for preset in loaded.presets.values():
        assert preset.origin == "built-in"
        assert preset.source.parent == BUILTIN_DIR
        assert preset.description


@pytest.mark.parametrize("name", sorted(BUILTIN_NAMES | DEMO_NAMES))
def test_builtin_speculative_settings_obey_sglang_rules(name):
    """sglang-facts §4.2: all three flags together; a tree offers draft - 1 candidates; topk 1 => draft == steps+1."""
    preset = load_presets(user_dir=None).presets[name]
    spec = preset.speculative
    triple = (spec.num_steps, spec.eagle_topk, spec.num_draft_tokens)
    if "baseline" in name:
        assert not spec.enabled
        assert not any(arg.startswith("--speculative") for arg in preset.argv())
        return
    assert spec.algorithm == "EAGLE3"
    assert all(isinstance(v, int) and v >= 1 for v in triple), triple
    steps, topk, draft = triple
    assert topk == 1 or draft - 1 <= tree_candidates(steps, topk)
    if topk == 1:
        assert draft == steps + 1
    assert spec.problems() == []
    wanted = re.search(r"eagle3-(\d+)$", name)
    if wanted:
        assert spec.effective_draft_tokens == int(wanted.group(1))
        assert f"{wanted.group(1)} draft tokens" in preset.description
        assert f"{steps} steps x topk {topk}" in preset.description


def test_deployment_presets_share_everything_but_speculation():
    loaded = load_presets(user_dir=None).presets
    base = loaded["kimi-k25-eagle3"]
    assert base.args["tp-size"] == 8
    assert base.args["speculative-draft-model-path"]
    assert base.launcher == DEFAULT_LAUNCHER
    for name in ("eagle3-16", "eagle3-10", "eagle3-5", "baseline"):
        preset = loaded[name]
        assert preset.extends == "kimi-k25-eagle3"
        same = {k: v for k, v in preset.args.items() if not k.startswith("speculative-")}
        assert same == {k: v for k, v in base.args.items() if not k.startswith("speculative-")}
        assert preset.bench == base.bench == BenchSettings()


def test_demo_presets_run_the_emulator_with_the_real_presets_flags():
    loaded = load_presets(user_dir=None)
    demos = loaded.demo_presets()
    assert {p.name for p in demos} == DEMO_NAMES
    assert loaded.default_demo().name == "demo-eagle3-10"
    for demo in demos:
        argv = demo.argv()
        assert argv[:3] == [sys.executable, "-m", "specmon.emulator"]
        assert demo.port == 30000
        real = loaded.presets[demo.name.removeprefix("demo-")]
        assert demo.speculative.effective_draft_tokens == real.speculative.effective_draft_tokens
        assert not demo.args["model-path"].startswith("/models")
    assert not any(p.demo for n, p in loaded.presets.items() if n in BUILTIN_NAMES)


def test_builtin_tomls_are_package_data():
    tomls = sorted(p.name for p in BUILTIN_DIR.glob("*.toml"))
    assert {f"{n}.toml" for n in BUILTIN_NAMES | DEMO_NAMES} <= set(tomls)
    installed = "site-packages" in BUILTIN_DIR.parts
    if not installed:  # the editable dev install imports the source tree
        pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
        package_data = pyproject["tool"]["setuptools"]["package-data"]
        assert "*.toml" in package_data["specmon.presets"]
        assert "specmon.presets" in pyproject["tool"]["setuptools"]["packages"]
    else:
        dist = next(metadata.distributions(name="specmon", path=[str(BUILTIN_DIR.parents[1])]))
        shipped = {str(f) for f in dist.files or ()}
        assert {f"specmon/presets/{name}" for name in tomls} <= shipped


# ------------------------------------------------------------------------------------------------- argv


def test_argv_flag_forms_and_python_placeholder():
    preset = Preset(
        name="x",
        launcher=("{python}", "-m", "specmon.emulator"),
        args={
            "model-path": "/m",
            "tp-size": 8,
            "mem-fraction-static": 0.85,
            "trust-remote-code": True,
            "disable-radix-cache": False,
            "cuda-graph-bs": [1, 2, 4],
            "empty-list": [],
            "port": 30000,
        },
    )
    assert preset.argv() == [
        sys.executable, "-m", "specmon.emulator",
        "--model-path", "/m", "--tp-size", "8", "--mem-fraction-static", "0.85", "--trust-remote-code",
        "--cuda-graph-bs", "1", "2", "4", "--port", "30000",
    ]  # fmt: skip
    assert preset.argv(port=31234)[-2:] == ["--port", "31234"]
    assert preset.argv(port=31234).count("--port") == 1
    assert Preset(name="y", args={"a": "v w"}).command_line() == "python3 -m sglang.launch_server --a 'v w'"
    assert Preset(name="y").port == DEFAULT_PORT
    assert Preset(name="y", args={"port": 1234}).port == 1234


# ------------------------------------------------------------------------------------ extends and merging


def test_extends_merges_tables_recursively(tmp_path):
    write(tmp_path, "parent.toml", """
description = "parent"
[server]
launcher = ["python3", "-m", "sglang.launch_server"]
[server.args]
model-path = "/a"
tp-size = 2
flag = true
[server.env]
A = "1"
[bench]
requests = 5
max-new-tokens = 64
""")
    write(tmp_path, "child.toml", """
name = "kid"
extends = "parent"
[server.args]
tp-size = 4
flag = false
extra = "x"
[server.env]
B = "2"
[bench]
requests = 7
temperature = 1
""")
    loaded = load_only(tmp_path)
    assert loaded.errors == []
    kid = loaded.presets["kid"]
    assert kid.description == ""
    assert kid.extends == "parent"
    assert list(kid.args) == ["model-path", "tp-size", "flag", "extra"]
    assert kid.args == {"model-path": "/a", "tp-size": 4, "flag": False, "extra": "x"}
    assert kid.env == {"A": "1", "B": "2"}
    assert kid.bench == BenchSettings(requests=7, max_new_tokens=64, temperature=1.0)
    assert isinstance(kid.bench.temperature, float)
    assert "--flag" not in kid.argv()
    assert loaded.presets["parent"].args["tp-size"] == 2


def test_name_defaults_to_file_stem(tmp_path):
    write(tmp_path, "my-preset.toml", 'description = "d"\n')
    assert "my-preset" in load_only(tmp_path).presets


def test_missing_parent_and_cycles_are_errors_that_hide_nothing(tmp_path):
    write(tmp_path, "ok.toml", 'description = "fine"\n')
    write(tmp_path, "orphan.toml", 'description = "o"\n\nextends = "nowhere"\n')
    write(tmp_path, "a.toml", 'extends = "b"\n')
    write(tmp_path, "b.toml", '# comment\nextends = "a"\n')
    write(tmp_path, "self.toml", 'extends = "self"\n')
    loaded = load_only(tmp_path)
    assert set(loaded.presets) - BUILTIN_NAMES - DEMO_NAMES == {"ok"}
    by_file = {e.path.name: e for e in loaded.errors}
    assert set(by_file) == {"orphan.toml", "a.toml", "b.toml", "self.toml"}
    assert by_file["orphan.toml"].line == 3
    assert "'nowhere', which is not a known preset" in by_file["orphan.toml"].message
    assert by_file["b.toml"].line == 2
    assert any("cycle" in by_file[f].message for f in ("a.toml", "b.toml"))
    assert "extends itself" in by_file["self.toml"].message
    assert str(by_file["orphan.toml"]) == f"{tmp_path / 'orphan.toml'}:3: {by_file['orphan.toml'].message}"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("shape", ["root first", "deepest first", "a cycle", "a same-name chain"])
def test_an_extends_chain_of_any_length_is_bounded_and_each_preset_past_it_is_one_error(tmp_path, shape):
    from specmon.launch.presets import MAX_EXTENDS_DEPTH

    count = 2_000
    names = [f"p{i:04d}" if shape != "deepest first" else f"p{count - i:04d}" for i in range(count)]
    if shape == "a same-name chain":  # one preset, overridden in each of 2,000 --presets directories
        dirs = [write(tmp_path / f"d{i:04d}", "same.toml", 'extends = "same"\n' if i else 'description = "x"\n')
                .parent for i in range(count)]
    else:
        for i, name in enumerate(names):
            parent = names[i - 1] if i else (names[-1] if shape == "a cycle" else None)
            write(tmp_path, f"{name}.toml", f'name = "{name}"\n' + (f'extends = "{parent}"\n' if parent else ""))
        dirs = [tmp_path]
    started = time.monotonic()
    loaded = load_only(*dirs)
    assert time.monotonic() - started < 20
    ours = set(loaded.presets) - BUILTIN_NAMES - DEMO_NAMES
    if shape == "a cycle":
        assert not ours and len(loaded.errors) == count
    elif shape == "a same-name chain":
        assert ours == {"same"} and loaded.presets["same"].source.parent == dirs[MAX_EXTENDS_DEPTH - 1]
    else:
        assert ours == set(names[:MAX_EXTENDS_DEPTH])
        assert sorted(e.preset for e in loaded.errors) == sorted(names[MAX_EXTENDS_DEPTH:])
    for error in loaded.errors:
        assert "\n" not in str(error) and len(error.message) < 200, error
    assert any(f"more than {MAX_EXTENDS_DEPTH} presets" in e.message for e in loaded.errors)


# --------------------------------------------------------------------------------------------- precedence


def test_user_dir_overrides_builtin_and_extra_dir_overrides_user(tmp_path):
    user, extra = tmp_path / "user", tmp_path / "extra"
    # A preset may extend the one it replaces: here the built-in eagle3-10 with a different port.
    write(user, "eagle3-10.toml", 'description = "mine"\nextends = "eagle3-10"\n[server.args]\nport = 31000\n')
    write(user, "baseline.toml", 'description = "user baseline"\n')
    write(extra, "baseline.toml", 'description = "extra baseline"\n')
    loaded = load_presets([extra], user_dir=user)
    assert loaded.errors == []
    mine = loaded.presets["eagle3-10"]
    assert (mine.origin, mine.source, mine.overrides) == ("user", user / "eagle3-10.toml", BUILTIN_DIR / "eagle3-10.toml")
    assert mine.port == 31000
    assert mine.speculative.num_draft_tokens == 10
    # demo-eagle3-10 extends eagle3-10, so it now follows the user's version.
    assert loaded.presets["demo-eagle3-10"].args["speculative-num-steps"] == 9
    base = loaded.presets["baseline"]
    assert (base.origin, base.description, base.overrides) == ("--presets", "extra baseline", user / "baseline.toml")
    assert base.args == {}


def test_bad_override_does_not_hide_the_builtin(tmp_path):
    write(tmp_path, "eagle3-5.toml", '[server.args]\ntp-size = "8"\nspeculative-num-steps = {a = 1}\n')
    loaded = load_only(tmp_path)
    assert [(e.path.name, e.line) for e in loaded.errors] == [("eagle3-5.toml", 3)]
    assert loaded.presets["eagle3-5"].origin == "built-in"


def test_duplicate_name_in_one_directory_and_missing_directory(tmp_path):
    write(tmp_path, "a.toml", 'name = "same"\n')
    write(tmp_path, "b.toml", 'description = "b"\nname = "same"\n')
    loaded = load_presets([tmp_path, tmp_path / "nope"], user_dir=tmp_path / "also-nope")
    assert loaded.presets["same"].source.name == "a.toml"
    errors = [(e.path, e.line) for e in loaded.errors]
    assert errors == [(tmp_path / "b.toml", 2), (tmp_path / "nope", None)]
    assert "already used by" in loaded.errors[0].message


# ------------------------------------------------------------------------------------------ schema errors


BAD_FILES = [
    ('description = "x"\n\n[server.args]\nmodel-path = \n', 4, "invalid TOML"),
    ('description = "x"\nfoo = 1\n', 2, "unknown key 'foo' in the top level"),
    ('description = "x"\n\n[serve.args]\nx = 1\n', 3, "unknown key 'serve'"),
    ('[server]\nlaunch = ["x"]\n', 2, "unknown key 'launch' in [server]"),
    ('[server]\nlauncher = []\n', 2, "non-empty array"),
    ('[server]\nlauncher = "python3 -m x"\n', 2, "must be a non-empty array of non-empty strings, not a string"),
    ('[server.args]\nok = 1\n"--tp-size" = 8\n', 3, "without its leading dashes"),
    ('[server.args]\nok = 1\ncuda-graph-bs = [1, true]\n', 3,
     "'server.args.cuda-graph-bs[1]' must be a string or a number, not a boolean"),
    ('[server.args]\nok = 1\nnested = {a = 1}\n', 3, "not a table"),
    ('[server.args]\napi-key = "sk-123"\n', 2, "secret on the command line"),
    ('[server.args]\nok = 1\nAPI-Key = "sk-123"\n', 3, "secret on the command line"),
    ('[server.args]\nok = 1\nAdmin-Api-Key = "sk-123"\n', 3, "secret on the command line"),
    ('[server.args]\nextra = ["--API-KEY", "sk-123"]\n', 2, "secret on the command line"),
    ('[server.args]\nextra = ["--api-key=sk-123"]\n', 2, "secret on the command line"),
    ('[server.args]\nextra = "--Api_Key=sk-123"\n', 2, "secret on the command line"),
    ('[server]\nlauncher = ["python3", "-m", "sglang.launch_server", "--api-key", "sk"]\n', 2,
     "'server.launcher' would put a secret on the command line"),
    ('[server]\nlauncher = ["sglang", "--Admin-API-Key=sk"]\n', 2, "secret on the command line"),
    ('[server.env]\nNCCL_P2P_DISABLE = 0\n', 2, 'must be a string (quote numbers: "0")'),
    ('[server.env]\n"BAD NAME" = "1"\n', 2, "not a valid environment variable name"),
    ('[bench]\nrequests = 0\n', 2, "'bench.requests' must be at least 1, not 0"),
    ('[bench]\nwarmup = -1\n', 2, "at least 0"),
    ('[bench]\ntemperature = -0.5\n', 2, "at least 0"),
    ('[bench]\nconcurrency = 1.5\n', 2, "must be an integer, not a number"),
    ('[bench]\nrequests = true\n', 2, "not a boolean"),
    ('[bench]\n\nmax_new_tokens = 5\n', 3, "unknown key 'max_new_tokens' in [bench]"),
    ('demo = "yes"\n', 1, "'demo' must be true or false"),
    ('name = "has space"\n', 1, "must be letters"),
    ('bench = {requests = -2}\n', 1, "at least 1"),
    ('server.args.x = {}\n', 1, "not a table"),
]


LONG = 150_000
LONG_LINES = {
    "a bare key": "a" * LONG + " = 1",
    "a quoted key": '"' + "a" * LONG + '" = 1',
    "a table header": "[" + "a" * LONG + "]",
    "a string": 'description = "' + "a" * LONG + '"',
    "escaped quotes, unterminated": 'x = "' + '\\"' * (LONG // 2),
    "quotes": '"' * LONG,
    "triple quotes, unterminated": 'x = """' + "a" * LONG,
    "spaces, then a word": "a" + " " * LONG + "b = 1",
    "dots": "." * LONG,
    "brackets": "[" * LONG,
    "a comment": "# " + "a" * LONG,
    "a long number": "x = " + "1" * LONG,
    "an array": "x = [" + "1," * (LONG // 2) + "]",
    "a long flag": "[server.args]\n" + "a" * LONG + "_b = 1",
    "a long env name": "[server.env]\n" + '"' + "a b" * (LONG // 3) + '" = "1"',
    "a long port": '[server.args]\nport = "' + "9" * LONG + '"',
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shape", list(LONG_LINES))
def test_a_bad_preset_with_a_150k_character_line_is_said_fast_and_short(tmp_path, shape):
    write(tmp_path, "good.toml", 'description = "good"\n')
    for error in ("bogus = 1", "[bench]\nrequests = 0", "[server.args]\nport = 'x'"):
        write(tmp_path, "bad.toml", f'name = "bad"\n{LONG_LINES[shape]}\n{error}\n')
        started = time.monotonic()
        loaded = load_only(tmp_path)
        took = time.monotonic() - started
        assert took < 5, (error, took)  # was 20 s and more: quadratic scans of the long line
        assert "good" in loaded.presets and [e.path.name for e in loaded.errors] == ["bad.toml"], loaded.errors
        message = loaded.errors[0].message
        assert len(message) < 300 and "\n" not in message, message[:400]


@pytest.mark.parametrize(("text", "line", "message"), BAD_FILES)
def test_bad_file_gives_one_error_with_file_and_line(tmp_path, text, line, message):
    write(tmp_path, "good.toml", 'description = "good"\n')
    bad = write(tmp_path, "bad.toml", text)
    loaded = load_only(tmp_path)
    assert "good" in loaded.presets
    assert "bad" not in loaded.presets
    assert len(loaded.errors) == 1
    error = loaded.errors[0]
    assert (error.path, error.line) == (bad, line)
    assert message in error.message
    assert str(error).startswith(f"{bad}:{line}: ")


def test_unreadable_utf8_is_an_error(tmp_path):
    (tmp_path / "bin.toml").write_bytes(b"description = \"\xff\xfe\"\n")
    loaded = load_only(tmp_path)
    assert [e.path.name for e in loaded.errors] == ["bin.toml"]


FRAGMENTS = [
    'description = "d"', 'extends = "baseline"', 'extends = "x"', 'name = "x"', "demo = true", "[server]",
    'launcher = ["{python}", "-m", "m"]', "launcher = []", "[server.args]", "tp-size = 8", 'a = "b"',
    "flag = false", "bs = [1, 2]", "[server.env]", 'K = "v"', "K = 1", "[bench]", "requests = 3",
    "requests = -1", "temperature = 0.5", "[bogus]", "x = {y = 1}", "= broken", '"q" = [', "",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(st.lists(st.sampled_from(FRAGMENTS), max_size=8), min_size=1, max_size=3))
def test_any_mix_of_files_never_raises_and_errors_point_into_the_file(tmp_path_factory, files):
    directory = tmp_path_factory.mktemp("fuzz")
    for i, lines in enumerate(files):
        write(directory, f"p{i}.toml", "\n".join(lines) + "\n")
    loaded = load_only(directory)
    assert len(loaded.presets) + len(loaded.errors) >= 1
    for error in loaded.errors:
        assert error.path.parent == directory
        n_lines = len(error.path.read_text().splitlines())
        assert error.line is None or 1 <= error.line <= max(1, n_lines)
    for preset in loaded.presets.values():
        assert preset.argv()[0]


# ------------------------------------------------------------- built-in flags against SGLang 0.5.16's list


@pytest.mark.parametrize("name", sorted(BUILTIN_NAMES | DEMO_NAMES))
def test_builtin_flags_are_sglang_flags_and_keep_their_draft_tokens(name):
    """The emulator parses flags with SGLang 0.5.16's own flag list and speculative rules."""
    from specmon.emulator.launch_args import parse_launch_args

    preset = load_presets(user_dir=None).presets[name]
    launch = parse_launch_args(preset.argv()[len(preset.launcher) :])
    assert launch.server_args["tp_size"] == 8
    assert launch.server_args["port"] == 30000
    assert launch.server_args["speculative_num_draft_tokens"] == preset.speculative.effective_draft_tokens
    assert not [text for _, text in launch.pre_log if "is adjusted to" in text]


def test_the_emulator_check_sees_a_rewritten_draft_token_count():
    from specmon.emulator.launch_args import parse_launch_args

    sloppy = load_presets(user_dir=None).presets["eagle3-16"]
    sloppy = Preset(name="sloppy", args={**sloppy.args, "speculative-num-steps": 1})
    launch = parse_launch_args(sloppy.argv()[len(sloppy.launcher) :])
    assert launch.server_args["speculative_num_draft_tokens"] == 2 == sloppy.speculative.effective_draft_tokens
    assert [text for _, text in launch.pre_log if "is adjusted to" in text]


def test_a_flag_sglang_does_not_know_is_caught_by_that_check():
    from specmon.emulator.launch_args import parse_launch_args

    preset = Preset(name="typo", args={"model-path": "/m", "num-speculative-tokens": 16})
    with pytest.raises(SystemExit) as exited:
        parse_launch_args(preset.argv()[len(preset.launcher) :])
    assert exited.value.code == 2


@pytest.mark.parametrize(
    ("host", "warned"),
    [(None, False), ("127.0.0.1", False), ("127.0.0.2", False), ("localhost", False), ("::1", False),
     ("[::1]", False), ("0.0.0.0", True), ("::", True), ("10.1.2.3", True), ("myhost.example", True)],
)
def test_a_non_loopback_host_is_warned_about(host, warned):
    preset = Preset(name="p", args={"host": host} if host else {})
    assert preset.binds_non_loopback is warned
    warnings = preset_warnings(preset)
    assert bool(warnings) is warned
    if warned:
        assert warnings[0].startswith(f"the server binds {host} (--host)")
