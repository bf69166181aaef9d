"""Recorded GPU readings for the GPU pane's tests and benchmarks: load one, replay it as a moving series."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from specmon.gpu.model import GpuSnapshot

FIXTURES = Path(__file__).parents[1] / "fixtures" / "gpu"


def load(name: str) -> GpuSnapshot:
    """The recorded snapshot ``tests/fixtures/gpu/NAME``."""
    return GpuSnapshot.from_json(json.loads((FIXTURES / name).read_text()))


def replay(snapshot: GpuSnapshot, count: int = 30) -> list[GpuSnapshot]:
    """`count` snapshots one second apart whose utilization and memory move deterministically."""
    out = []
    for step in range(count):
        snap = copy.deepcopy(snapshot)
        snap.taken_at += step
        for gpu in snap.gpus:
            if gpu.util_gpu_pct is not None:
                gpu.util_gpu_pct = float((gpu.util_gpu_pct + 7 * step + 13 * gpu.index) % 101)
            if gpu.memory_used_mib is not None:
                gpu.memory_used_mib = min(gpu.memory_total_mib, gpu.memory_used_mib * (0.6 + 0.4 * step / count))
        out.append(snap)
    return out
