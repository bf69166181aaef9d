"""App-wide messages: past-tense events posted by sources (often from threads) to the app."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message


@dataclass
class ServerStatusChanged(Message):
    """The poller reported the server's HTTP status (coalesced: only the latest one matters)."""

    status: Any

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ServerStatusChanged)


@dataclass
class GpuSampled(Message):
    """A GPU snapshot was taken (coalesced)."""

    snapshot: Any

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, GpuSampled)


@dataclass
class BenchProgressed(Message):
    """A running benchmark reported progress (coalesced)."""

    progress: Any

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, BenchProgressed)


@dataclass
class BenchFinished(Message):
    """A benchmark run ended (result, or an error message)."""

    result: Any
    error: str | None = None


@dataclass
class PresetSwitched(Message):
    """The supervised server was restarted with another preset (or the restart failed)."""

    preset_name: str
    log_path: str | None
    error: str | None = None


@dataclass
class SanityChecked(Message):
    """The quick post-ready sanity check (one short generation) finished."""

    summary: str
    ok: bool
