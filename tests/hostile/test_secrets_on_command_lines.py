"""Secrets on command lines: a preset may not pass one however it spells the flag (argparse takes `--api-ke` for
`--api-key`), and a command line specmon shows (a port's holder, a GPU's processes) never shows another
process's secret."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specmon.launch.presets import load_presets
from specmon.ports import ProcessInfo, free_port
from specmon.sglang.flags import DATA_DIR

SPELLINGS = ["--api-key", "--api-ke", "--api-k", "--api", "--ap", "--API-KE", "--api_ke", "--admin-api-ke", "--admin",
             "--ad", "--ssl-keyfile-pass", "--ssl-keyfile-password", "--hf-token", "--db-password", "--secret"]


@pytest.mark.parametrize("flag", SPELLINGS)
def test_every_spelling_argparse_would_take_for_a_secret_flag_is_refused_in_a_preset(tmp_path, flag):
    name = flag.lstrip("-")
    for text in (f'[server.args]\n"{name}" = "sk-123"\n',
                 f'[server.args]\nextra = ["{flag}", "sk-123"]\n',
                 f'[server.args]\nextra = "{flag}=sk-123"\n',
                 f'[server]\nlauncher = ["python3", "-m", "sglang.launch_server", "{flag}=sk"]\n'):
        (tmp_path / "p.toml").write_text(text)
        loaded = load_presets([tmp_path])
        assert "p" not in loaded.presets, text
        assert any("secret on the command line" in e.message for e in loaded.errors), (text, loaded.errors)


@pytest.mark.parametrize("flag", ["--ssl-keyfile", "--speculative-num-draft-tokens", "--max-total-tokens",
                                  "--tokenizer-path", "--attention-backend", "--a", "--allow-auto-truncate",
                                  "--skip-tokenizer-init"])
def test_flags_that_carry_no_secret_are_not_taken_for_one(flag):
    from specmon.redact import is_secret_flag

    assert not is_secret_flag(flag)


def test_no_sglang_flag_is_taken_for_a_secret_by_its_prefix():
    """Every flag of every shipped SGLang table: a secret flag's prefix that is a flag of its own is listed."""
    from specmon.redact import PREFIXES_OF_SECRETS, SGLANG_SECRET_FLAGS, is_secret_flag

    for table in sorted(DATA_DIR.glob("sglang-*.json")):
        options = {o.lstrip("-") for flag in json.loads(table.read_text())["flags"] for o in flag["option_strings"]}
        for option in options:
            prefix_of_secret = any(s != option and s.startswith(option) for s in SGLANG_SECRET_FLAGS)
            assert not prefix_of_secret or option in PREFIXES_OF_SECRETS, (table.name, option)
            assert is_secret_flag("--" + option) == (option in SGLANG_SECRET_FLAGS), (table.name, option)


def test_a_launcher_setting_a_secret_environment_variable_is_refused(tmp_path):
    (tmp_path / "p.toml").write_text('[server]\nlauncher = ["env", "HF_TOKEN=hf_abc", "python3"]\n')
    loaded = load_presets([tmp_path])
    assert "p" not in loaded.presets and "secret on the command line" in loaded.errors[0].message


@pytest.mark.parametrize(("argv", "shown"), [
    (["sglang", "--api-key", "sk-1"], ["sglang", "--api-key", "***"]),
    (["sglang", "--api-ke", "sk-1", "--port", "1"], ["sglang", "--api-ke", "***", "--port", "1"]),
    (["sglang", "--API_KEY=sk-1"], ["sglang", "--API_KEY=***"]),
    (["sglang", "--admin-api-key=sk-1", "--tp", "8"], ["sglang", "--admin-api-key=***", "--tp", "8"]),
    (["env", "OPENAI_API_KEY=sk-1", "python"], ["env", "OPENAI_API_KEY=***", "python"]),
    (["x", "--hf-token", "hf_1"], ["x", "--hf-token", "***"]),
    (["x", "--speculative-num-draft-tokens", "4"], ["x", "--speculative-num-draft-tokens", "4"]),
])
def test_a_shown_command_line_hides_its_secrets(argv, shown):
    from specmon.redact import redacted

    assert redacted(argv) == shown


def test_the_port_holders_api_key_is_never_echoed(tmp_path):
    port = free_port()
    script = tmp_path / "hold.py"
    script.write_text("import socket, sys, time\ns = socket.socket()\ns.bind(('127.0.0.1', int(sys.argv[1])))\n"
                      "s.listen()\nprint('up', flush=True)\ntime.sleep(60)\n")
    holder = subprocess.Popen(
        [sys.executable, str(script), str(port), "--api-key", "sk-very-secret", "--api-ke", "sk-second",
         "--admin-api-key=sk-third"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "up"
        holder_info = ProcessInfo.of(holder.pid)
        assert "sk-" not in str(holder_info)
        assert holder_info.cmdline.endswith("--api-key *** --api-ke *** --admin-api-key=***"), holder_info.cmdline
        preset_dir = tmp_path / "presets"
        preset_dir.mkdir()
        (preset_dir / "taken.toml").write_text(
            f'demo = true\n[server]\nlauncher = ["{{python}}", "-m", "specmon.emulator"]\n'
            f'[server.args]\nmodel-path = "demo/x"\nport = {port}\n')
        done = subprocess.run([sys.executable, "-m", "specmon", "start", "taken", "--presets", str(preset_dir),
                               "--no-preflight"], capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "SPECMON_STATE_DIR":
                                   str(tmp_path / "state")}, cwd=Path(__file__).resolve().parents[2])
        assert done.returncode != 0 and "already in use" in done.stdout + done.stderr, done.stdout + done.stderr
        assert "sk-" not in done.stdout + done.stderr, done.stdout + done.stderr
    finally:
        holder.kill()
        holder.wait()


def test_gpu_process_command_lines_hide_secrets():
    from specmon.gpu.processes import ProcessInspector

    class Proc:
        pid = 4242

        def cmdline(self):
            return ["python3", "-m", "sglang.launch_server", "--api-key", "sk-gpu-secret"]

        def username(self):
            return "someone"

    command, user = ProcessInspector._command_and_user(Proc())
    assert command == "python3 -m sglang.launch_server --api-key ***" and user == "someone"
