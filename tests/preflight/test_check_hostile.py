"""`specmon check` against a server whose answers are wrong: each fault is a failed item, exit 1, no traceback."""

from __future__ import annotations

import json

import pytest

from specmon.cli import main
from tests.support.hostile_http import SGLANG_INFO, Answer, HostileServer, routes_of

GOOD_INFO = SGLANG_INFO
GOOD_GENERATE = json.dumps(
    {"text": "ok", "meta_info": {"completion_tokens": 64, "spec_verify_ct": 20, "e2e_latency": 0.5}}
).encode()


def _serve(info: bytes, generate: bytes) -> HostileServer:
    return HostileServer(routes_of(info=Answer(info), generate=Answer(generate))).start()


CASES = {
    "info not JSON": (b"<html>", GOOD_GENERATE, "GET /server_info: the answer is not JSON"),
    "info not UTF-8": (b'{"version": "\xff\xfe"}', GOOD_GENERATE, "GET /server_info: the answer is not JSON"),
    "info a list": (b"[1, 2]", GOOD_GENERATE, "GET /server_info: the answer is a JSON list, not an object"),
    "generate []": (GOOD_INFO, b"[]", "POST /generate: the answer is an empty list"),
    "generate a string": (GOOD_INFO, b'"hello"', "POST /generate: the answer is a JSON str"),
    "generate not UTF-8": (GOOD_INFO, b'{"text": "\xff"}', "POST /generate: the answer is not JSON"),
    "meta_info a string": (GOOD_INFO, b'{"text": "x", "meta_info": "done"}', "meta_info is a str"),
    "meta_info a list": (GOOD_INFO, b'{"text": "x", "meta_info": [64]}', "meta_info is a list"),
    "tokens a string": (GOOD_INFO, b'{"text": "x", "meta_info": {"completion_tokens": "64"}}', "completion_tokens is '64'"),
    "tokens NaN": (GOOD_INFO, b'{"text": "x", "meta_info": {"completion_tokens": NaN}}', "a number that is not finite"),
    "negative verify": (
        GOOD_INFO, b'{"text": "x", "meta_info": {"completion_tokens": 64, "spec_verify_ct": -16}}',
        "spec_verify_ct is -16",
    ),
    "negative tokens": (
        GOOD_INFO, b'{"text": "x", "meta_info": {"completion_tokens": -64, "spec_verify_ct": 16}}',
        "completion_tokens is -64",
    ),
    "verify > tokens": (
        GOOD_INFO, b'{"text": "x", "meta_info": {"completion_tokens": 4, "spec_verify_ct": 16}}', "impossible",
    ),
    "latency Infinity": (
        GOOD_INFO, b'{"text": "x", "meta_info": {"completion_tokens": 4, "e2e_latency": Infinity}}', "not finite",
    ),
    "text a list": (GOOD_INFO, b'{"text": ["x"], "meta_info": {}}', "text is a list"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_server_fault_is_a_failed_item_never_a_traceback(name, capsys):
    info, generate, reason = CASES[name]
    server = _serve(info, generate)
    try:
        code = main(["check", "--url", server.url])
        out = capsys.readouterr().out
        assert code == 1, out
        assert "[FAIL]" in out and reason in out, out
        assert "[ ok ] acceptance" not in out
        assert main(["check", "--url", server.url, "--json"]) == 1
        text = capsys.readouterr().out
        report = json.loads(text)
        assert "NaN" not in text and "Infinity" not in text
        assert any(item["level"] == "fail" and reason in item["detail"] for item in report["checks"])
    finally:
        server.stop()


def test_the_good_answer_passes_so_the_cases_above_can_fail(capsys):
    server = _serve(GOOD_INFO, GOOD_GENERATE)
    try:
        code = main(["check", "--url", server.url])
    finally:
        server.stop()
    out = capsys.readouterr().out
    assert code == 0, out
    assert "[ ok ] acceptance   3.20 tokens per verify step (64/20)" in out


BAD_KEYS = {"non-ASCII": "clé-secrète", "a control character": "abc\x07def", "a DEL": "abc\x7fdef",
            "an inner newline": "abc\ndef"}


def _specmon(tmp_path, env_key: str | None, *args: str):
    import os
    import subprocess
    import sys

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "home"),
           "SPECMON_STATE_DIR": str(tmp_path / "state"), "XDG_STATE_HOME": str(tmp_path / "xdg"),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "PYTHONIOENCODING": "utf-8"}
    if env_key is not None:
        env["SPECMON_API_KEY"] = env_key
    return subprocess.run([sys.executable, "-m", "specmon", *args], capture_output=True, text=True, timeout=60,
                          env=env, stdin=subprocess.DEVNULL)


SERVER_COMMANDS = {
    "check": ("check", "--url", "{url}"),
    "check --json": ("check", "--url", "{url}", "--json"),
    "bench": ("bench", "--url", "{url}", "--requests", "1", "--warmup", "0"),
    "monitor --once": ("monitor", "--once", "--url", "{url}"),
    "monitor": ("monitor", "--url", "{url}"),
    "sweep": ("sweep", "demo-eagle3-5", "--json"),
    "switch": ("switch", "demo-eagle3-5", "--yes"),
}


@pytest.mark.parametrize("command", list(SERVER_COMMANDS))
@pytest.mark.parametrize("kind", list(BAD_KEYS))
def test_an_api_key_no_header_can_carry_is_one_line_and_exit_2(tmp_path, command, kind):
    """Whatever sends the key refuses it before it talks to a server: one line naming where the key came from
    and what is wrong with it, never the key, never a traceback."""
    key = BAD_KEYS[kind]
    server = _serve(GOOD_INFO, GOOD_GENERATE)
    try:
        args = [a.replace("{url}", server.url) for a in SERVER_COMMANDS[command]]
        done = _specmon(tmp_path, key, *args)
        asked = server.paths()
    finally:
        server.stop()
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and "UnicodeEncodeError" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "$SPECMON_API_KEY" in lines[0], lines
    assert ("non-ASCII" if kind == "non-ASCII" else "control character") in lines[0]
    assert key not in done.stderr + done.stdout and "secr" not in done.stderr + done.stdout
    assert not asked, asked


@pytest.mark.parametrize("kind", list(BAD_KEYS))
def test_an_api_key_file_no_header_can_carry_is_one_line_and_exit_2(tmp_path, kind):
    key_file = tmp_path / "key"
    key_file.write_text(BAD_KEYS[kind] + "\n", encoding="utf-8")
    key_file.chmod(0o600)  # one others may read adds its warning line
    for command in ("check", "bench"):
        done = _specmon(tmp_path, None, command, "--url", "http://127.0.0.1:9", "--api-key-file", str(key_file))
        assert done.returncode == 2, (done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and f"file {key_file}" in lines[0], lines


def test_a_good_api_key_is_sent_so_the_cases_above_can_fail(tmp_path):
    server = _serve(GOOD_INFO, GOOD_GENERATE)
    try:
        done = _specmon(tmp_path, "sk-plain ASCII~key", "check", "--url", server.url)
    finally:
        server.stop()
    assert done.returncode == 0, done.stdout + done.stderr
