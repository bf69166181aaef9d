"""Outside text made safe to print to a terminal (no Textual here).

File names, server answers, log lines and process names come from outside: a control character in them
(ESC, CR, BEL, C1 codes, bidirectional overrides) could rewrite the terminal or hide what is printed.
"""

from __future__ import annotations

import math
import re
from typing import Any

_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROL_BUT_NEWLINE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object, newlines: bool = False) -> str:
    """``text`` with every control character shown as an escape (``\\x1b``); tabs stay, and newlines too
    with ``newlines`` (for multi-line reports)."""
    pattern = _CONTROL_BUT_NEWLINE if newlines else _CONTROL
    return pattern.sub(_escaped, str(text))


def shown(value: Any) -> str:
    """A value as its own short text, safe to print (a number with digit groups, other things as their repr)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return printable(repr(value)[:40])
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if abs(value) >= 10**15:  # an int of any size (str() refuses over 4,300 digits)
        return f"{float(value):.3g}" if isinstance(value, float) else f"about 1e{int(math.log10(abs(value)))}"
    return f"{int(value):,}" if isinstance(value, int) or value == int(value) else f"{value:,.4g}"
