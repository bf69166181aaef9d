"""The cheap tests before the failure regexes keep every line the regexes match (issue 33: a 14 kB `server_args`
line after a failure took 3 ms in `kill_evidence`'s case-blind search; the guards make it a few substring tests).

Each guard is checked against its regex on the real logs' lines and on made lines in every case and with the
non-ASCII letters that a case-blind match equates with ASCII ones (`ſ` with `s`, `ı` with `i`, the Kelvin sign
with `k`).
"""

from __future__ import annotations

import itertools
from pathlib import Path

from specmon.logs import causes, patterns
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
