"""The streaming /generate client against real HTTP on 127.0.0.1: real 0.5.16 streams and broken servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specmon.bench.stream import error_message, stream_client, stream_generate
from specmon.ports import free_port
from specmon.serving.client import generate_payload
from specmon.testing.loopback_server import LoopbackConfig, LoopbackServer

FIXTURES = Path(__file__).parents[1] / "fixtures" / "api"


def recorded_streams(name: str) -> list[bytes]:
    """The streams recorded in a fixture file (several requests, each ending with data: [DONE])."""
    raw = (FIXTURES / name).read_bytes()
    return [part + b"data: [DONE]\n\n" for part in raw.split(b"data: [DONE]") if part.strip()]


def final_chunk(stream: bytes) -> dict:
    events = [e for e in stream.split(b"\n\n") if e.strip()]
    assert events[-1].strip() == b"data: [DONE]"
    return json.loads(events[-2].removeprefix(b"data: "))


async def _one(config: LoopbackConfig, max_new_tokens: int = 32):
    with LoopbackServer(config) as server:
        async with stream_client(server.url) as client:
            result = await stream_generate(client, generate_payload("Hello there", max_new_tokens), 0, "p0")
        return result, server


@pytest.mark.parametrize(
    "name", ["h200-0.5.16-generate-eagle3.txt", "h200-0.5.16-generate-plain.txt", "h200-0.5.16-standalone-generate.txt"]
)
async def test_real_sglang_streams_are_read_exactly(name):
    streams = recorded_streams(name)
    assert len(streams) >= 2
    for recorded in streams:
        final = final_chunk(recorded)
        meta = final["meta_info"]
        result, _ = await _one(LoopbackConfig(replay=recorded, replay_gap_s=0.0005))
        assert result.ok, result.error
        assert result.completion_tokens == meta["completion_tokens"]
        assert result.output_text == final["text"]
        assert result.finish_reason == "length"
        assert result.prompt_tokens == meta["prompt_tokens"]
        if "spec_verify_ct" in meta:
            assert result.spec_verify_ct == meta["spec_verify_ct"]
            assert result.accept_length == pytest.approx(meta["spec_accept_length"])
        else:
            assert result.spec_verify_ct is None and result.accept_length is None
        # tokens come from completion_tokens, so the chunks' tokens add up whatever the chunking
        assert 1 + sum(result.chunk_tokens) == meta["completion_tokens"]
        assert len(result.chunk_gaps_ms) == len(result.chunk_tokens)
        assert result.decode_tok_s and result.ttft_s and result.e2e_s >= result.ttft_s


async def test_the_degenerate_real_output_is_flagged():
    last = recorded_streams("h200-0.5.16-generate-eagle3.txt")[-1]
    result, _ = await _one(LoopbackConfig(replay=last))
    assert result.ok and "repetition" in result.flags


async def test_multi_token_chunks_are_counted_as_tokens_not_chunks():
    result, server = await _one(LoopbackConfig(tokens_per_s=2000, chunk_tokens=[4, 3]), max_new_tokens=36)
    assert result.ok, result.error
    assert result.completion_tokens == 36
    assert result.chunk_tokens[:4] == [4, 3, 4, 3]
    sent = server.sent[0]
    assert len(sent.tokens) == len(result.chunk_tokens) + 1
    assert result.spec_verify_ct == 10 and result.accept_length == pytest.approx(3.6)
    assert result.itl_ms()[:4] == pytest.approx([result.chunk_gaps_ms[0] / 4] * 4)
    assert result.output_text.split() == result.output_text.split()[:36]
    assert len(result.output_text.split()) == 36


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (LoopbackConfig(fail_status=500, fail_body=b'{"error": {"message": "CUDA error"}}'), "HTTP 500: CUDA error"),
        (LoopbackConfig(fail_status=400, fail_body=b'{"error": "unknown field `foo`"}'), "HTTP 400: unknown field `foo`"),
        (LoopbackConfig(fail_status=503, fail_body=b"<html>bad gateway</html>"), "HTTP 503: <html>bad gateway</html>"),
        (LoopbackConfig(non_json=True), "garbled SSE line"),
        (LoopbackConfig(garbled_after_chunks=3), "garbled SSE event"),
        (LoopbackConfig(error_event=True), "server error: Request aborted: out of memory"),
        (LoopbackConfig(drop_after_chunks=4), "RemoteProtocolError: peer closed connection"),
    ],
)
async def test_broken_answers_are_errors_with_messages(config, expected):
    result, _ = await _one(config)
    assert not result.ok
    assert expected in result.error
    assert result.e2e_s is not None


async def test_a_stream_cut_short_is_an_error_with_its_partial_figures():
    recorded = recorded_streams("h200-0.5.16-generate-plain.txt")[0]
    events = [e for e in recorded.split(b"\n\n") if e.strip()]
    cut = b"\n\n".join(events[:5]) + b"\n\ndata: [DONE]\n\n"
    result, _ = await _one(LoopbackConfig(replay=cut))
    assert not result.ok
    assert result.error == "stream ended before the final chunk"
    assert result.completion_tokens == 5


async def test_connection_refused_is_an_error_not_a_crash():
    async with stream_client(f"http://127.0.0.1:{free_port()}") as client:
        result = await stream_generate(client, generate_payload("hi", 8), 3, "p3")
    assert not result.ok and result.error.startswith("ConnectError")
    assert result.index == 3 and result.prompt_id == "p3"


def test_error_message_shapes():
    assert error_message(401, b'{"error": "Unauthorized"}') == "HTTP 401: Unauthorized"
    assert error_message(422, b'{"detail": "bad"}') == "HTTP 422: bad"
    assert error_message(502, b"") == "HTTP 502: (empty body)"
    assert len(error_message(500, b"x" * 5000)) < 320


async def test_incremental_text_is_joined_and_cumulative_text_is_not_repeated():
    cumulative, _ = await _one(LoopbackConfig(tokens_per_s=3000), max_new_tokens=30)
    incremental, _ = await _one(LoopbackConfig(tokens_per_s=3000, incremental_text=True), max_new_tokens=30)
    assert cumulative.ok and incremental.ok
    assert incremental.output_text == cumulative.output_text
    assert len(cumulative.output_text.split()) == 30
    assert incremental.completion_tokens == cumulative.completion_tokens == 30
