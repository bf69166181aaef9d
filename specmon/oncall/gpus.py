"""GPU readings for on-call commands: memory per server, and whether a stopped server's GPUs are free again.

Real GPUs are read through NVML; a demo server's simulated GPUs through the emulator's side port. A reading
that is not available (no driver, the emulator gone) says so instead of raising.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from specmon.gpu.model import GpuSnapshot

if TYPE_CHECKING:
    from specmon.gpu.sampler import GpuSource

FREE_MARGIN_MIB = 1024.0
"""A GPU counts as free again when its used memory is back within this of its level before launch."""


def read_gpus(gpu_url: str | None = None) -> GpuSnapshot:
    """One reading: the emulator's simulated GPUs when `gpu_url` is given, else NVML (never raises)."""
    source: GpuSource
    if gpu_url:
        from specmon.gpu.demo import DemoGpuSource

        source = DemoGpuSource(gpu_url, timeout_s=0.5)
    else:
        from specmon.gpu.nvml import NvmlSource

        source = NvmlSource(pcie="off")
    try:
        return source.read()
    finally:
        source.close()


def memory_by_gpu(snapshot: GpuSnapshot) -> dict[str, float]:
    """Used MiB per GPU index (as strings, the state file's keys)."""
    return {str(g.index): float(g.memory_used_mib) for g in snapshot.gpus if g.memory_used_mib is not None}


def memory_of(snapshot: GpuSnapshot, pids: Iterable[int]) -> float | None:
    """MiB the given processes hold over all GPUs; None when the GPUs could not be read."""
    if not snapshot.available:
        return None
    wanted = set(pids)
    return sum(p.used_mib or 0.0 for p in snapshot.processes if p.pid in wanted)


def still_held(snapshot: GpuSnapshot, pids: Iterable[int], baseline: dict[str, float]) -> list[str]:
    """Why the GPUs are not free yet (empty when they are): a process of the server still listed, or memory
    above its level before launch."""
    if not snapshot.available:
        return []
    wanted = set(pids)
    reasons = [
        f"pid {p.pid} holds {p.used_mib or 0:.0f} MiB on GPU {p.gpu_index}"
        for p in snapshot.processes
        if p.pid in wanted
    ]
    for gpu in snapshot.gpus:
        before = baseline.get(str(gpu.index))
        if (
            before is not None
            and gpu.memory_used_mib is not None
            and gpu.memory_used_mib > before + FREE_MARGIN_MIB
        ):
            reasons.append(
                f"GPU {gpu.index} holds {gpu.memory_used_mib:.0f} MiB (was {before:.0f} before launch)"
            )
    return reasons
