"""HTTP/1.1 framing that a hand-written client got wrong, against raw loopback servers that write exact bytes
(tests/support/raw_http.py): bytes after an answer, 1xx interim answers, obs-folded headers, and a server that
closes a kept-alive connection between requests. Each is read where specmon reads: the pollers' GETs
(SGLangClient, the Live view's scrape, `monitor --once`) and the benchmark's streams."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specmon.bench.stream import stream_client, stream_generate
from specmon.serving.client import SGLangClient, generate_payload
from tests.support.hostile_http import SGLANG_INFO, SGLANG_METRICS
from tests.support.raw_http import CLOSE, RawRequest, RawServer, answer, chunked

RUNNING_2_QUEUED_1 = SGLANG_METRICS.replace(
    b'tp_rank="0"} 0.0\n# HELP sglang:num_queue_reqs', b'tp_rank="0"} 2.0\n# HELP sglang:num_queue_reqs'
).replace(b'# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{engine_type="unified",model_name="/tmp/tiny/target",'
          b'moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.0',
          b'# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{engine_type="unified",model_name="/tmp/tiny/target",'
          b'moe_ep_rank="0",pp_rank="0",tp_rank="0"} 1.0')
STALE_777 = b"sglang:num_running_reqs 777.0\nsglang:num_queue_reqs 777.0\n"


def metrics_answer(body: bytes) -> bytes:
    return answer(body, content_type="text/plain; version=0.0.4")


def info_of(number: int) -> bytes:
    """/server_info that says which request it answers (a shifted answer shows as the wrong number)."""
    return json.dumps(json.loads(SGLANG_INFO) | {"version": f"answer-{number}"}).encode()


def event(tokens: int, text: str, finish: bool = False) -> bytes:
    meta = {"completion_tokens": tokens, "finish_reason": {"type": "length"} if finish else None}
    return b"data: " + json.dumps({"text": text, "meta_info": meta}).encode() + b"\n\n"


STREAM_EVENTS = [event(2, "ab"), event(5, "abcde"), event(8, "abcdefgh", finish=True), b"data: [DONE]\n\n"]


def check_stream(result) -> None:
    assert result.ok, result.error
    assert (result.completion_tokens, result.output_text, result.chunk_tokens) == (8, "abcdefgh", [3, 3])


async def streams(server: RawServer, count: int, api_key: str | None = None) -> list:
    async with stream_client(server.url, api_key) as client:
        return [await stream_generate(client, generate_payload("hi", 16), i, f"p{i}", stall_timeout_s=5)
                for i in range(count)]


# ----- bytes after an answer are never read into it, nor into the next answer



def then(first: bytes, extra: bytes, when: str) -> list:
    """`first` and the `extra` bytes after it: in one write, or a moment later on the same connection."""
    return [first + extra] if when == "in the same write" else [first, 0.05, extra]


EXTRA_WHEN = ["in the same write", "a moment later"]


@pytest.mark.parametrize("when", EXTRA_WHEN)
def test_monitor_once_reads_the_metrics_answer_not_the_bytes_after_it(when, tmp_path):
    async def script(request: RawRequest):
        if request.path == "/metrics":
            return then(metrics_answer(RUNNING_2_QUEUED_1), metrics_answer(STALE_777), when)
        if request.path == "/server_info":
            return [answer(SGLANG_INFO)]
        return [answer(b'{"detail":"Not Found"}', "404 Not Found")]

    env = {"SPECMON_STATE_DIR": str(tmp_path / "state"), "XDG_STATE_HOME": str(tmp_path / "xdg"),
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    with RawServer(script) as server:
        done = subprocess.run([sys.executable, "-m", "specmon", "monitor", "--once", "--url", server.url, "--window",
                               "2", "--json"], capture_output=True, text=True, timeout=90, env=env)
    assert "Traceback" not in done.stderr, done.stderr
    snapshot = json.loads(done.stdout)
    assert (snapshot["running"], snapshot["queued"]) == (2, 1), snapshot
    assert sum(r.path == "/metrics" for r in server.requests) >= 2


@pytest.mark.parametrize("when", EXTRA_WHEN)
async def test_each_get_reads_its_own_answer_whatever_came_after_the_last(when):
    async def script(request: RawRequest):
        return then(answer(info_of(request.number)), answer(info_of(777)), when)

    with RawServer(script) as server:
        async with SGLangClient(server.url, timeout=5) as client:
            versions = [(await client.server_info())["version"] for _ in range(4)]
    assert versions == ["answer-1", "answer-2", "answer-3", "answer-4"]


@pytest.mark.parametrize("when", EXTRA_WHEN)
async def test_a_stream_ends_at_its_last_chunk_whatever_comes_after(when):
    extra = chunked([event(777, "x" * 777, finish=True)])

    async def script(request: RawRequest):
        return then(chunked(STREAM_EVENTS), extra, when)

    with RawServer(script) as server:
        for result in await streams(server, 3):
            check_stream(result)


# ----- a 1xx interim answer (RFC 9110 15.2: a client MUST skip it) is not the answer

INTERIM = [b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n", 0.03,
           b"HTTP/1.1 100 Continue\r\n\r\n", 0.03]


async def test_gets_skip_1xx_answers_and_no_later_answer_shifts():
    async def script(request: RawRequest):
        return [*INTERIM, answer(info_of(request.number))]

    with RawServer(script) as server:
        async with SGLangClient(server.url, timeout=5) as client:
            versions = [(await client.server_info())["version"] for _ in range(3)]
            health = await client.health()
    assert versions == ["answer-1", "answer-2", "answer-3"]
    assert health.ok, health


async def test_a_stream_skips_1xx_answers():
    async def script(request: RawRequest):
        return [*INTERIM, chunked(STREAM_EVENTS)]

    with RawServer(script) as server:
        for result in await streams(server, 2):
            check_stream(result)


# ----- an obs-folded header (RFC 9112 5.2: a user agent MUST accept it) is read, the server is not unreachable

FOLDED = ["X-Served-By: gpu-box-7\r\n  rack 3", "Server: uvicorn"]


async def test_an_obs_folded_header_is_accepted_in_a_get():
    async def script(request: RawRequest):
        return [answer(info_of(request.number) if request.path == "/server_info" else b"", headers=FOLDED)]

    with RawServer(script) as server:
        async with SGLangClient(server.url, timeout=5) as client:
            health = await client.health()
            info = await client.server_info()
    assert health.ok and health.state == "ready", health
    assert info["version"] == "answer-2"


async def test_an_obs_folded_header_is_accepted_in_a_stream():
    async def script(request: RawRequest):
        return [chunked(STREAM_EVENTS, headers=FOLDED)]

    with RawServer(script) as server:
        check_stream((await streams(server, 1))[0])


# ----- a server that closes a kept-alive connection between requests: every request still answered

async def test_streams_are_answered_when_the_server_closes_each_connection_after_its_answer():
    async def script(request: RawRequest):
        return [chunked(STREAM_EVENTS), CLOSE]  # keep-alive promised (no Connection: close), then closed

    with RawServer(script) as server:
        results = await streams(server, 6, api_key="sk-1")
        heads = [r.head for r in server.requests]
    for result in results:
        check_stream(result)
    assert len(heads) == 6 and all(b"Authorization: Bearer sk-1\r\n" in head for head in heads)


async def test_gets_are_answered_when_the_server_closes_each_connection_after_its_answer():
    async def script(request: RawRequest):
        return [answer(info_of(request.number)), CLOSE]

    with RawServer(script) as server:
        async with SGLangClient(server.url, timeout=5) as client:
            versions = [(await client.server_info())["version"] for _ in range(6)]
    assert versions == [f"answer-{n}" for n in range(1, 7)]
