"""Benchmarks alternated with another checkout (the code before a change): a child's environment that imports
that checkout's specmon, and the order of the sides per round."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TypeVar

Side = TypeVar("Side")


def checkout_env(checkout: Path | None, **extra: str) -> dict[str, str] | None:
    """A child's environment with `checkout` first on its PYTHONPATH (the caller's behind it) and `extra`; None
    (this process' own environment) for no checkout and nothing extra."""
    if checkout is None and not extra:
        return None
    env = {**os.environ, **extra}
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(checkout), os.environ.get("PYTHONPATH", "")])
    return env


def alternated(sides: Sequence[Side], rounds: int) -> Iterator[Side]:
    """Each side once a round, in turn order reversed every other round (so neither always goes first)."""
    for round_ in range(rounds):
        yield from (sides if round_ % 2 == 0 else reversed(sides))
