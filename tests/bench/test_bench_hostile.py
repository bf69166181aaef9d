"""The benchmark against servers that misbehave: stalls, drips, impossible counts, hostile stored records."""

from __future__ import annotations

import asyncio
import json
import time
import tracemalloc

import pytest

from specmon.bench.prompts import Prompt
from specmon.bench.run import BenchRun, RunSettings
from specmon.bench.stream import stream_client, stream_generate
from specmon.serving.client import generate_payload
from specmon.testing.loopback_server import LoopbackConfig, LoopbackServer
from tests.support.hostile_http import HostileServer

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def event(tokens, text="x", finish=False, **meta) -> bytes:
    meta = {"completion_tokens": tokens, "finish_reason": {"type": "length"} if finish else None, **meta}
    return b"data: " + json.dumps({"text": text, "meta_info": meta}).encode() + b"\n\n"


class Hostile(HostileServer):
    """The hostile-server harness answering every request with `script(writer)`; each request's head and body
    recorded."""

    def __init__(self, script):
        super().__init__(default=script)

    @property
    def heads(self) -> list[bytes]:
        return [request.head for request in self.requests]

    @property
    def bodies(self) -> list[bytes]:
        return [request.body for request in self.requests]


async def _generate(script, max_new_tokens=16, **kwargs):
    async with Hostile(script) as server, stream_client(server.url) as client:
        started = time.perf_counter()
        result = await stream_generate(client, generate_payload("hi", max_new_tokens), 0, "p0", **kwargs)
        return result, time.perf_counter() - started


async def test_headers_then_nothing_fails_after_the_stall_timeout_not_300_s():
    async def script(writer):
        writer.write(HEAD)
        await asyncio.sleep(30)

    result, elapsed = await _generate(script, stall_timeout_s=0.5)
    assert not result.ok and result.error == "Stalled: no event from the server for 0.5 s"
    assert 0.4 < elapsed < 10


async def test_a_server_that_drips_a_byte_at_a_time_fails_after_the_stall_timeout():
    async def script(writer):
        writer.write(HEAD + chunk(event(1)))
        await writer.drain()
        for byte in event(2):  # an event that never completes in time: one byte every 0.2 s
            writer.write(chunk(bytes([byte])))
            await writer.drain()
            await asyncio.sleep(0.2)

    result, elapsed = await _generate(script, stall_timeout_s=0.5)
    assert not result.ok and result.error.startswith("Stalled: no event")
    assert result.completion_tokens == 1  # what was measured before the stall is kept
    assert elapsed < 10


async def test_steady_events_that_never_finish_stop_at_the_run_deadline():
    async def script(writer):
        writer.write(HEAD)
        for _ in range(300):  # valid progress, never a final event
            writer.write(chunk(event(1)))
            await writer.drain()
            await asyncio.sleep(0.05)

    result, elapsed = await _generate(script, stall_timeout_s=5, deadline=time.perf_counter() + 0.6)
    assert not result.ok and result.error == "Stalled: the run's deadline passed before this request finished"
    assert elapsed < 5


