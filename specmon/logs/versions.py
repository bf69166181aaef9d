"""VersionFit: which SGLang versions could have written a log, narrowed line by line.

Those whose line templates (``specmon.sglang.loglines``) each milestone line read so far fits.
"""

from __future__ import annotations

from specmon.sglang import loglines

_FITS: dict[tuple[str, str], frozenset[str] | None] = {}  # (milestone, line) -> the versions whose templates write it
_FITS_KEPT = 256


class VersionFit:
    """The SGLang versions a log's milestone lines fit: ``versions`` is None until a line narrows them."""

    __slots__ = ("versions",)

    def __init__(self) -> None:
        self.versions: frozenset[str] | None = None

    def narrow(self, name: str, msg: str) -> frozenset[str] | None:
        """Narrow the versions to those whose `name` template writes `msg` (unless none would be left); the
        versions left when that changed them, else None."""
        if self.versions is not None and not loglines.can_narrow(name, self.versions):
            return None
        key = (name, msg)
        try:
            versions = _FITS[key]
        except KeyError:  # a line repeated (the same capture on each rank, or in a later launch) is matched once
            versions = loglines.line_versions(name, msg.rstrip())
            if len(msg) <= 4096:
                if len(_FITS) >= _FITS_KEPT:
                    _FITS.clear()
                _FITS[key] = versions
        if versions is None:
            return None
        narrowed = versions if self.versions is None else (self.versions & versions) or self.versions
        if narrowed == self.versions:
            return None
        self.versions = narrowed
        return narrowed
