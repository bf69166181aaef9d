"""App-wide messages: past-tense events posted by sources (often from threads) to the app."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from specmon.bench.model import BenchProgress, BenchResult
    from specmon.gpu.model import GpuSnapshot
    from specmon.oncall.discovery import FoundServer
    from specmon.oncall.switch import SwitchReport
    from specmon.serving.poller import ServerStatus
    from specmon.sweep.report import SweepReport
    from specmon.view.traffic_pane import TrafficPaneModel


class LatestOnly(Message):
    """A message of which only the newest matters: one still queued is replaced by the next of its kind."""

    def can_replace(self, message: Message) -> bool:
        return type(message) is type(self)


@dataclass
class ServerStatusChanged(LatestOnly):
    """The poller reported the server's HTTP status (coalesced: only the latest one matters)."""

    status: ServerStatus


@dataclass
class GpuSampled(LatestOnly):
    """A GPU snapshot was taken (coalesced)."""

    snapshot: GpuSnapshot


@dataclass
class TrafficRead(LatestOnly):
    """The request records were read again: the Traffic tab's model (coalesced)."""

    model: TrafficPaneModel


@dataclass
class BenchProgressed(LatestOnly):
    """A running benchmark reported progress (coalesced)."""

    progress: BenchProgress


@dataclass
class BenchFinished(Message):
    """A benchmark run ended (result, or an error message)."""

    result: BenchResult | None
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


@dataclass
class ServerFound(Message):
    """The followed server restarted or was switched elsewhere: this is the one now on its port."""

    server: FoundServer


@dataclass
class SwitchStepped(Message):
    """A step of an in-app switch of an attached server started ("running") or ended ("done", "failed")."""

    name: str
    status: str
    took_s: float | None
    server: FoundServer | None = None
    """With the "startup" step: the new server, whose log the app follows from now on."""


@dataclass
class AttachedSwitchFinished(Message):
    """An in-app switch of an attached server ended: its report, and the new server when it was found."""

    report: SwitchReport
    server: FoundServer | None


@dataclass
class ResultsLoaded(Message):
    """The stored benchmark runs were read (the newest ``HISTORY_RUNS``), oldest first; ``skipped`` says what
    the reader left out (runs or records), None when nothing."""

    results: list[BenchResult]
    skipped: str | None = None


@dataclass
class SweepProgressed(Message):
    """A sweep run from the app said what it does (``text``), or finished a benchmark run (``result``)."""

    text: str
    result: BenchResult | None = None


@dataclass
class SweepFinished(Message):
    """A sweep run from the app ended: its report, or why it stopped."""

    report: SweepReport | None
    error: str | None = None
    cancelled: bool = False
    run_id: str | None = None
