"""A long run of progress frames on one physical line is one ``FrameRun`` item (``frame_runs=True``), and the
tracker reads only the frames of it that can change its state (``StartupTracker.feed_frames``): the items, the
tracker's state, its clock and its events must be exactly those of reading every frame, on every fixture log and
on capture bars made to test what the tracker may skip (bars of several processes on one line, a clock that goes
back, batch sizes that only the frames list, a bar cut off, a frame of another bar in the middle)."""

from __future__ import annotations

import io
import os
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specmon.logs.follower import FrameRun, LogFollower, LogItem, read_items
from specmon.logs.summary import summarize_stream
from specmon.logs.tracker import StartupTracker

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
FIXTURES = sorted([*LOGS.glob("*.log"), *(LOGS / "synthetic").glob("*.log"), *(LOGS / "made").glob("*.log")])
HEAD = (LOGS / "03-laguna-int4-dflash-v0.5.16-ready.log").read_bytes()
BEGIN_AT = HEAD.index(b"\n", HEAD.index(b"Capture target verify CUDA graph begin.")) + 1
BAR = "\u2588"


def bar_frames(n: int, *, prefill: bool = False, clock_back: bool = False, stop: int | None = None,
               unknown_eta: bool = False, close_redraw: bool = True) -> list[str]:
    """A capture bar's frames as SGLang draws them: the bare bar at 0, then per batch size its description at
    ``done`` and the count moved on (two frames), the last drawn again at close."""
    frames = [f"  0%|          | 0/{n} [00:00<?, ?it/s]"]
    mem = 60.0
    for done in range(n if stop is None else stop):
        size, mem = n - done, mem - 0.01
        head = (f"Capturing num tokens (num_tokens={size} avail_mem={mem:.2f} GB): " if prefill
                else f"Capturing batches (bs={size} avail_mem={mem:.2f} GB): ")
        seconds = 10 * done // n if not clock_back else (done * 7) % 13
        left = "?" if unknown_eta else "00:10"
        for count in (done, done + 1):
            pct = 100 * count // n
            frames.append(f"{head}{pct:3d}%|{(BAR * (pct // 10)).ljust(10)}| {count}/{n} [00:{seconds:02d}<{left}, "
                          f" 9.{done % 10}0it/s]")
    if close_redraw and stop is None:
        frames.append(frames[-1])
    return frames


def capture(n: int, rng: random.Random, *, listed: bool, processes: int, stray: bool, broken: bool = False,
            **bar) -> bytes:
    """A capture: its begin line (listing its batch sizes or not), its bars' frames on one physical line (of
    ``processes`` processes, interleaved; ``broken``: another process's line ends it midway), its end line."""
    bars = [bar_frames(n, **bar) for _ in range(processes)]
    frames: list[str] = []
    while any(bars):
        frames.append(rng.choice([b for b in bars if b]).pop(0))
    if stray:
        frames.insert(rng.randrange(len(frames)), "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:03<00:03]")
    if broken:
        at = rng.randrange(len(frames))
        frames[at] += "\n[2026-08-01 23:43:40 TP1] Registering 4 cuda graph addresses\n" + frames[at]
    sizes = ", ".join(str(b) for b in range(1, n + 1))
    begin = ("[2026-08-01 23:43:38] Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=16, "
             + (f"bs=[{sizes}], " if listed else "") + "avail mem=60.00 GB\n")
    end = "[2026-08-01 23:43:49] Capture target verify CUDA graph end. elapsed=10.00 s, mem usage=0.50 GB, avail mem=55.00 GB.\n"
    return (begin + "\r" + "\r".join(frames) + "\n" + end).encode()


def every_frame(data: bytes, chunk_bytes: int, frame_runs: bool) -> tuple[list, dict]:
    """What a tracker fed ``data`` in chunks returns: each chunk's line kinds and events, then its state."""
    tracker, batches = StartupTracker(), []
    for items in read_items(io.BytesIO(data), chunk_bytes=chunk_bytes, frame_runs=frame_runs):
        batches.append((tracker.feed_items(items), tracker.drain_events()))
    state = tracker.state
    return batches, {"json": state.to_json(), "recognized": state.lines_recognized, "clock": tracker.clock}


