"""The floor benchmark's parts read the whole log and agree on which lines are not steady serving lines."""

from __future__ import annotations

from benchmarks.log_summary_floor import lines, lines_tested, read_only, regex_scan, regex_steady
from benchmarks.log_summary_serving import build_log


def test_each_part_reads_every_line_and_the_two_tests_agree(tmp_path):
    log = tmp_path / "serving.log"
    serving = 3000
    total = build_log(log, serving)
    startup = total - serving
    assert read_only(log) == log.stat().st_size
    assert lines(log) == total
    assert regex_scan(log) == log.stat().st_size
    not_steady = regex_steady(log)
    assert 0 < not_steady <= startup  # only startup lines (a few of its INFO lines look steady)
    assert lines_tested(log) == not_steady


def test_a_broken_serving_line_is_found_by_both_tests(tmp_path):
    log = tmp_path / "serving.log"
    build_log(log, 3000)
    before = regex_steady(log)
    with open(log, "ab") as f:
        f.write(b"Traceback (most recent call last):\n[2026-08-01 23:59:59] Decode batch, #running-req: 1\n")
    assert regex_steady(log) == before + 1
    assert lines_tested(log) == before + 1
