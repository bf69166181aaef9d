"""Short texts shared by the headless commands and the widgets (no Textual here)."""

from __future__ import annotations


def format_seconds(seconds: float | None) -> str:
    """``3.2s``, ``1m05s``, ``1h02m05s``, or ``""`` when unknown."""
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s"
