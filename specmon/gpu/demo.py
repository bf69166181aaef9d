"""DemoGpuSource: the emulator's simulated GPUs, read from its `GET /_emulator/gpus` endpoint."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

from specmon.gpu.model import GpuReading, GpuSnapshot
from specmon.gpu.processes import fill_owners
from specmon.http.blocking import BlockingFetcher
from specmon.http.errors import AnswerRefused, AnswerTooSlow, HttpError
from specmon.inputs import MIB
from specmon.plausible import Absurd, Figures
from specmon.ports import is_loopback_host

MAX_FEED_BYTES = 4 * MIB
MAX_GPU_MIB = 16 * 1024 * 1024  # 16 TiB: no GPU holds more
MAX_PID = 2**22  # Linux's pid_max limit
MAX_NAME = 200


class DemoGpuSource:
    """Reads a GpuSnapshot (the `specmon gpus --json` shape) from `url`, the full endpoint URL such as
    `http://127.0.0.1:30001/_emulator/gpus`. An unreachable, slow, oversized or malformed answer becomes an
    unavailable snapshot with the reason; the next read tries again."""

    def __init__(self, url: str, timeout_s: float = 1.0) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._fetcher = BlockingFetcher(connect_timeout_s=timeout_s)
        try:
            self._local = is_loopback_host(urlsplit(url).hostname or "")
        except (TypeError, ValueError):
            self._local = False

    def read(self) -> GpuSnapshot:
        started = time.perf_counter()
        try:
            answer = self._fetcher.fetch("GET", self.url, limit=MAX_FEED_BYTES, deadline_s=self.timeout_s)
            if answer.status_code != 200:
                raise HttpError(f"HTTP {answer.status_code}")
            snapshot = GpuSnapshot.from_json(answer.json("the emulator GPU feed"))
            snapshot.source = "emulator"
            for reading in snapshot.gpus:
                _check_figures(reading)
            if self._local:  # the emulator runs here: its pids are this machine's
                fill_owners(snapshot.gpus)
        except (AnswerRefused, AnswerTooSlow) as exc:
            snapshot = GpuSnapshot.unavailable(f"emulator GPU feed not read: {exc}", "emulator")
        except HttpError as exc:
            snapshot = GpuSnapshot.unavailable(f"emulator GPU feed unreachable: {exc or type(exc).__name__}", "emulator")
        except Exception as exc:  # any shape of answer: a reason, never a crash
            snapshot = GpuSnapshot.unavailable(f"emulator GPU feed is malformed: {type(exc).__name__}: {exc}"[:300],
                                               "emulator")
        if snapshot.poll_ms is None:
            snapshot.poll_ms = (time.perf_counter() - started) * 1000.0
        return snapshot

    def close(self) -> None:
        self._fetcher.close()


_MIB = {"memory_used_mib", "memory_total_mib", "memory_reserved_mib"}
_RANGES = {
    **{name: MAX_GPU_MIB for name in _MIB}, "util_gpu_pct": 100.0, "util_mem_pct": 100.0, "power_w": 100_000.0,
    "power_limit_w": 100_000.0, "temp_c": 200.0, "sm_clock_mhz": 100_000.0, "mem_clock_mhz": 100_000.0,
    "pcie_tx_kbs": 1e9, "pcie_rx_kbs": 1e9, "ecc_corrected": 1e15, "ecc_uncorrected": 1e15,
}


def _check_figures(reading: GpuReading) -> None:
    """A reading of the feed whose figures cannot be true (memory over 16 TiB or over the GPU's total, a
    temperature of -1e9, a pid of 10^30) is shown as its error, never as data."""
    figures = Figures()
    for name, maximum in _RANGES.items():
        found = len(figures.absurd)
        if figures.amount(name, getattr(reading, name), maximum=maximum) is None and len(figures.absurd) > found:
            setattr(reading, name, None)  # never drawn, not even in the history charts
    total = reading.memory_total_mib
    if total and reading.memory_used_mib is not None and figures.amount(
            "memory_used_mib", reading.memory_used_mib, maximum=total * 1.01,
            why_max=f"more than the GPU's {total:,.0f} MiB") is None:
        reading.memory_used_mib = None
    if reading.name is not None and (not isinstance(reading.name, str) or len(reading.name) > MAX_NAME):
        figures.absurd.append(Absurd("name", reading.name, f"not a name of at most {MAX_NAME} characters"))
        reading.name = None
    for process in reading.processes:
        figures.count("a process's pid", process.pid, maximum=MAX_PID, minimum=1)
        figures.amount("a process's used_mib", process.used_mib, maximum=MAX_GPU_MIB)
    if figures.absurd:
        reading.error = f"absurd: {figures.absurd[0]}" + (
            f" (and {len(figures.absurd) - 1} more)" if len(figures.absurd) > 1 else "")
        reading.processes = []
