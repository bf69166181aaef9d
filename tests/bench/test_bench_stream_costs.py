"""What reading a stream costs per event: one JSON decoder for every event, no copy of an event for its one data
line, and every piece read acknowledged at once (TCP_QUICKACK re-armed), on SGLang's real streams."""

from __future__ import annotations

import json

import pytest

import specmon.bench.stream as stream
from specmon.bench.stream import stream_client, stream_generate
from specmon.serving.client import generate_payload
from specmon.testing.loopback_server import LoopbackConfig, LoopbackServer
from tests.bench.test_bench_stream import final_chunk, recorded_streams


async def _read(recorded: bytes, gap_s: float = 0.0005):
    with LoopbackServer(LoopbackConfig(replay=recorded, replay_gap_s=gap_s)) as server:
        async with stream_client(server.url) as client:
            return await stream_generate(client, generate_payload("Hello there", 32), 0, "p0")


async def test_every_piece_read_is_acknowledged_at_once(monkeypatch):
    """The ACK is re-armed for the head and for every piece read, however the events were cut into reads (a busy
    machine reads several events at once: counting events would fail there)."""
    armed: list[object] = []
    pieces: list[int] = []
    real_arm, real_feed = stream._set_quickack, stream._SseFeed.feed
    monkeypatch.setattr(stream, "_set_quickack", lambda sock: (armed.append(sock), real_arm(sock)))
    monkeypatch.setattr(stream._SseFeed, "feed",
                        lambda self, piece, at: (pieces.append(len(piece)), real_feed(self, piece, at))[1])
    recorded = recorded_streams("h200-0.5.16-generate-eagle3.txt")[0]
    result = await _read(recorded, gap_s=0.005)  # events 5 ms apart: several reads even on a loaded machine
    assert result.ok, result.error
    assert len(pieces) > 1, pieces
    assert len(armed) == 1 + len(pieces), (len(armed), len(pieces))  # the head, then each piece read
    assert all(sock is not None and sock is armed[0] for sock in armed)


async def test_one_decoder_for_every_event(monkeypatch):
    built: list[dict] = []
    real = json.JSONDecoder.__init__

    def counting(self, *args, **kwargs):
        built.append(kwargs)
        real(self, *args, **kwargs)

    monkeypatch.setattr(json.JSONDecoder, "__init__", counting)
    recorded = recorded_streams("h200-0.5.16-generate-plain.txt")[0]
    result = await _read(recorded)
    assert result.ok and result.completion_tokens == final_chunk(recorded)["meta_info"]["completion_tokens"]
    assert built == []  # json.loads(data, parse_constant=...) built one per event


@pytest.mark.parametrize("event", [b'data: {"text": NaN}', b'data:{"text": Infinity}', b"data: \xff\xfe"])
def test_strict_json_still_refuses(event):
    state = stream._StreamState(stream.RequestResult(index=0, prompt_id="x"), 0.0, 32)
    with pytest.raises(stream.StreamError, match="garbled SSE event"):
        stream._feed_event(state, event, 1.0)


def _events(separator: bytes = b"\n\n", prefix: bytes = b"data: ") -> list[bytes]:
    metas = [{"completion_tokens": 1}, {"completion_tokens": 4},
             {"completion_tokens": 6, "finish_reason": {"type": "length"}, "spec_verify_ct": 3}]
    texts = ["Hello", "Hello wor", "Hello world!"]
    return [prefix + json.dumps({"text": t, "output_ids": list(range(m["completion_tokens"])), "meta_info": m}).encode()
            + separator for t, m in zip(texts, metas, strict=True)] + [prefix + b"[DONE]" + separator]


def _multi_line(event: bytes) -> bytes:
    """One event's JSON over two data lines (SSE joins them with a line break, which JSON reads as space)."""
    head, comma, tail = event.partition(b", ")
    return head + b",\ndata: " + tail if comma else event


FRAMINGS = {
    "one event a piece": _events(),
    "CRLF": _events(b"\r\n\r\n"),
    "no space after data:": _events(prefix=b"data:"),
    "a comment between events": [e + b": keep-alive\n\n" for e in _events()],
    "two data lines an event": [_multi_line(e) for e in _events()],
    "every event in one piece": [b"".join(_events())],
    "each event cut in two": [half for e in _events() for half in (e[:7], e[7:])],
    "a piece ending mid-event": [b"".join(_events())[:50], b"".join(_events())[50:]],
}


class _NoWatchdog:
    renewed = 0

    def renew(self) -> None:
        self.renewed += 1


@pytest.mark.parametrize("name", list(FRAMINGS))
def test_every_sse_framing_reads_the_same(name):
    """The usual piece (one whole event on one data line) takes a short path: every other framing of the same
    events reads the same figures."""
    state = stream._StreamState(stream.RequestResult(index=0, prompt_id="x"), 0.0, 32)
    watchdog = _NoWatchdog()
    feed = stream._SseFeed(state, watchdog, max_event=1 << 20)
    for at, piece in enumerate(FRAMINGS[name], start=1):
        feed.feed(piece, float(at))
    feed.finish()
    result = state.finish(100.0)
    assert result.ok and state.done and watchdog.renewed >= 1
    assert (result.completion_tokens, result.output_text, result.spec_verify_ct) == (6, "Hello world!", 3)
    assert result.chunk_tokens == [3, 2]
