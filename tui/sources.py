"""AppSources: the app's data sources (log follower, HTTP poller, GPU sampler), each on its own thread.

They hand what they read to callbacks that post messages; they never touch a widget.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from specmon.view.log_feed import LogFeed, follow_log

if TYPE_CHECKING:
    from specmon.bench.model import BenchProgress
    from specmon.bench.run import BenchRun
    from specmon.gpu.model import GpuSnapshot
    from specmon.gpu.sampler import GpuSampler, GpuSource
    from specmon.launch.presets import Preset
    from specmon.serving.poller import ServerPoller, ServerStatus
    from specmon.tui.config import AppConfig


class AppSources:
    """Starts and stops the sources of one app; ``stop()`` never raises."""

    def __init__(
        self,
        config: AppConfig,
        feed: LogFeed,
        on_status: Callable[[ServerStatus], object],
        on_gpus: Callable[[GpuSnapshot], object],
    ) -> None:
        self._config = config
        self._feed = feed
        self._on_status = on_status
        self._on_gpus = on_gpus
        self._follow_stop: threading.Event | None = None
        self.poller: ServerPoller | None = None
        self.gpu_sampler: GpuSampler | None = None

    def follow(self, path: str) -> None:
        """Follow ``path`` from its start into the feed (for its current generation), instead of any earlier log."""
        self.stop_following()
        stop = self._follow_stop = threading.Event()
        threading.Thread(target=follow_log, args=(path, self._feed, stop), name="follow the server log",
                         daemon=True).start()

    def stop_following(self) -> None:
        if self._follow_stop is not None:
            self._follow_stop.set()

    def start_poller(self) -> None:
        from specmon.serving.poller import ServerPoller

        self.poller = ServerPoller(
            self._config.url,
            self._on_status,
            interval_s=self._config.poll_interval_s,
            api_key=self._config.api_key,
            health_timeout_s=1.5,
        )
        self.poller.start()

    def start_gpu_sampler(self, source: GpuSource) -> None:
        from specmon.gpu.sampler import GpuSampler

        self.gpu_sampler = GpuSampler(source, interval_s=1.0, on_sample=self._on_gpus)
        self.gpu_sampler.start()

    def start_bench(self, preset: Preset | None, on_update: Callable[[BenchProgress], object]) -> BenchRun:
        """Start benchmarking the server with ``preset``'s settings, on the run's own thread; when the Traffic tab
        follows request records, the run is checked against them before it is saved (as `bench --against-traffic`),
        so the Benchmark pane flags a benchmark that does not represent that traffic."""
        from specmon.bench.run import BenchRun

        judge = None
        if self._config.traffic_paths:
            from specmon.traffic.production import judge_against

            judge = judge_against(list(self._config.traffic_paths), categories=self._config.traffic_categories)
        bench = BenchRun(
            self._config.url,
            preset.name if preset is not None else None,
            preset.bench if preset is not None else None,
            api_key=self._config.api_key,
            on_update=on_update,
            gpu_sampler=self.gpu_sampler,
            asked=dict(preset.args) if preset is not None else None,
            before_save=judge,
        )
        bench.start()
        return bench

    async def sanity_check(self, preset: Preset | None) -> tuple[str, bool]:
        """`specmon check`'s core against the server (one short generation): its summary line and verdict."""
        from specmon.serving.check import run_check

        asked = dict(preset.args) if preset is not None else None
        report = await run_check(self._config.url, self._config.api_key, asked=asked)
        return report.summary()

    def stop(self) -> None:
        """Stop every source; stopping must never keep the app from exiting."""
        self.stop_following()
        for source in (self.poller, self.gpu_sampler):
            if source is not None:
                with contextlib.suppress(Exception):
                    source.stop()
