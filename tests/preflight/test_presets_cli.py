"""`specmon presets` as a real process: listing, sources, the user config dir, bad files, JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def specmon(*args: str, config_home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(config_home)}
    return subprocess.run(
        [sys.executable, "-m", "specmon", *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


@pytest.fixture
def config_home(tmp_path) -> Path:
    home = tmp_path / "config"
    home.mkdir()
    return home


def test_lists_builtins_with_description_source_and_command(config_home):
    done = specmon("presets", config_home=config_home)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    blocks = {block.splitlines()[0]: block for block in done.stdout.strip().split("\n\n")}
    assert {"kimi-k25-eagle3", "eagle3-16", "eagle3-10", "eagle3-5", "baseline", "demo-eagle3-10  [demo]"} <= set(
        blocks
    )
    block = blocks["eagle3-16"]
    assert "16 draft tokens" in block
    assert "from: built-in " in block and "eagle3-16.toml  (extends kimi-k25-eagle3)" in block
    assert "--speculative-num-steps 15 --speculative-eagle-topk 1 --speculative-num-draft-tokens 16" in block
    assert "command: python3 -m sglang.launch_server --model-path /models/Kimi-K2.5" in block
    assert f"command: {sys.executable} -m specmon.emulator" in blocks["demo-eagle3-10  [demo]"]


def test_bad_files_are_reported_by_file_and_line_and_hide_nothing(config_home, tmp_path):
    user_dir = config_home / "specmon" / "presets"
    user_dir.mkdir(parents=True)
    (user_dir / "eagle3-10.toml").write_text('description = "my ten"\nextends = "eagle3-10"\n')
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "broken.toml").write_text('description = "x"\n[server.args]\nmodel-path = "/m\n')
    (extra / "typo.toml").write_text('description = "x"\n[bench]\nrequests = 0\n')
    (extra / "sloppy.toml").write_text(
        'description = "steps 1"\nextends = "eagle3-16"\n[server.args]\nspeculative-num-steps = 1\n'
    )
    done = specmon("presets", "--presets", str(extra), config_home=config_home)
    assert done.returncode == 1
    assert "Traceback" not in done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        f"error: {extra / 'broken.toml'}:3: invalid TOML: Illegal character '\\n'",
        f"error: {extra / 'typo.toml'}:3: 'bench.requests' must be at least 1, not 0",
    ]
    blocks = {block.splitlines()[0]: block for block in done.stdout.strip().split("\n\n")}
    assert "eagle3-5" in blocks
    assert f"from: user {user_dir / 'eagle3-10.toml'}" in blocks["eagle3-10"]
    assert "overrides: " in blocks["eagle3-10"]
    assert "warning: with speculative-eagle-topk 1 SGLang rewrites speculative-num-draft-tokens 16" in blocks["sloppy"]


def test_json_output(config_home, tmp_path):
    (tmp_path / "bad.toml").write_text("[server]\nlauncher = []\n")
    done = specmon("presets", "--json", "--presets", str(tmp_path), config_home=config_home)
    assert done.returncode == 1
    data = json.loads(done.stdout)
    by_name = {p["name"]: p for p in data["presets"]}
    ten = by_name["eagle3-10"]
    assert ten["argv"][:3] == ["python3", "-m", "sglang.launch_server"]
    assert ten["args"]["speculative-num-draft-tokens"] == 10
    assert ten["bench"] == {
        "prompts": "builtin:chat", "requests": 20, "max-new-tokens": 256, "temperature": 0.0, "warmup": 2,
        "concurrency": 1,
    }  # fmt: skip
    assert by_name["demo-baseline"]["demo"] is True
    assert data["errors"] == [
        {"path": str(tmp_path / "bad.toml"), "line": 2, "message": data["errors"][0]["message"], "preset": "bad"}
    ]
    assert "non-empty array" in data["errors"][0]["message"]


def test_presets_command_does_not_import_textual(config_home):
    code = (
        "import sys, io, contextlib\n"
        "from specmon.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    rc = main(['presets'])\n"
        "assert rc == 0, rc\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "XDG_CONFIG_HOME": str(config_home)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_secret_looking_env_values_are_never_printed(config_home, tmp_path):
    (tmp_path / "gated.toml").write_text(
        'extends = "eagle3-5"\n[server.env]\nHF_TOKEN = "hf_s3cr3t_value"\nNCCL_DEBUG = "INFO"\n'
    )
    for extra in ((), ("--json",)):
        done = specmon("presets", "--presets", str(tmp_path), *extra, config_home=config_home)
        assert done.returncode == 0, done.stderr
        assert "hf_s3cr3t_value" not in done.stdout + done.stderr
        assert "HF_TOKEN" in done.stdout and "<hidden>" in done.stdout
    assert json.loads(done.stdout)["presets"][-1]["env"] == {
        "NCCL_P2P_DISABLE": "0", "HF_TOKEN": "<hidden>", "NCCL_DEBUG": "INFO",
    }  # fmt: skip


def test_a_preset_binding_a_non_loopback_host_is_flagged(config_home, tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "open.toml").write_text('extends = "eagle3-10"\n[server.args]\nhost = "0.0.0.0"\n')
    done = specmon("presets", "--presets", str(extra), config_home=config_home)
    blocks = {block.splitlines()[0]: block for block in done.stdout.strip().split("\n\n")}
    assert "warning: the server binds 0.0.0.0 (--host)" in blocks["open"]
    assert "binds" not in blocks["eagle3-10"]
    as_json = json.loads(specmon("presets", "--json", "--presets", str(extra), config_home=config_home).stdout)
    by_name = {p["name"]: p for p in as_json["presets"]}
    assert by_name["open"]["warnings"][0].startswith("the server binds 0.0.0.0")


def test_file_names_and_descriptions_are_printed_without_control_characters(config_home, tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "evil.toml").write_text('description = "looks fine\\u001b[2J\\u001b]0;pwned\\u0007"\n')
    (extra / "bad\x1b[31mname.toml").write_text("description = \n")
    done = specmon("presets", "--presets", str(extra), config_home=config_home)
    assert "\x1b" not in done.stdout + done.stderr and "\x07" not in done.stdout
    assert "looks fine\\x1b[2J\\x1b]0;pwned\\x07" in done.stdout
    assert "bad\\x1b[31mname.toml" in done.stderr
