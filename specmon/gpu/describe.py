"""GPU readings as short texts, shared by `specmon gpus` and the GPU pane (N/A for what is not reported)."""

from __future__ import annotations

from specmon.gpu.model import GpuProcess, GpuReading
from specmon.units import NA, gib, rate


def memory(reading: GpuReading) -> str:
    """`125.4/140.4 GiB`."""
    return f"{gib(reading.memory_used_mib)}/{gib(reading.memory_total_mib)} GiB"


def power(reading: GpuReading) -> str:
    """`512/700 W`, or `512 W` without a known limit."""
    if reading.power_w is None:
        return NA
    if reading.power_limit_w is None:
        return f"{reading.power_w:.0f} W"
    return f"{reading.power_w:.0f}/{reading.power_limit_w:.0f} W"


def pcie(reading: GpuReading) -> str:
    """`↑205 MB/s ↓93 MB/s` (TX up, RX down)."""
    if reading.pcie_tx_kbs is None and reading.pcie_rx_kbs is None:
        return NA
    return f"↑{rate(reading.pcie_tx_kbs)} ↓{rate(reading.pcie_rx_kbs)}"


def throttle(reading: GpuReading) -> str:
    """The slowdown reasons, or `-` when clocks are free (idle and sync boost are not slowdowns)."""
    return ", ".join(reading.slowdowns) or "-"


def ecc(reading: GpuReading) -> str | None:
    """`ECC 3 corrected, 1 uncorrected`, or None when there are none (or ECC is not reported)."""
    if not reading.ecc_corrected and not reading.ecc_uncorrected:
        return None
    return f"ECC {reading.ecc_corrected or 0} corrected, {reading.ecc_uncorrected or 0} uncorrected"


def process_memory(proc: GpuProcess) -> str:
    return NA if proc.used_mib is None else f"{proc.used_mib / 1024:.1f} GiB"


def process_state(proc: GpuProcess) -> str:
    """`running`, or `ZOMBIE (gone)` / `ZOMBIE (defunct)` for dead processes that still hold memory."""
    if proc.zombie:
        return f"ZOMBIE ({proc.state})"
    if proc.leftover == "orphaned":
        return "ORPHANED"
    return proc.state
