"""DcgmGpuSource: GPU readings from DCGM exporter's series (read through Prometheus by the fleet), next to NVML
and the emulator's. DCGM exporter has no process table: the snapshot says so (`source` "dcgm")."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping

from specmon.gpu.model import GpuReading, GpuSnapshot

FIELDS = {
    "DCGM_FI_DEV_FB_USED": "memory_used_mib",
    "DCGM_FI_DEV_FB_FREE": "free_mib",
    "DCGM_FI_DEV_FB_RESERVED": "memory_reserved_mib",
    "DCGM_FI_DEV_GPU_UTIL": "util_gpu_pct",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "util_mem_pct",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_GPU_TEMP": "temp_c",
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz",
    "DCGM_FI_DEV_MEM_CLOCK": "mem_clock_mhz",
}
"""dcgm-exporter's default counters this source reads (MiB, %, W, °C, MHz) and the GpuReading field of each."""
MAX_GPUS = 256

Series = tuple[Mapping[str, str], float]


def snapshot_from_series(series: Iterable[Series], note: str | None = None) -> GpuSnapshot:
    """DCGM series (labels with `__name__` and `gpu`, value) as one GpuSnapshot; bad values left out."""
    readings: dict[int, dict] = {}
    for labels, value in series:
        field = FIELDS.get(labels.get("__name__", ""))
        try:
            index = int(labels.get("gpu", ""))
        except ValueError:
            continue
        if field is None or not 0 <= index < MAX_GPUS or not math.isfinite(value) or value < 0:
            continue
        reading = readings.setdefault(index, {"name": labels.get("modelName"), "uuid": labels.get("UUID")})
        reading[field] = float(value)
    if not readings:
        return GpuSnapshot.unavailable(note or "no DCGM series for this host", "dcgm")
    gpus = []
    for index in sorted(readings):
        values = readings[index]
        free = values.pop("free_mib", None)
        used = values.get("memory_used_mib")
        reserved = values.get("memory_reserved_mib") or 0.0
        total = used + free + reserved if used is not None and free is not None else None
        gpus.append(GpuReading(index=index, memory_total_mib=total, **values))
    return GpuSnapshot(available=True, gpus=gpus, source="dcgm")


class DcgmGpuSource:
    """Reads DCGM series through `read_series()` (a query of the user's Prometheus); a failure becomes an
    unavailable snapshot with the reason."""

    def __init__(self, read_series: Callable[[], list[Series]]) -> None:
        self.read_series = read_series

    def read(self) -> GpuSnapshot:
        started = time.perf_counter()
        try:
            snapshot = snapshot_from_series(self.read_series())
        except Exception as exc:  # the callable talks to Prometheus: any failure is a reason, not a crash
            snapshot = GpuSnapshot.unavailable(f"DCGM through Prometheus: {exc}", "dcgm")
        snapshot.poll_ms = (time.perf_counter() - started) * 1000.0
        return snapshot

    def close(self) -> None:
        pass
