"""`log-summary` says what the Live view says of a speculative server's acceptance (issue: a log whose every
decode line says `accept len: 1.00` was summarised without a word): the same figure over the same window, judged
by the same rule, in the text and in the JSON."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from specmon.acceptance import WINDOW_S
from specmon.live import rules
from specmon.live.loglines import BatchLog
from specmon.logs.acceptance import ServingTail, serving_acceptance
from specmon.logs.summary import summarize_stream

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
ROOT = Path(__file__).parents[2]
READY = (LOGS / "03-laguna-int4-dflash-v0.5.16-ready.log").read_bytes()
STARTUP = READY[: READY.index(b"\n", READY.index(b"The server is fired up")) + 1]  # DFLASH, to its ready line
DECODE_0516 = (
    "[{ts}{tags}] Decode batch, #running-req: 4, #token: 4000, token usage: 0.02, "
    "accept len: {a:.2f}, accept rate: {r:.2f}, cuda graph: True, gen throughput (token/s): {t:.2f}, #queue-req: 0"
)
DECODE_04 = (  # 0.4.x: `Decode batch.` and no accept rate
    "[{ts}{tags}] Decode batch. #running-req: 4, #token: 4000, token usage: 0.02, "
    "accept len: {a:.2f}, cuda graph: True, gen throughput (token/s): {t:.2f}, #queue-req: 0, "
)
HYBRID = (  # a hybrid (SWA) model's line
    "[{ts}{tags}] Decode batch, #running-req: 1, #full token: 181, full token usage: 0.00, "
    "#swa token: 181, swa token usage: 0.00, accept len: {a:.2f}, accept rate: {r:.2f}, cuda graph: True, "
    "gen throughput (token/s): {t:.2f}, #queue-req: 0"
)
SERVING_FROM = datetime(2026, 8, 1, 23, 50)  # after the startup's ready line
ACCESS = '[{ts}] INFO:     127.0.0.1:40000 - "POST /generate HTTP/1.1" 200 OK'


def serving(template: str, accepts: list[float], *, start_s: int = 0, step_s: int = 1, tags: str = "") -> list[str]:
    out = []
    for i, accept in enumerate(accepts):
        ts = (SERVING_FROM + timedelta(seconds=start_s + i * step_s)).strftime("%Y-%m-%d %H:%M:%S")
        out.append(template.format(ts=ts, tags=tags, a=accept, r=max(accept - 1, 0) / 15, t=100.0 + 10 * (i % 50)))
        out.append(ACCESS.format(ts=ts))
    return out


def log_summary(log: bytes, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specmon", "log-summary", "-", *args], input=log,
                          capture_output=True, timeout=60, cwd=ROOT)  # fmt: skip


def live_view_alert(lines: list[str]) -> tuple[float | None, str | None]:
    """What the Live view shows for these lines: its figure over its window, and its rule's alert."""
    batches = BatchLog()
    for line in lines:
        batches.feed(line)
    accept = batches.figures(WINDOW_S).accept_length
    alert = rules.acceptance(accept, True, None, None)
    return accept, alert.text if alert is not None else None


@pytest.mark.parametrize("name", ["h200-0.5.16-eagle3-draft-keys-unknown-names.log",
                                  "h200-0.5.16-eagle3-draft-keys-layers0.log"])  # fmt: skip
def test_a_real_eagle3_log_accepting_one_token_per_step_is_flagged_in_text_and_json(name: str):
    log = (LOGS / name).read_bytes()
    text = log_summary(log)
    assert text.returncode == 0, text.stderr  # the server started: the symptom is said, not a failure
    out = text.stdout.decode()
    assert "!! ACCEPTANCE  acceptance 1.00 ≈ 1 token per step: did the draft's weights load?" in out
    assert "EAGLE3" in out.split("!! ACCEPTANCE")[1].split("\n\n")[0]
    doc = json.loads(log_summary(log, "--json").stdout)
    acceptance = doc["acceptance"]
    assert acceptance["accept_length"] == 1.0 and acceptance["decode_lines"] == 17
    assert acceptance["alert"] == live_view_alert(log.decode().splitlines())[1]


