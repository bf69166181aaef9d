"""specmon.units: the one duration formatter of the headless commands (and, later, the widgets)."""

from __future__ import annotations

import pytest

from specmon.units import format_seconds


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, ""),
        (0.0, "0.0s"),
        (3.24, "3.2s"),
        (59.4, "59.4s"),
        (65.0, "1m05s"),
        (3599.0, "59m59s"),
        (3725.0, "1h02m05s"),
        (90061.0, "25h01m01s"),
    ],
)
def test_format_seconds(seconds: float | None, text: str) -> None:
    assert format_seconds(seconds) == text
