"""The cheap paths of the per-line reading give what the plain ones give (issue 33). The tests before the failure
regexes keep every line the regexes match (a 14 kB `server_args` line after a failure took 3 ms in
`kill_evidence`'s case-blind search; the guards make it a few substring tests); a block of lines with a few
coloured ones is cleaned as a whole block is.

Each guard is checked against its regex on the real logs' lines and on made lines in every case and with the
non-ASCII letters that a case-blind match equates with ASCII ones (`ſ` with `s`, `ı` with `i`, the Kelvin sign
with `k`).
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from specmon.logs import causes, frames, patterns
from specmon.logs.failures import kill_evidence

FIXTURES = Path(__file__).parents[1] / "fixtures"
REAL_LINES = sorted({
    line
    for path in [*FIXTURES.glob("logs/**/*.log"), *FIXTURES.glob("real-sglang-*/**/*.log")]
    for line in path.read_text(errors="replace").replace("\r", "\n").splitlines()
})
KILLS = ["Killed", "killed", "KILLED", "kIlLeD", "SIGKILL", "sigkill", "SigKill", "signal 9", "SIGNAL 9",
         "exit code -9", "Exit Code: -9", "EXITED WITH EXIT STATUS 137", "exitcode=-9", "ExitCode -9", "已杀死",
         "ſigkill", "SIGKıLL", "\u212aILLED", "exıt code -9", "ſignal 9"]


def made_lines() -> list[str]:
    heads = ["", "bash: line 1:  ", "12 ", "[2026-12-03 09:00:00] ", "x" * 5000 + " "]
    tails = ["", " ", " now", ".", " " + "y" * 5000]
    return [head + kill + tail for head, kill, tail in itertools.product(heads, KILLS, tails)]


def test_kill_evidence_is_its_regex_behind_its_marks():
    for msg in [*REAL_LINES, *made_lines()]:
        marked = any(mark in msg for mark in patterns.KILL_MARKS)
        assert kill_evidence(msg) == (marked and patterns.KILL_EVIDENCE.search(msg) is not None), msg[:200]


def test_the_real_logs_and_made_lines_hold_kills():
    assert sum(map(kill_evidence, made_lines())) > 200
    assert any(kill_evidence(line) for line in REAL_LINES)


CONSEQUENCES = ["Scheduler or DataParallelController 1234 terminated with 255", "Rank 3 scheduler is dead",
                "Rank 0 scheduler died", "ERROR:    Application startup failed. Exiting."]


def test_consequence_line_is_its_regex():
    pattern = causes._CONSEQUENCE_LINE
    for msg in [*REAL_LINES, *CONSEQUENCES, *(c.lower() for c in CONSEQUENCES), *(c.upper() for c in CONSEQUENCES),
                "the scheduler failed", "Child process unexpectedly failed"]:
        found = causes.consequence_line(msg)
        expected = pattern.search(msg)
        assert (found and found.group(0)) == (expected and expected.group(0)), msg[:200]
    assert all(causes.consequence_line(c) for c in CONSEQUENCES)


PIECES = [b"plain line", b"\x1b[33mwarn\x1b[0m", b"\xff\xfe bad", b"\xe6\x9d", b"\x80x", b"a\x1b]0;title\x07b",
          b"\x07bell", b"\x1b", b"\x1bX", b"\t tab", b"\x7f", "é漢".encode(), b"\r", b"\x1b[", b"\x1b]0;t", b""]


@pytest.mark.parametrize("seed", range(4))
def test_clean_text_of_a_block_is_the_whole_block_cleaned(seed):
    rng = random.Random(seed)
    for _ in range(300):
        lines = [b"".join(rng.choice(PIECES) for _ in range(rng.randint(0, 4))) for _ in range(rng.randint(1, 600))]
        raw = b"\n".join(lines)
        assert frames.clean_text(raw) == frames._CONTROL.sub("", raw.decode("utf-8", "replace"))
    for _ in range(300):  # long blocks of plain lines with a few coloured or broken ones
        lines = [rng.choice(PIECES) if rng.random() < 0.02 else b"plain %d" % i for i in range(rng.randint(1, 3000))]
        raw = b"\n".join(lines)
        assert frames.clean_text(raw) == frames._CONTROL.sub("", raw.decode("utf-8", "replace"))
    real = (FIXTURES / "logs" / "03-laguna-int4-dflash-v0.5.16-ready.log").read_bytes()
    assert b"\x1b" in real and len(real) > frames._CLEAN_WHOLE_BYTES
    assert frames.clean_text(real) == frames._CONTROL.sub("", real.decode("utf-8", "replace"))
