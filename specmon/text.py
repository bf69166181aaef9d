"""Outside text made safe to print to a terminal, and JSON made strict for scripts (no Textual here).

File names, server answers, log lines and process names come from outside: a control character in them
(ESC, CR, BEL, C1 codes, bidirectional overrides) could rewrite the terminal or hide what is printed.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import unicodedata
from collections.abc import Collection, Iterable, Sequence
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


QUOTED_CHARS = 60
"""Outside text quoted in a message is cut after this many characters: a 150,000-character key is named, not
printed."""


def quoted(text: object, limit: int = QUOTED_CHARS) -> str:
    """Outside text quoted in a message: printable, in quotes, cut at ``limit`` characters with its length said
    (``'aaaa…' (150,000 characters)``)."""
    text = str(text)
    if len(text) <= limit:
        return f"'{printable(text)}'"
    return f"'{printable(text[:limit])}…' ({len(text):,} characters)"


MAX_SUGGESTION_CHOICES = 5_000
"""More choices than this are not searched for a suggestion (difflib compares the word with each)."""


def close_to(word: str, choices: Iterable[str]) -> list[str]:
    """Up to three of ``choices`` close to ``word`` (difflib), the closest first: what a typo meant."""
    options = [choice for choice in choices if choice != word]
    if not word or len(word) > QUOTED_CHARS or len(options) > MAX_SUGGESTION_CHOICES:
        return []
    return difflib.get_close_matches(word, options, n=3, cutoff=0.6)


def did_you_mean(word: str, choices: Iterable[str], *, quote: bool = True) -> str:
    """`` (did you mean 'bench'?)`` when one or more of ``choices`` is close to ``word``, else ""."""
    close = close_to(word, choices)
    if not close:
        return ""
    named = [f"'{printable(c)}'" if quote else printable(c) for c in close]
    return f" (did you mean {' or '.join(named)}?)"


def json_safe(value: Any) -> Any:
    """``value`` as strict JSON can hold it: None for a NaN or infinite float and for an int too long for Python
    to print (over 4,300 digits), string keys, lists for tuples (recursively)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value.bit_length() < 14_000 else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


def strict_json(value: Any, **options: Any) -> str:
    """The one way specmon writes JSON for others to read (every `--json`): strict (null where a number is NaN or
    infinite, never NaN or Infinity, which other tools refuse), anything else JSON has no type for as its text."""
    return json.dumps(json_safe(value), allow_nan=False, default=str, **options)


def cell_width(text: str) -> int:
    """The terminal columns ``text`` takes: two for an East Asian wide or fullwidth character, none for a combining
    mark or an invisible format character, one for any other."""
    if text.isascii():
        return len(text)
    return sum(_char_width(char) for char in text)


def _char_width(char: str) -> int:
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def fit_cell(text: str, width: int, right: bool = False) -> str:
    """``text`` padded with spaces to ``width`` terminal columns (on the left with ``right``), or cut to fit with
    "…" as its last column when it is wider."""
    if cell_width(text) > width:
        kept, used = [], 0
        for char in text:
            used += _char_width(char)
            if used > width - 1:
                break
            kept.append(char)
        text = "".join(kept) + "…" if width > 0 else ""
    padding = " " * max(0, width - cell_width(text))
    return padding + text if right else text + padding


def aligned_rows(
    rows: Sequence[Sequence[str]],
    *,
    right: Collection[int] = (),
    gap: str | Sequence[str] = "  ",
    indent: str = "",
    min_widths: Sequence[int] = (),
    max_widths: Sequence[int | None] = (),
) -> list[str]:
    """The one column aligner: ``rows`` (a header first, when there is one) as lines of aligned columns.

    Each column is as wide as its widest cell in terminal columns (a wide character counts two), at least its
    ``min_widths`` entry and at most its ``max_widths`` entry (None: no limit; a wider cell is cut with "…").
    Cells are left-aligned, those of the columns in ``right`` right-aligned; ``gap`` goes between columns (one
    for all, or one per boundary); each line starts with ``indent`` and has no trailing spaces. A row shorter
    than the others has empty cells at its end."""
    count = max((len(row) for row in rows), default=0)
    cells = [[*row, *[""] * (count - len(row))] for row in rows]
    gaps = [gap] * max(0, count - 1) if isinstance(gap, str) else list(gap)
    if len(gaps) != max(0, count - 1):
        raise ValueError(f"{len(gaps)} gaps for {count} columns")
    widths = []
    for i in range(count):
        width = max([cell_width(row[i]) for row in cells] + [min_widths[i] if i < len(min_widths) else 0])
        limit = max_widths[i] if i < len(max_widths) else None
        widths.append(width if limit is None else min(width, limit))
    lines = []
    for row in cells:
        line = indent
        for i, (cell, width) in enumerate(zip(row, widths, strict=True)):
            line += (gaps[i - 1] if i else "") + fit_cell(cell, width, i in right)
        lines.append(line.rstrip())
    return lines
