"""LineSplitter and LogFollower: real files being written, truncated and rotated; the real logs."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from specmon.logs.follower import LineSplitter, LogFollower, LogItem, follow, read_items

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"


def L(text: str) -> LogItem:
    return LogItem("line", text)


def F(text: str) -> LogItem:
    return LogItem("frame", text)


def feed_all(chunks: list[bytes], max_line_bytes: int = 64 * 1024) -> list[LogItem]:
    splitter = LineSplitter(max_line_bytes)
    items: list[LogItem] = []
    for chunk in chunks:
        items += splitter.feed(chunk)
    return items + splitter.flush()


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


# --- LineSplitter -------------------------------------------------------------------------------


def test_partial_line_is_held_until_its_newline():
    splitter = LineSplitter()
    assert splitter.feed(b"[2025-01-01 00:00:00] Load weight be") == []
    assert splitter.feed(b"gin. avail mem=10.00 GB\nnext") == [L("[2025-01-01 00:00:00] Load weight begin. avail mem=10.00 GB")]
    assert splitter.flush() == [L("next")]


def test_tqdm_frames_then_final_state_as_one_line():
    raw = (
        b"\r  0%|          | 0/4 [00:00<?, ?it/s]"
        b"\rCapturing batches (bs=8 avail_mem=20.12 GB):   0%|          | 0/4 [00:00<?, ?it/s]"
        b"\rCapturing batches (bs=4 avail_mem=20.12 GB):  25%|##5       | 1/4 [00:00<00:00,  6.66it/s]"
        b"\rCapturing batches (bs=1 avail_mem=20.12 GB): 100%|##########| 4/4 [00:00<00:00,  6.64it/s]\n"
        b"[2025-10-01 12:00:16] Capture cuda graph end.\n"
    )
    assert feed_all([raw]) == [
        F("  0%|          | 0/4 [00:00<?, ?it/s]"),
        F("Capturing batches (bs=8 avail_mem=20.12 GB):   0%|          | 0/4 [00:00<?, ?it/s]"),
        F("Capturing batches (bs=4 avail_mem=20.12 GB):  25%|##5       | 1/4 [00:00<00:00,  6.66it/s]"),
        L("Capturing batches (bs=1 avail_mem=20.12 GB): 100%|##########| 4/4 [00:00<00:00,  6.64it/s]"),
        L("[2025-10-01 12:00:16] Capture cuda graph end."),
    ]
    assert feed_all(bytewise(raw)) == feed_all([raw])


def test_frame_glued_to_a_log_line_is_delivered_faithfully():
    raw = (LOGS / "18-glm47-ktransformers-sglang-rtxpro6000-capture-to-uvicorn-fragment.log").read_bytes()
    items = feed_all([raw])
    glued = [i for i in items if "Using default MoE kernel config" in i.text][0]
    assert glued.kind == "line"
    assert glued.text.startswith("Capturing batches (bs=256 avail_mem=4.83 GB):   0%|")
    assert "0/36 [00:00<?, ?it/s][2025-12-23 03:31:58] Using default" in glued.text


def test_crlf_is_one_line_end_even_when_split_between_chunks():
    assert feed_all([b"one\r", b"\ntwo\r\n"]) == [L("one"), L("two")]
    assert feed_all([b"a\rb\r", b"\n"]) == [F("a"), L("b")]


def test_utf8_sequence_split_between_chunks():
    text = "Capturing — 進捗 ✓ 100%|██████████|\n".encode()
    assert feed_all(bytewise(text)) == [L("Capturing — 進捗 ✓ 100%|██████████|")]


def test_invalid_utf8_is_replaced():
    assert feed_all([b"bad \xff\xfe byte \xe2\x82\n"]) == [L("bad \ufffd\ufffd byte \ufffd")]


def test_ansi_and_control_characters_are_stripped():
    raw = b"\x1b[33m[2026-01-01 00:00:00] WARNING\x1b[0m deprecated \x1b]0;title\x07flag\x08\n"
    assert feed_all([raw]) == [L("[2026-01-01 00:00:00] WARNING deprecated flag")]


def test_ansi_in_the_real_laguna_log_is_stripped():
    items = feed_all([(LOGS / "03-laguna-int4-dflash-v0.5.16-ready.log").read_bytes()])
    assert not any("\x1b" in i.text for i in items)
    deprecation = [i for i in items if "cuda-graph-max-bs" in i.text and "deprecated" in i.text.lower()]
    assert deprecation, "the ANSI-coloured deprecation line is still there, without its escapes"


def test_ten_megabyte_line_is_survived_with_bounded_memory():
    splitter = LineSplitter(max_line_bytes=1000)
    chunk = b"x" * 65536
    items = splitter.feed(b"start ")
    for _ in range(160):  # 10 MiB without a newline
        items += splitter.feed(chunk)
        assert len(splitter._carry) <= 1001
    items += splitter.feed(b"tail\nnext line\n")
    assert items == [L("start " + "x" * 994 + "…"), L("next line")]
    whole = feed_all([b"start " + chunk * 160 + b"tail\nnext line\n"], max_line_bytes=1000)
    assert whole == items


def test_blank_lines_are_kept_blank_frames_are_not():
    assert feed_all([b"a\n\nb\n"]) == [L("a"), L(""), L("b")]
    assert feed_all([b"\r\r   \rbar 1/2\rbar 2/2\r   \n"]) == [F("bar 1/2"), F("bar 2/2")]


def test_flush_delivers_an_incomplete_bar_as_a_line():
    raw = (LOGS / "02-qwen3-14b-tp2-a4500-cutoff-during-capture.log").read_bytes()
    assert not raw.endswith(b"\n")
    splitter = LineSplitter()
    splitter.feed(raw)
    assert splitter.pending_frame() == "Capturing batches (bs=1 avail_mem=5.89 GB):   0%|          | 0/1 [00:00<?, ?it/s]"
    assert splitter.flush() == [L("Capturing batches (bs=1 avail_mem=5.89 GB):   0%|          | 0/1 [00:00<?, ?it/s]")]


def test_shard_progress_on_one_physical_line_becomes_frames():
    raw = (LOGS / "05-laguna-nvfp4-dflash-v0.5.16-killed-during-weight-load.log").read_bytes()
    items = feed_all([raw])
    frames = [i.text for i in items if i.kind == "frame"]
    assert len(frames) == 47
    assert frames[0].startswith("Multi-thread loading shards:   0% Completed | 0/49")
    assert frames[-1].startswith("Multi-thread loading shards:  94% Completed | 46/49")
    assert any(i.kind == "line" and i.text.startswith("Multi-thread loading shards:  96% Completed | 47/49") for i in items)


@pytest.mark.parametrize("log", sorted(LOGS.glob("*.log")), ids=lambda p: p.name[:12])
def test_every_real_log_splits_the_same_in_odd_chunks(log: Path):
    raw = log.read_bytes()
    whole = feed_all([raw])
    for size in (1, 7, 4096):
        assert feed_all([raw[i : i + size] for i in range(0, len(raw), size)]) == whole
    assert not any("\r" in i.text or "\n" in i.text or "\x1b" in i.text for i in whole)


def test_read_items_reads_a_stream_to_its_end():
    with open(LOGS / "h200-0.5.16-plain-ready.log", "rb") as stream:
        items = [i for batch in read_items(stream, chunk_bytes=100) for i in batch]
    raw = (LOGS / "h200-0.5.16-plain-ready.log").read_bytes()
    assert items == feed_all([raw])
    assert items[-1] == L("[2026-11-29 10:42:49] kill_process_tree called: parent_pid=3149, include_parent=True, pid=3149")
    assert any(i.text.endswith("The server is fired up and ready to roll!") for i in items)


@st.composite
def chunked_bytes(draw):
    alphabet = st.sampled_from([b"a", b"Z", b" ", b"\n", b"\r", b"\r\n", b"\x1b[", b"31m", b"\xe2\x96\x88", b"\xff", b"\x00", b"\t"])
    data = b"".join(draw(st.lists(st.one_of(alphabet, st.binary(max_size=8)), max_size=60)))
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=8)))
    chunks, start = [], 0
    for cut in cuts:
        chunks.append(data[start:cut])
        start = cut
    chunks.append(data[start:])
    return data, chunks


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunked_bytes(), st.sampled_from([1, 3, 16, 64 * 1024]))
@example((b"\t\t\x00\r\x00", [b"\t\t", b"\x00\r\x00"]), 1)  # a cut frame whose kept bytes are blank
def test_any_bytes_in_any_chunking_give_the_same_items(sample, cap):
    data, chunks = sample
    whole = feed_all([data], max_line_bytes=cap)
    assert feed_all(chunks, max_line_bytes=cap) == whole
    for item in whole:
        assert "\n" not in item.text and "\r" not in item.text and "\x1b" not in item.text
        assert len(item.text) <= cap + 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(chunked_bytes())
def test_follower_on_a_file_written_in_any_chunks_matches_the_splitter(tmp_path: Path, sample):
    data, chunks = sample
    path = tmp_path / "fuzz.log"
    path.write_bytes(b"")
    got: list[LogItem] = []
    with LogFollower(path) as follower, open(path, "ab", buffering=0) as out:
        for chunk in chunks:
            out.write(chunk)
            got += follower.poll()
        got += follower.splitter.flush()
    whole = feed_all([data])
    assert texts(got) == texts(whole)
    delivered = iter(texts(got, "frame"))  # live frames may come in between, never instead of a real one
    assert all(frame in delivered for frame in texts(whole, "frame"))


# --- LogFollower on real files ------------------------------------------------------------------


def poll_until(follower: LogFollower, predicate, timeout: float = 5.0) -> list[LogItem]:
    got: list[LogItem] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got += follower.poll()
        if predicate(got):
            return got
        time.sleep(0.01)
    raise AssertionError(f"timed out; got {got!r}")


def texts(items: list[LogItem], kind: str = "line") -> list[str]:
    return [i.text for i in items if i.kind == kind]


def test_waits_for_a_file_that_does_not_exist_yet(tmp_path: Path):
    path = tmp_path / "server.log"
    follower = LogFollower(path)
    assert follower.poll() == [] and not follower.is_open
    path.write_bytes(b"[2025-01-01 00:00:00] server_args=ServerArgs()\n")
    assert texts(follower.poll()) == ["[2025-01-01 00:00:00] server_args=ServerArgs()"]
    follower.close()


def test_appended_lines_and_partial_chunks_from_a_writer_thread(tmp_path: Path):
    path = tmp_path / "server.log"
    path.write_bytes(b"")
    lines = [f"[2025-01-01 00:00:{i:02d}] Decode batch, #running-req: {i}, ✓".encode() for i in range(40)]
    raw = b"\r\n".join(lines) + b"\r\n"

    def writer():
        with open(path, "ab", buffering=0) as out:
            for i in range(0, len(raw), 5):  # cuts inside \r\n and inside the UTF-8 check mark
                out.write(raw[i : i + 5])
                time.sleep(0.0005)

    follower = LogFollower(path)
    thread = threading.Thread(target=writer)
    thread.start()
    got = poll_until(follower, lambda g: len(texts(g)) >= 40)
    thread.join()
    assert texts(got) == [line.decode() for line in lines]
    follower.close()


def test_from_start_false_skips_existing_content(tmp_path: Path):
    path = tmp_path / "server.log"
    path.write_bytes(b"old line\n")
    follower = LogFollower(path, from_start=False)
    assert follower.poll() == []
    with open(path, "ab") as out:
        out.write(b"new line\n")
    assert texts(follower.poll()) == ["new line"]
    follower.close()


def test_from_start_false_reads_a_file_that_appears_later_from_its_start(tmp_path: Path):
    path = tmp_path / "server.log"
    follower = LogFollower(path, from_start=False)
    assert follower.poll() == []
    path.write_bytes(b"first line of a new server\n")
    assert texts(follower.poll()) == ["first line of a new server"]
    follower.close()


def test_truncation_is_followed_from_the_start(tmp_path: Path):
    path = tmp_path / "server.log"
    path.write_bytes(b"first run line 1\nfirst run line 2\n")
    follower = LogFollower(path)
    assert texts(follower.poll()) == ["first run line 1", "first run line 2"]
    with open(path, "wb") as out:  # truncate in place, same inode
        out.write(b"second\n")
    assert texts(follower.poll()) == ["second"]
    assert follower.truncations == 1
    follower.close()


@pytest.mark.parametrize("refill", ["longer", "same-size", "shorter-then-more"])
def test_a_truncate_and_refill_between_two_polls_loses_no_line(tmp_path: Path, refill: str):
    path = tmp_path / "server.log"
    first = b"[2025-10-01 12:00:00] first run line 1\n[2025-10-01 12:00:01] first run line 2\n"
    second = {
        "longer": b"[2025-10-02 08:00:00] second run line 1\n[2025-10-02 08:00:01] second run line 2\n" * 3,
        "same-size": first.replace(b"first", b"again"),
        "shorter-then-more": b"[2025-10-02 08:00:00] x\n",
    }[refill]
    path.write_bytes(first)
    follower = LogFollower(path)
    assert texts(follower.poll()) == [line.decode() for line in first.splitlines()]
    with open(path, "r+b") as out:  # truncate in place (same inode) and write again before the next poll
        out.truncate(0)
        out.write(second)
    assert texts(follower.poll()) == [line.decode() for line in second.splitlines()]
    assert follower.truncations == 1
    with open(path, "ab") as out:
        out.write(b"appended\n")
    assert texts(follower.poll()) == ["appended"]  # plain appends are not mistaken for a rewrite
    assert follower.truncations == 1
    follower.close()


def test_from_start_false_notices_a_rewrite_of_the_file_it_skipped(tmp_path: Path):
    path = tmp_path / "server.log"
    path.write_bytes(b"old content that was skipped\n" * 20)
    follower = LogFollower(path, from_start=False)
    assert follower.poll() == []
    with open(path, "r+b") as out:
        out.truncate(0)
        out.write(b"new server line\n" * 50)
    assert texts(follower.poll()) == ["new server line"] * 50
    follower.close()


def test_rotation_reads_the_old_file_to_its_end_then_the_new_one(tmp_path: Path):
    path = tmp_path / "server.log"
    path.write_bytes(b"old 1\n")
    follower = LogFollower(path)
    assert texts(follower.poll()) == ["old 1"]
    with open(path, "ab") as out:
        out.write(b"old 2\nold partial")
    os.rename(path, tmp_path / "server.log.1")
    assert texts(follower.poll()) == ["old 2"]  # renamed away, not recreated: the old file is still followed
    path.write_bytes(b"new 1\n")
    got = follower.poll()
    assert texts(got) == ["old partial", "new 1"]
    assert follower.rotations == 1
    with open(path, "ab") as out:
        out.write(b"new 2\n")
    assert texts(follower.poll()) == ["new 2"]
    follower.close()


def test_a_bar_being_redrawn_is_delivered_live_and_once(tmp_path: Path):
    path = tmp_path / "server.log"
    path.write_bytes(b"")
    follower = LogFollower(path)
    with open(path, "ab", buffering=0) as out:
        out.write(b"\rCapturing batches (bs=8 avail_mem=20.12 GB):   0%|          | 0/4")
        assert follower.poll() == [F("Capturing batches (bs=8 avail_mem=20.12 GB):   0%|          | 0/4")]
        assert follower.poll() == []
        out.write(b"\rCapturing batches (bs=4 avail_mem=20.12 GB):  25%|##5       | 1/4")
        assert follower.poll() == [F("Capturing batches (bs=4 avail_mem=20.12 GB):  25%|##5       | 1/4")]
        out.write(b"\rCapturing batches (bs=1 avail_mem=20.12 GB): 100%|##########| 4/4\n")
        assert follower.poll() == [L("Capturing batches (bs=1 avail_mem=20.12 GB): 100%|##########| 4/4")]
    follower.close()


def test_a_large_backlog_is_delivered_over_several_polls(tmp_path: Path):
    path = tmp_path / "server.log"
    path.write_bytes(b"0123456789abcdef\n" * 10000)  # 170 kB
    follower = LogFollower(path, chunk_bytes=4096, max_poll_bytes=16384)
    first = follower.poll()
    assert 900 <= len(first) <= 1000
    rest = poll_until(follower, lambda g: len(first) + len(g) == 10000)
    assert set(texts(first + rest)) == {"0123456789abcdef"}
    follower.close()


def test_follow_runs_on_a_thread_until_stopped(tmp_path: Path):
    path = tmp_path / "server.log"
    received: list[LogItem] = []
    stop = threading.Event()
    thread = threading.Thread(target=follow, args=(path, received.extend, stop), kwargs={"interval": 0.01})
    thread.start()
    child = subprocess.run(
        [sys.executable, "-c", "import sys; open(sys.argv[1], 'ab').write(b'from a child process\\n')", str(path)],
        check=True,
    )
    assert child.returncode == 0
    deadline = time.monotonic() + 5
    while not received and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert received == [L("from a child process")]