async def test_events_within_the_stall_timeout_keep_a_longer_stream_alive():
    """Each event renews the stall timeout: a stream 2.5× longer than it, with an event every fifth of it, is
    measured whole; the same server stalling after its events fails about one timeout after the last."""

    async def steady(writer, finish=True):
        writer.write(HEAD)
        for tokens in range(1, 13):
            writer.write(chunk(event(tokens)))
            await writer.drain()
            await asyncio.sleep(0.1)
        if finish:
            writer.write(chunk(event(16, finish=True)) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()
        else:
            await asyncio.sleep(30)

    result, elapsed = await _generate(steady, stall_timeout_s=0.5)
    assert result.ok, result.error
    assert result.completion_tokens == 16 and elapsed >= 1.2

    async def stalling(writer):
        await steady(writer, finish=False)

    result, elapsed = await _generate(stalling, stall_timeout_s=0.5)
    assert not result.ok and result.error == "Stalled: no event from the server for 0.5 s"
    assert result.completion_tokens == 12 and 1.6 < elapsed < 10


NESTED = b"[" * 100_000 + b"]" * 100_000
BAD_EVENTS = {
    "NaN": (b'data: {"text": "x", "meta_info": {"completion_tokens": NaN}}\n\n', "garbled SSE event"),
    "Infinity": (b'data: {"text": "x", "meta_info": {"completion_tokens": Infinity}}\n\n', "garbled SSE event"),
    "1e30": (event(1e30), "completion_tokens is 1e+30, not an integer"),
    "3e8 final": (event(300_000_000, finish=True), "completion_tokens 300000000 is far beyond max_new_tokens 16"),
    "negative": (event(-5), "completion_tokens is negative (-5)"),
    "string": (event("12"), "completion_tokens is str '12', not an integer"),
    "decreasing": (event(4) + event(2), "completion_tokens went back from 4 to 2"),
    "meta list": (b'data: {"text": "x", "meta_info": [1, 2]}\n\n', "meta_info is list"),
    "meta string": (b'data: {"text": "x", "meta_info": "done"}\n\n', "meta_info is str"),
    "text list": (b'data: {"text": ["a"], "meta_info": {"completion_tokens": 1}}\n\n', "text is list"),
    "event list": (b"data: [1, 2]\n\n", "unexpected SSE event"),
    "not UTF-8": (b'data: {"text": "\xff\xfe", "meta_info": {}}\n\n', "garbled SSE event"),
    "verify > tokens": (event(4, finish=True, spec_verify_ct=9), "spec_verify_ct 9 is more than completion_tokens 4"),
    "verify negative": (event(4, finish=True, spec_verify_ct=-1), "spec_verify_ct is negative"),
    "latency NaN-ish": (event(4, finish=True, e2e_latency="soon"), "e2e_latency is str 'soon'"),
    "nested deep": (b'data: {"text": "x", "meta_info": {"x": ' + NESTED + b"}}\n\n", "garbled SSE event"),
    "lone surrogate": (b'data: {"text": "\\ud800", "meta_info": {"completion_tokens": -1}}\n\n', "is negative"),
    "server error": (b'data: {"error": {"message": "out of memory"}}\n\n', "server error: out of memory"),
}


@pytest.mark.parametrize("name", list(BAD_EVENTS))
async def test_impossible_figures_make_the_request_invalid_with_the_reason(name):
    bad, reason = BAD_EVENTS[name]

    async def script(writer):
        writer.write(HEAD + chunk(event(1)) + chunk(bad) + chunk(event(16, finish=True)) + chunk(b"data: [DONE]\n\n"))
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    tracemalloc.start()
    result, _ = await _generate(script, stall_timeout_s=5)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert not result.ok and reason in result.error, result.error
    assert peak < 5_000_000  # bounded by max_new_tokens, not by what the server claims
    assert sum(result.chunk_tokens) <= 16 and result.completion_tokens <= 16


async def test_tokens_counted_from_output_ids_when_completion_tokens_is_missing():
    def ids_event(count: int, finish: bool = False) -> bytes:
        meta = {"finish_reason": {"type": "length"}} if finish else {}
        return b"data: " + json.dumps({"text": "x" * count, "output_ids": list(range(count)),
                                       "meta_info": meta}).encode() + b"\n\n"

    async def script(writer):
        writer.write(HEAD + chunk(ids_event(1)) + chunk(ids_event(4)) + chunk(ids_event(9, finish=True))
                     + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()

    result, _ = await _generate(script, stall_timeout_s=5)
    assert result.ok, result.error
    assert result.completion_tokens == 9 and result.chunk_tokens == [3, 5]


PROMPTS = [Prompt(id=f"p{i}", text=f"Prompt {i}.") for i in range(3)]


def test_a_run_with_impossible_counts_finishes_saves_and_reads_back(tmp_path, capsys):
    from specmon.cli import main

    recorded = event(1) + event(1e30) + event(8, finish=True, spec_verify_ct=3) + b"data: [DONE]\n\n"
    with LoopbackServer(LoopbackConfig(replay=recorded, replay_gap_s=0.001)) as server:
        bench = BenchRun(server.url, "hostile", RunSettings(requests=2, max_new_tokens=8, warmup=0),
                         results_dir=str(tmp_path), prompts=PROMPTS, flush_delay_s=0.01, stall_timeout_s=2)
        result = bench.run_blocking()
    assert result.status == "failed" and result.summary.requests_failed == 2
    assert all("completion_tokens is 1e+30" in r.error for r in result.measured)
    assert main(["results", "--dir", str(tmp_path), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["run_id"] == result.run_id


def test_results_skip_hostile_records_with_file_and_line_and_print_strict_json(tmp_path, capsys):
    from specmon.cli import main

    with LoopbackServer(LoopbackConfig(tokens_per_s=3000)) as server:
        BenchRun(server.url, "good", RunSettings(requests=2, max_new_tokens=8, warmup=0), results_dir=str(tmp_path),
                 prompts=PROMPTS, flush_delay_s=0.01).run_blocking()
    path = next(tmp_path.glob("*.jsonl"))
    lines = path.read_text().splitlines()
    good_request = json.loads(lines[1])
    hostile = [
        json.dumps(good_request | {"completion_tokens": 1e30}),
        json.dumps(good_request | {"completion_tokens": 300_000_000, "chunk_tokens": [300_000_000]}),
        json.dumps(good_request | {"decode_tok_s": float("nan")}),
        json.dumps(good_request | {"chunk_gaps_ms": "oops"}),
        "[1, 2, 3]",
        '"a string"',
        json.dumps({"kind": "request"}),
        json.dumps({"kind": "summary", "summary": {"decode_tok_s": {"median": "fast"}}}),
    ]
    path.write_text("\n".join(lines[:2] + hostile + lines[2:]) + "\n")
    (tmp_path / "20000101-000000-dead.jsonl").write_bytes(b"\xff\xfe not json\n")
    for fmt in ("table", "json", "csv", "markdown"):
        assert main(["results", "--dir", str(tmp_path), "--format", fmt]) == 0
        captured = capsys.readouterr()
        for offset in range(len(hostile)):
            assert f"{path}:{3 + offset}: record skipped" in captured.err
        assert "20000101-000000-dead.jsonl: skipped (no run record)" in captured.err
        if fmt == "json":
            runs = json.loads(captured.out)
            assert "NaN" not in captured.out and "Infinity" not in captured.out
            assert len(runs) == 1 and len(runs[0]["requests"]) == 2
