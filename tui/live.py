"""The Live view's wiring: a LiveMonitor fed by the log feed and a LiveSampler thread, shown every 2 s."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from specmon.live.paying import CurveFinder, with_speculation_pays
from specmon.live.sampler import LiveMonitor, LiveSampler
from specmon.live.tracker import LiveTracker
from specmon.sweep.curves import StoredCurves
from specmon.view import state as status

if TYPE_CHECKING:
    from specmon.bench.model import BenchResult
    from specmon.tui.config import AppConfig
    from specmon.tui.screens.main import MainScreen
    from specmon.view.log_feed import LogFeed
    from specmon.view.state import MonitorState, ServerView

REFRESH_S = 2.0
HISTORY_S = 3600.0
"""The observed load a grid sweep's recommendation is weighted by: the last hour."""
WINDOW_S = 60.0


class LiveHost(Protocol):
    """What the Live view's wiring uses of the app: its settings, log feed, preset and benchmark results, a
    timer, and the main screen to show snapshots on."""

    config: AppConfig
    feed: LogFeed
    server_state: MonitorState
    bench_results: list[BenchResult]

    @property
    def main(self) -> MainScreen: ...

    def set_interval(self, interval: float, callback: Callable[[], Any]) -> Any: ...

    def view(self) -> ServerView: ...


class LiveWiring:
    """Starts the live sources of one app and hands its snapshots to the main screen."""

    def __init__(self, app: LiveHost) -> None:
        self.app = app
        self.monitor = LiveMonitor(LiveTracker())
        self.curves: CurveFinder = StoredCurves()
        self.sampler: Any = None
        self._followed: tuple[str | None, int] | None = None

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
        """Follow the preset and the server's process, then show a snapshot."""
        self._follow_preset()
        supervisor = self.app.config.supervisor
        gone = self.app.server_state.exited or (supervisor is not None and supervisor.returncode is not None)
        with self.app.feed.lock:
            starting = status.starting_up(self.app.view())
        with self.monitor.lock:
            self.monitor.tracker.set_process_alive(False if gone else None)
            self.monitor.tracker.set_starting(starting)
            spec = self.monitor.tracker.spec
        snapshot = with_speculation_pays(self.monitor.snapshot(WINDOW_S), spec, self.curves, time.time())
        self.app.main.show_live(snapshot)

    def running_history(self) -> tuple[list[float | None], float, str] | None:
        """The running-request counts over the last hour, the span they cover and where they are from: the
        Prometheus a drill-down reads (its range of the server's series), else this run's Live history (a point
        per 5 s); None with fewer than two points."""
        from_prometheus = getattr(self.sampler, "running_history", None)
        if from_prometheus is not None:
            return from_prometheus[0], from_prometheus[1], "Prometheus"
        with self.monitor.lock:
            points = list(self.monitor.tracker.run.points)
        if len(points) < 2:
            return None
        recent = [p for p in points if points[-1].t - p.t <= HISTORY_S]
        return [p.running for p in recent], recent[-1].t - recent[0].t, "the Live view"

    def _follow_preset(self) -> None:
        """The preset now serving and its last finished benchmark's acceptance (again when a run finishes)."""
        preset = self.app.server_state.serving_preset
        name = preset.name if preset is not None else None
        followed = (name, len(self.app.bench_results))
        if followed == self._followed:
            return
        self._followed = followed
        from specmon.bench.report import last_finished_accept

        baseline = last_finished_accept(self.app.bench_results, name)
        if baseline is None and name is not None:
            from specmon.live.once import baseline_accept

            baseline = baseline_accept(name)
        with self.monitor.lock:
            self.monitor.tracker.set_preset(name, dict(preset.args) if preset is not None else None, baseline)
