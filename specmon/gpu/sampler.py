"""GpuSampler: reads a GPU source on its own thread, keeps a bounded history, and reports each snapshot.

The sources are `NvmlSource` (real NVML) and `DemoGpuSource` (the emulator's simulated GPUs); any object
with `read() -> GpuSnapshot` and `close()` will do. The sampler never raises into its caller: a source
that fails yields an unavailable snapshot, and the next tick tries again.
"""

from __future__ import annotations

import bisect
import contextlib
import statistics
import threading
from collections import deque
from collections.abc import Callable
from typing import Protocol

from specmon.gpu.demo import DemoGpuSource
from specmon.gpu.model import GpuReading, GpuSnapshot, GpuThrottle, GpuWindowSummary
from specmon.gpu.nvml import NvmlSource
from specmon.loop_thread import PeriodicReader

__all__ = ["DemoGpuSource", "GpuSampler", "GpuSource", "NvmlSource"]


class GpuSource(Protocol):
    """What a sampler reads: a snapshot per `read()`, and `close()` when done."""

    def read(self) -> GpuSnapshot: ...

    def close(self) -> None: ...


class GpuSampler:
    """Polls `source` every `interval_s` seconds on a daemon thread (a PeriodicReader's).

    `on_sample(snapshot)` is called on the sampler's thread (post a message from it; never touch
    widgets). The last `history_s` seconds of snapshots are kept for sparklines and for `window()`.
    """

    def __init__(
        self,
        source: GpuSource,
        interval_s: float = 1.0,
        on_sample: Callable[[GpuSnapshot], object] | None = None,
        history_s: float = 600.0,
    ) -> None:
        self.source = source
        self.on_sample = on_sample
        self.history_s = history_s
        self._runner: PeriodicReader[None] = PeriodicReader(
            "gpu-sampler", self._read, interval_s=max(0.05, float(interval_s)))
        self._history: deque[GpuSnapshot] = deque(maxlen=max(2, int(history_s / self.interval_s) + 2))
        self._lock = threading.Lock()
        self.callback_errors = 0

    @property
    def interval_s(self) -> float:
        return self._runner.interval_s

    def start(self) -> None:
        self._runner.start()

    def pace(self, interval_s: float) -> None:
        """Sample every ``interval_s`` from now on (the app's GPU pane repaints seldom while the server idles, so
        the GPUs are read as seldom); a change wakes the thread, which samples at once."""
        self._runner.pace(max(0.05, float(interval_s)))

    def stop(self, timeout: float = 2.0) -> None:
        self._runner.stop(timeout)
        with contextlib.suppress(Exception):  # closing a broken source must not raise into the caller
            self.source.close()

    @property
    def running(self) -> bool:
        return self._runner.running

    def _read(self, _: None) -> None:  # on the sampler's thread, with no event loop: a source may run its own
        self.sample_once()

    def sample_once(self) -> GpuSnapshot:
        """Read the source now (on the caller's thread), record and report the snapshot."""
        try:
            snapshot = self.source.read()
        except Exception as exc:
            snapshot = GpuSnapshot.unavailable(f"GPU source failed: {type(exc).__name__}: {exc}")
        self._record(snapshot)
        if self.on_sample is not None:
            try:
                self.on_sample(snapshot)
            except Exception:
                self.callback_errors += 1
        return snapshot

    def _record(self, snapshot: GpuSnapshot) -> None:
        with self._lock:
            self._history.append(snapshot)
            cutoff = snapshot.taken_at - self.history_s
            while self._history and self._history[0].taken_at < cutoff:
                self._history.popleft()

    @property
    def latest(self) -> GpuSnapshot | None:
        with self._lock:
            return self._history[-1] if self._history else None

    def snapshots(self) -> list[GpuSnapshot]:
        """Every kept snapshot, oldest first."""
        with self._lock:
            return list(self._history)

    def history(self, gpu_index: int, seconds: float | None = None) -> list[GpuReading]:
        """The readings of one GPU over the last `seconds` (default: all kept), oldest first."""
        snaps = self.snapshots()
        if seconds is not None and snaps:
            snaps = [s for s in snaps if s.taken_at >= snaps[-1].taken_at - seconds]
        return [g for s in snaps for g in s.gpus if g.index == gpu_index]

    def window(self, t0: float, t1: float) -> list[GpuSnapshot]:
        """The snapshots taken between t0 and t1 (epoch seconds, `time.time()`), inclusive."""
        snaps = self.snapshots()
        times = [s.taken_at for s in snaps]
        return snaps[bisect.bisect_left(times, t0) : bisect.bisect_right(times, t1)]

    def throttled_during(self, t0: float, t1: float) -> list[GpuThrottle]:
        """Each GPU and slowdown reason (power cap, thermal, ...) seen between t0 and t1."""
        found: dict[tuple[int, str], list[float]] = {}
        for snap in self.window(t0, t1):
            for gpu in snap.gpus:
                for reason in gpu.slowdowns:
                    found.setdefault((gpu.index, reason), []).append(snap.taken_at)
        return [
            GpuThrottle(gpu_index=index, reason=reason, samples=len(times), first_at=times[0], last_at=times[-1])
            for (index, reason), times in sorted(found.items())
        ]

    def summarize(self, t0: float, t1: float) -> list[GpuWindowSummary]:
        """Per GPU over [t0, t1]: median and lowest SM clock, hottest temperature, peak power, mean
        utilization and the slowdown reasons seen (for the benchmark's record and throttle flag)."""
        by_gpu: dict[int, list[GpuReading]] = {}
        for snap in self.window(t0, t1):
            for gpu in snap.gpus:
                if gpu.error is None:
                    by_gpu.setdefault(gpu.index, []).append(gpu)
        summaries = []
        for index, readings in sorted(by_gpu.items()):
            clocks = [r.sm_clock_mhz for r in readings if r.sm_clock_mhz is not None]
            temps = [r.temp_c for r in readings if r.temp_c is not None]
            powers = [r.power_w for r in readings if r.power_w is not None]
            utils = [r.util_gpu_pct for r in readings if r.util_gpu_pct is not None]
            slowdowns = sorted({reason for r in readings for reason in r.slowdowns})
            summaries.append(
                GpuWindowSummary(
                    gpu_index=index,
                    samples=len(readings),
                    sm_clock_median_mhz=statistics.median(clocks) if clocks else None,
                    sm_clock_min_mhz=min(clocks) if clocks else None,
                    temp_max_c=max(temps) if temps else None,
                    power_max_w=max(powers) if powers else None,
                    util_mean_pct=statistics.fmean(utils) if utils else None,
                    slowdowns=tuple(slowdowns),
                )
            )
        return summaries