def expanded(items: list[LogItem]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for kind, text in items:
        if kind == "frames":
            assert isinstance(text, FrameRun)
            out += [("frame", t) for t in text.texts()]
        else:
            out.append((kind, text))
    return out


def assert_same_reading(data: bytes, chunk_bytes: int) -> None:
    runs = [len(items) for items in read_items(io.BytesIO(data), chunk_bytes=chunk_bytes, frame_runs=True)]
    lazy = list(read_items(io.BytesIO(data), chunk_bytes=chunk_bytes, frame_runs=True))
    eager = list(read_items(io.BytesIO(data), chunk_bytes=chunk_bytes))
    assert len(runs) == len(eager)
    assert [expanded(items) for items in lazy] == [list(items) for items in eager]
    assert every_frame(data, chunk_bytes, True) == every_frame(data, chunk_bytes, False)
    assert summarize_stream(io.BytesIO(data)).to_json() == every_frame(data, 1 << 20, False)[1]["json"]


@pytest.mark.parametrize("chunk_bytes", [4096, 1 << 16, 1 << 20])
@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name[:40])
def test_every_fixture_log_reads_the_same(path, chunk_bytes):
    assert_same_reading(path.read_bytes(), chunk_bytes)


def test_a_long_capture_is_read_as_runs_and_skimmed(monkeypatch):
    """The fast path is taken (the tracker reads a fraction of the frames), and reads the same."""
    data = HEAD[:BEGIN_AT] + capture(200, random.Random(1), listed=True, processes=1, stray=False) + HEAD[BEGIN_AT:]
    read = []
    original = StartupTracker.feed_frame
    monkeypatch.setattr(StartupTracker, "feed_frame", lambda self, text: (read.append(text), original(self, text))[1])
    items = [item for batch in read_items(io.BytesIO(data), frame_runs=True) for item in batch]
    assert any(kind == "frames" for kind, _ in items)
    every_frame(data, 1 << 20, True)
    assert 0 < len(read) < 100  # of 402 frames in the run
    monkeypatch.undo()
    assert_same_reading(data, 1 << 20)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32),
    captures=st.lists(
        st.fixed_dictionaries({
            "n": st.integers(1, 80), "listed": st.booleans(), "processes": st.sampled_from([1, 1, 2, 3]),
            "stray": st.booleans(), "broken": st.booleans(), "prefill": st.booleans(), "clock_back": st.booleans(),
            "stop": st.one_of(st.none(), st.integers(0, 60)), "unknown_eta": st.booleans(),
            "close_redraw": st.booleans(),
        }),
        min_size=1, max_size=4,
    ),
    chunk_bytes=st.sampled_from([512, 4096, 5000, 1 << 16, 1 << 20]),
    with_head=st.booleans(),
)
def test_made_captures_read_the_same(seed, captures, chunk_bytes, with_head):
    rng = random.Random(seed)
    body = b"".join(capture(rng=rng, **c) for c in captures)
    data = HEAD[:BEGIN_AT] + body + HEAD[BEGIN_AT:] if with_head else body
    assert_same_reading(data, chunk_bytes)


def test_the_follower_delivers_the_same_frames_as_the_log_grows(tmp_path):
    """The live frame (a bar's incomplete state) is delivered once, whether what completes it is a run or not."""
    rng = random.Random(7)
    data = HEAD[:BEGIN_AT] + b"".join(
        capture(n, rng, listed=True, processes=p, stray=False) for n, p in ((120, 1), (60, 2), (200, 1))
    ) + HEAD[BEGIN_AT:]
    log = tmp_path / "server.log"
    log.write_bytes(b"")
    got: dict[bool, list] = {True: [], False: []}
    with LogFollower(log, frame_runs=True) as lazy, LogFollower(log) as eager:
        pos = 0
        while pos < len(data):
            step = rng.choice([7, 300, 3000, 9000, 40000])
            with open(log, "ab") as f:
                f.write(data[pos : pos + step])
                f.flush()
                os.fsync(f.fileno())
            pos += step
            got[True] += expanded(lazy.poll())
            got[False] += list(eager.poll())
    assert got[True] == got[False]
    assert sum(kind == "frame" for kind, _ in got[False]) > 500


def test_the_clock_cache_keeps_no_long_texts():
    """tqdm's elapsed texts are cached; a hostile log's long ones (a frame may be 64 KiB) are not kept."""
    from specmon.logs import patterns

    for i in range(200):
        assert patterns.clock_seconds("0:" * 2000 + f"{i:02d}") == float(i)
    assert patterns.clock_seconds("01:05") == 65.0 and patterns.clock_seconds("1:00:00") == 3600.0
    assert patterns.clock_seconds("00:0?") is None
    assert sum(map(len, patterns._CLOCKS)) < 4096 * 17
