"""What a server's figures can be: every number from a server is checked against what can be true before use.

A figure outside its range (a count that is negative, fractional or not finite, more requests running than
the server's own maximum, a ratio over 1, a latency over a day) is absurd: it is kept out of the figures,
named with its value and the reason, and shown as absurd, never as data. `Figures` collects the absurd ones
while it reads each value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from specmon.text import shown

MAX_REQUESTS = 10**6
"""Running, queued or maximum requests: far above any one server's `max_running_requests`."""
MAX_TOKENS = 10**10
"""KV-cache tokens: an 8-GPU H200 server holds a few million."""
MAX_DRAFT = 1024
"""Speculative steps, top-k or draft tokens."""
MAX_TOK_S = 10**7
"""Tokens per second of one server."""
MAX_LATENCY_MS = 86_400_000.0
"""A latency percentile: a day."""


@dataclass(frozen=True)
class Absurd:
    """A figure that cannot be true: where it came from, its value and why."""

    name: str
    value: Any
    why: str

    def __str__(self) -> str:
        return f"{self.name} {shown(self.value)} cannot be true ({self.why}): not used"


class Figures:
    """Reads values from one source, each against its range; `absurd` lists those that failed."""

    def __init__(self) -> None:
        self.absurd: list[Absurd] = []

    def _refuse(self, name: str, value: Any, why: str) -> None:
        self.absurd.append(Absurd(name, value, why))

    def amount(self, name: str, value: Any, *, maximum: float, minimum: float = 0.0, why_max: str = "") -> float | None:
        """A finite number in [minimum, maximum], or None (absent: None; absurd: recorded)."""
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self._refuse(name, value, "not a number")
            return None
        try:
            number = float(value)
        except OverflowError:
            self._refuse(name, value, "not a finite number")
            return None
        if not math.isfinite(number):
            self._refuse(name, value, "not a finite number")
            return None
        if number < minimum:
            self._refuse(name, value, f"below {shown(minimum)}")
            return None
        if number > maximum:
            self._refuse(name, value, why_max or f"over {shown(maximum)}")
            return None
        return number

    def count(self, name: str, value: Any, *, maximum: float, minimum: int = 0, why_max: str = "") -> int | None:
        """A whole number in [minimum, maximum] (4.0 is 4), or None (absent: None; absurd: recorded)."""
        number = self.amount(name, value, maximum=maximum, minimum=minimum, why_max=why_max)
        if number is None:
            return None
        if abs(number - round(number)) > 1e-6:
            self._refuse(name, value, "not a whole number")
            return None
        return int(round(number))
