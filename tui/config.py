"""AppConfig: what the app monitors, what it may control, and how a headless run ends."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specmon.gpu.sampler import GpuSource
    from specmon.launch.presets import Preset
    from specmon.launch.supervisor import ServerSupervisor
    from specmon.live.sampler import LiveMonitor
    from specmon.oncall.discovery import FoundServer
    from specmon.traffic.categories import Categories


@dataclass
class AppConfig:
    """What the app monitors and what it may control."""

    url: str
    log_path: str | None = None
    preset: Preset | None = None
    """The running server's preset, when known."""
    presets: dict[str, Preset] = field(default_factory=dict)
    """Presets offered for switching (with a supervisor, or attached to a server found by `specmon ps`)."""
    supervisor: ServerSupervisor | None = None
    """Set when specmon launched the server; None when attached."""
    read_only: bool = False
    """Watch only: no preset switching, no benchmarks (the --web app)."""
    attached: FoundServer | None = None
    """The server `specmon ps` found, when attached without --url: quitting may stop it."""
    emulator: bool = False
    notices: list[str] = field(default_factory=list)
    """Said when the app starts (a notification and the Benchmark pane's note): e.g. an interrupted sweep."""
    poll: bool = True
    """Poll the server's HTTP API (off for fixture-fed snapshot apps)."""
    gpu_source: GpuSource | None = None
    """Where GPU readings come from (NVML, the emulator, DCGM through Prometheus), or None for no GPU sampling."""
    live_source: Callable[[LiveMonitor], Any] | None = None
    """Builds what feeds the Live view instead of scraping `url`'s /metrics (a server read through Prometheus):
    an object with start() and stop()."""
    watched_through: str | None = None
    """What the header says the server is read through when not over its HTTP API (e.g. "Prometheus")."""
    api_key: str | None = None
    traffic_paths: list[str] = field(default_factory=list)
    """SGLang's request records to follow for the Traffic tab (--traffic, or the launched server's flags)."""
    traffic_by: str | None = None
    """--by: a key of request_parameters to class requests by, besides prompt and output length."""
    traffic_categories: Categories | None = None
    """--categories (or the config directory's file): prompt categories by the user's rules, a class axis too."""
    max_lines: int = 10_000
    flush_hz: float = 10.0
    poll_interval_s: float = 1.0
    trickle_s: float = 5.0
    """Outside a startup, fewer than ``TRICKLE_LINES`` new lines wait up to this long to be written."""
    busy_flush_s: float = 1.0
    """Outside a startup, a stream of lines is written to the log pane at most this often (each write repaints it:
    once a second, as sgtop refreshes; 0.8 s repainted a quarter more often, at ~7 ms a repaint at 200x50)."""
    gpu_idle_refresh_s: float = 10.0
    """How often the GPUs are read and the GPU pane repaints while the server is ready and no benchmark runs (else
    every second)."""
    sanity_check: bool = True
    exit_after_s: float | None = None
    """Headless runs: exit (code 0) after this many seconds, saving ``screenshot_path`` first."""
    screenshot_path: str | None = None
    screenshots_at: dict[str, str] = field(default_factory=dict)
    """Headless runs: an SVG screenshot the first time the server reaches a milestone ("capture": a graph
    capture is running, "ready": ready and answering, "failed"), event name to path."""
    exit_on: frozenset[str] = frozenset()
    """Headless runs: exit once these milestones are reached and their screenshots saved ("ready" exits 0,
    "failed" exits 1)."""