def test_a_working_draft_shows_its_figure_and_no_alert_and_a_plain_server_none():
    doc = json.loads(log_summary(READY, "--json").stdout)
    assert doc["acceptance"]["alert"] is None and doc["acceptance"]["accept_length"] > 3
    out = log_summary(READY).stdout.decode()
    assert "!! ACCEPTANCE" not in out and "\nacceptance  " in out
    plain = (LOGS / "h200-0.5.16-plain-ready.log").read_bytes()
    assert json.loads(log_summary(plain, "--json").stdout)["acceptance"] is None
    assert "acceptance" not in log_summary(plain).stdout.decode()


CASES = {
    "every-line-1.00": serving(DECODE_0516, [1.0] * 20),
    "near-one": serving(DECODE_0516, [1.05, 1.02, 1.08, 1.04] * 5),
    "good": serving(DECODE_0516, [2.4, 3.1, 2.8] * 5),
    "0.4-format": serving(DECODE_04, [1.0] * 12),
    "hybrid-model": serving(HYBRID, [1.01] * 12),
    "dp-ranks": serving(DECODE_0516, [1.0] * 10, tags=" DP0 TP0") + serving(DECODE_0516, [1.0] * 10, tags=" DP1 TP0"),
    "tp1-repeats-tp0": serving(DECODE_0516, [2.5] * 10, tags=" TP0") + serving(DECODE_0516, [1.0] * 10, tags=" TP1"),
    # the draft worked an hour ago; the last minute is what the Live view (and the summary) judge
    "good-then-one": serving(DECODE_0516, [3.0] * 30, step_s=60) + serving(DECODE_0516, [1.0] * 30, start_s=1900),
    "one-then-good": serving(DECODE_0516, [1.0] * 30, step_s=60) + serving(DECODE_0516, [3.0] * 30, start_s=1900),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_summary_and_the_live_view_read_the_same_figure_and_say_the_same(case: str):
    lines = CASES[case]
    accept, alert = live_view_alert(lines)
    assert accept is not None
    doc = json.loads(log_summary(STARTUP + "\n".join(lines).encode() + b"\n", "--json").stdout)
    assert doc["acceptance"]["accept_length"] == pytest.approx(accept, abs=1e-3)
    assert doc["acceptance"]["alert"] == alert
    assert (alert is not None) == (case not in ("good", "one-then-good", "tp1-repeats-tp0"))


def test_the_last_minute_is_read_however_long_the_log_and_however_it_is_chunked():
    """Only the log's end is kept (a full scan of every decode line costs more than the rest of log-summary):
    a log far longer than what is kept, read in small and large chunks, gives the figure of its last minute."""
    early = serving(DECODE_0516, [3.0] * 40_000, step_s=0)  # ~10 MB at 23:50:00
    late = serving(DECODE_0516, [1.0] * 30, start_s=3000)
    log = STARTUP + "\n".join(early + late).encode() + b"\n"
    for chunk_bytes in (4096, 1 << 20):
        tail = ServingTail()
        summarize_stream(io.BytesIO(log), chunk_bytes=chunk_bytes, tail=tail)
        acceptance = serving_acceptance(tail.lines())
        assert (acceptance.accept_length, acceptance.decode_lines) == (1.0, 30)
        assert acceptance.alert is not None


def test_a_cut_first_line_of_the_tail_is_not_read_as_a_line():
    line = serving(DECODE_0516, [1.0])[0].encode() + b"\n"
    tail = ServingTail(limit=len(line))
    for piece in (line[:40], line[40:], line):  # two pieces of one line dropped, then a whole line
        tail.feed(piece)
    assert tail.lines() == [line.rstrip(b"\n")]
    tail = ServingTail(limit=len(line))
    for piece in (line[:40], line[40:] + line):  # the first piece dropped: the end of its line is not a line
        tail.feed(piece)
    assert tail.lines() == [line.rstrip(b"\n")]
    assert serving_acceptance([]) is None
    assert serving_acceptance([b"[2026-08-01 23:50:00] Decode batch, #running-req: 1, cuda graph: True"]) is None
