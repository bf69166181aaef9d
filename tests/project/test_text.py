"""Outside text printed to the terminal is stripped of control characters."""

from __future__ import annotations

import pytest

from specmon.serving.check import CheckReport, format_report
from specmon.text import printable


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
