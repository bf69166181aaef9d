"""The Live view's wiring: a LiveMonitor fed by the log feed and a LiveSampler thread, shown every 2 s."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from specmon.live.sampler import LiveMonitor, LiveSampler
from specmon.live.tracker import LiveTracker
from specmon.view import state as status

if TYPE_CHECKING:
    from specmon.bench.model import BenchResult
    from specmon.bench.run import BenchRun
    from specmon.tui.config import AppConfig
    from specmon.tui.screens.main import MainScreen
    from specmon.view.log_feed import LogFeed
    from specmon.view.state import MonitorState, ServerView

REFRESH_S = 2.0
WINDOW_S = 60.0


class LiveHost(Protocol):
    """What the Live view's wiring uses of the app: its settings, log feed, preset and benchmarks, a timer, and
    the main screen to show snapshots on."""

    config: AppConfig
    feed: LogFeed
    watch: MonitorState
    bench_results: list[BenchResult]
    bench_run: BenchRun | None

    @property
    def main(self) -> MainScreen: ...

    def set_interval(self, interval: float, callback: Callable[[], Any]) -> Any: ...

    def view(self) -> ServerView: ...


class LiveWiring:
    """Starts the live sources of one app and hands its snapshots to the main screen."""

    def __init__(self, app: LiveHost) -> None:
        self.app = app
        self.monitor = LiveMonitor(LiveTracker())
        self.sampler: Any = None
        self._preset_name: str | None = None
        self._bench_id: int | None = None
        self._own_base = 0.0
        self._own_now = 0.0

    def start(self) -> None:
        app = self.app
        app.feed.observers.append(self.monitor.feed_lines)
        if app.config.live_source is not None:
            self.sampler = app.config.live_source(self.monitor)
            self.sampler.start()
        elif app.config.poll:
            self.sampler = LiveSampler(app.config.url, self.monitor, api_key=app.config.api_key)
            self.sampler.start()
        app.set_interval(REFRESH_S, self.refresh)
        self.refresh()  # the view says where it stands at once, not after the first interval

    def stop(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()

    def refresh(self) -> None:
        """Follow the preset, the server's process and specmon's own benchmark, then show a snapshot."""
        self._follow_preset()
        self._note_bench()
        supervisor = self.app.config.supervisor
        gone = self.app.watch.exited or (supervisor is not None and supervisor.returncode is not None)
        with self.app.feed.lock:
            starting = status.starting_up(self.app.view())
        with self.monitor.lock:
            self.monitor.tracker.set_process_alive(False if gone else None)
            self.monitor.tracker.set_starting(starting)
        self.app.main.show_live(self.monitor.snapshot(WINDOW_S))

    def _follow_preset(self) -> None:
        preset = self.app.watch.serving_preset
        name = preset.name if preset is not None else None
        if name == self._preset_name:
            return
        self._preset_name = name
        baseline = None
        for result in reversed(self.app.bench_results):
            accept = result.summary.get("accept_length") if isinstance(result.summary, dict) else None
            if result.preset == name and isinstance(accept, dict) and accept.get("token_weighted"):
                baseline = float(accept["token_weighted"])
                break
        if baseline is None and name is not None:
            from specmon.live.once import baseline_accept

            baseline = baseline_accept(name)
        with self.monitor.lock:
            self.monitor.tracker.set_preset(name, dict(preset.args) if preset is not None else None, baseline)

    def _note_bench(self) -> None:
        bench = self.app.bench_run
        if bench is None:
            return
        if id(bench) != self._bench_id:
            self._bench_id = id(bench)
            self._own_base = self._own_now
        tokens = sum(r.completion_tokens for r in list(bench.result.requests))
        self._own_now = self._own_base + tokens
        with self.monitor.lock:
            self.monitor.tracker.note_own_tokens(time.time(), self._own_now)
