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
