"""Numbers as short texts, shared by the headless commands and the widgets (no Textual here)."""

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


def elapsed(seconds: float) -> str:
    """A past span, coarsely: ``42 s``, ``5 min``, ``3 h``, ``2 days`` (negative spans read as 0)."""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} days"


NA = "N/A"


def number(value: float | None, spec: str = ".1f", missing: str = "–") -> str:
    """A number formatted with `spec`, or `missing` for None."""
    return missing if value is None else format(value, spec)


def number_range(low: float | None, high: float | None, spec: str = ".1f") -> str:
    """``12.0–14.5``, or ``–`` when either end is unknown."""
    return "–" if low is None or high is None else f"{low:{spec}}–{high:{spec}}"


def gib(mib: float | None, digits: int = 1) -> str:
    """MiB as GiB, ``N/A`` when unknown."""
    return NA if mib is None else f"{mib / 1024:.{digits}f}"


def pct(value: float | None) -> str:
    """``42%``, ``N/A`` when unknown."""
    return NA if value is None else f"{value:.0f}%"


def temp(value: float | None) -> str:
    """``61°C``, ``N/A`` when unknown."""
    return NA if value is None else f"{value:.0f}°C"


def mhz(value: float | None) -> str:
    """``1980 MHz``, ``N/A`` when unknown."""
    return NA if value is None else f"{value:.0f} MHz"


def rate(kbs: float | None) -> str:
    """KB/s as a short rate: `850 KB/s`, `205 MB/s`, `12.3 GB/s`."""
    if kbs is None:
        return NA
    if kbs < 1000:
        return f"{kbs:.0f} KB/s"
    if kbs < 1_000_000:
        return f"{kbs / 1000:.0f} MB/s"
    return f"{kbs / 1_000_000:.1f} GB/s"
