"""Outside text printed to the terminal is stripped of control characters; the one column aligner."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specmon.serving.check import CheckReport, format_report
from specmon.text import aligned_rows, cell_width, fit_cell, printable


@pytest.mark.parametrize(
    ("text", "newlines", "shown"),
    [
        ("plain name.log", False, "plain name.log"),
        ("tab\tstays", False, "tab\tstays"),
        ("evil\x1b[2Jname", False, "evil\\x1b[2Jname"),
        ("bell\x07 cr\r", False, "bell\\x07 cr\\x0d"),
        ("two\nlines", False, "two\\x0alines"),
        ("two\nlines", True, "two\nlines"),
        ("c1\x9bcsi del\x7f", False, "c1\\x9bcsi del\\x7f"),
        ("bidi\u202egnp.exe", False, "bidi\\u202egnp.exe"),
        ("ünïcode ✓ 日本", False, "ünïcode ✓ 日本"),
    ],
)
def test_printable_escapes_control_characters(text, newlines, shown):
    assert printable(text, newlines=newlines) == shown


def test_the_check_report_escapes_what_the_server_said():
    report = CheckReport(url="http://127.0.0.1:1")
    report.add("request", "fail", "HTTP 500: \x1b]0;pwned\x07\x1b[2J")
    text = format_report(report)
    assert "\x1b" not in text and "\x07" not in text
    assert "HTTP 500: \\x1b]0;pwned\\x07\\x1b[2J" in text


# -- the one column aligner -------------------------------------------------------------------------------------


def test_columns_are_as_wide_as_their_widest_cell_and_lines_end_without_spaces():
    rows = [("preset", "tok/s", "flags"), ("baseline", "159.0", ""), ("eagle3-10", "1,368.7", "ok")]
    assert aligned_rows(rows, right={1}, indent="  ") == [
        "  preset       tok/s  flags",
        "  baseline     159.0",
        "  eagle3-10  1,368.7  ok",
    ]


def test_wide_characters_count_two_columns_and_combining_marks_none():
    assert [cell_width(t) for t in ("abc", "日本", "é", "e\u0301", "τ–×…", "\u200b")] == [3, 4, 1, 1, 4, 0]
    lines = aligned_rows([("名前", "x"), ("ab", "y"), ("e\u0301e\u0301e\u0301e\u0301e\u0301", "z")])
    assert [cell_width(line[:-1]) for line in lines] == [7, 7, 7]  # the second column starts in one place


def test_minimum_and_maximum_widths_and_a_cut_cell_says_so():
    rows = [("GPU", "NAME", "MEMORY"), ("0", "NVIDIA GeForce RTX 4090", "1.0/24.0 GiB")]
    assert aligned_rows(rows, right={0, 2}, gap=("  ", " "), min_widths=(3, 20, 20), max_widths=(None, 20)) == [
        "GPU  NAME                               MEMORY",
        "  0  NVIDIA GeForce RTX …         1.0/24.0 GiB",
    ]
    assert fit_cell("名前です", 5) == "名前…"  # a wide character that would straddle the limit is left out whole
    assert fit_cell("名前です", 6) == "名前… " and cell_width(fit_cell("名前です", 6)) == 6
    assert fit_cell("abc", 0) == "" and fit_cell("7", 3, right=True) == "  7"


def test_short_rows_and_bad_gaps():
    assert aligned_rows([("a", "b", "c"), ("dd",)]) == ["a   b  c", "dd"]
    assert aligned_rows([]) == []
    with pytest.raises(ValueError, match="1 gaps for 3 columns"):
        aligned_rows([("a", "b", "c")], gap=(" ",))


def test_no_table_is_aligned_by_hand():
    """Every table specmon prints goes through aligned_rows: a module that pads computed column widths itself
    (`.ljust(w)`/`.rjust(w)` over cells, `max(len(...))` widths) would align wide characters wrongly again."""
    root = Path(__file__).resolve().parents[2]
    by_hand = re.compile(r"\.[lr]just\(\s*w\w*\s*\)|max\(len\(\w+\[i\]\)")
    found = [f"{path.relative_to(root)}:{n}" for folder in ("specmon", "tui", "widgets")
             for path in sorted((root / folder).rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if by_hand.search(line)]
    assert found == []
