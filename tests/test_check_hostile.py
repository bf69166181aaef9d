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
