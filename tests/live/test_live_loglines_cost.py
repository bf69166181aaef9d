"""What the Live view's batch-line reader costs per line: a stamp is parsed once, not once per line, and only the
lines it keeps are parsed at all (the app follows logs of 10,000 lines a second)."""

from __future__ import annotations

import pytest

from specmon.live import loglines
from specmon.live.loglines import BatchLog
from specmon.live.tracker import LiveTracker
from specmon.logs import batchlines
from specmon.logs.batchlines import parse_batch_line

DECODE = ("[2026-12-01 10:00:{s:02d} DP{dp} TP0] Decode batch, #running-req: 48, #full token: {n}, full token usage: "
          "0.34, #swa token: 52113, swa token usage: 0.21, accept len: 3.12, accept rate: 0.53, cuda graph: True, "
          "gen throughput (token/s): 4211.07, #queue-req: 0")


@pytest.fixture
def stamps_parsed(monkeypatch):
    calls: list[str] = []
    real = batchlines._timestamp

    def counting(text):
        calls.append(text)
        return real(text)

    monkeypatch.setattr(batchlines, "_timestamp", counting)
    monkeypatch.setattr(batchlines, "_heads", {})
    return calls


def test_a_stamp_is_parsed_once_per_second_and_rank(stamps_parsed):
    for n in range(3000):
        parsed = parse_batch_line(DECODE.format(s=n // 1000, dp=n % 2, n=n))
        assert parsed is not None and parsed.used == n and parsed.dp == n % 2
    assert len(stamps_parsed) == 6  # 3 seconds x 2 DP ranks
    first, later = parse_batch_line(DECODE.format(s=0, dp=0, n=1)), parse_batch_line(DECODE.format(s=2, dp=0, n=1))
    assert later.ts - first.ts == 2.0


def test_the_prefix_cache_is_bounded_and_still_right(stamps_parsed):
    for second in range(200):
        minute, s = divmod(second, 60)
        line = DECODE.format(s=s, dp=0, n=second).replace("10:00:", f"10:{minute:02d}:")
        assert parse_batch_line(line).ts == parse_batch_line(line).ts
    assert len(batchlines._heads) <= batchlines._HEAD_CACHE_MAX
    assert parse_batch_line(DECODE.format(s=5, dp=0, n=1).replace("TP0", "TP1")) is None  # TP1 repeats TP0


def test_only_the_lines_kept_are_parsed(monkeypatch):
    parsed: list[str] = []
    real = loglines.parse_batch_line
    monkeypatch.setattr(loglines, "parse_batch_line", lambda line: parsed.append(line) or real(line))
    log = BatchLog(max_lines=4096)
    for n in range(20_000):
        log.feed(DECODE.format(s=n % 60, dp=0, n=n))
    assert parsed == []
    assert len(log.lines) == 4096 and log.lines[-1].used == 19_999 and log.lines[0].used == 20_000 - 4096
    assert len(parsed) == 4096
    assert log.latest[0].used == 19_999 and "#full token: 19999," in log.last_line


def test_a_batch_of_lines_reads_as_the_lines_one_by_one():
    lines = [DECODE.format(s=n % 60, dp=n % 2, n=n) for n in range(500)] + ["", "  "]
    lines.insert(250, "[2026-12-01 10:00:00] server_args=ServerArgs(model_path='m')")
    one, batch = LiveTracker(), LiveTracker()
    one.metrics_unavailable(), batch.metrics_unavailable()
    for line in lines:
        one.feed_line(line, 5.0)
    batch.feed_lines(lines, 5.0)
    assert one.restarts == batch.restarts == 1
    assert one.last_log_line == batch.last_log_line == lines[-3]
    assert one.snapshot(60, 100.0) == batch.snapshot(60, 100.0)


def test_lines_fed_together_keep_what_feeding_them_one_by_one_keeps():
    """``feed_lines`` takes a batch in one pass (``BatchLog.feed_many``), and line by line where a startup begins."""
    startup = "[2026-12-01 10:00:30] server_args=ServerArgs(model_path='m', tp_size=1)"
    batch = [DECODE.format(s=n // 10, dp=n % 2, n=n) for n in range(300)]
    batch[7] = "[2026-12-01 10:00:00] INFO:     127.0.0.1:5 - \"POST /generate HTTP/1.1\" 200 OK"
    batch[9] = "Traceback (most recent call last): Decode batch?"
    batch[11] = "[2026-12-01 10:00:01] a batch of 3 requests, #running-req: 3"  # kept by feed_many, dropped at the parse
    for lines in (batch, batch[:150] + [startup] + batch[150:], [*batch, "   "]):
        together, one_by_one = LiveTracker(), LiveTracker()
        together.feed_lines(lines, 5.0)
        for line in lines:
            one_by_one.feed_lines([line], 5.0)
        assert [b.used for b in together.run.batches.lines] == [b.used for b in one_by_one.run.batches.lines]
        kept = len(lines) - 1 - lines.index(startup) if startup in lines else len(lines) - 3 - (lines[-1] == "   ")
        assert len(together.run.batches.lines) == kept  # a startup begins a new run: only the lines after it
        assert together.last_log_line == one_by_one.last_log_line == next(t for t in reversed(lines) if t.strip())
