"""Short texts for GPU readings, shared by `specmon gpus` and the GPU pane (N/A for what is not reported)."""

from __future__ import annotations

from specmon.tui.gpu.model import GpuProcess, GpuReading

NA = "N/A"


def gib(mib: float | None, digits: int = 1) -> str:
    return NA if mib is None else f"{mib / 1024:.{digits}f}"


def memory(reading: GpuReading) -> str:
    """`125.4/140.4 GiB`."""
    return f"{gib(reading.memory_used_mib)}/{gib(reading.memory_total_mib)} GiB"


def pct(value: float | None) -> str:
    return NA if value is None else f"{value:.0f}%"


def power(reading: GpuReading) -> str:
    """`512/700 W`, or `512 W` without a known limit."""
    if reading.power_w is None:
        return NA
    if reading.power_limit_w is None:
        return f"{reading.power_w:.0f} W"
    return f"{reading.power_w:.0f}/{reading.power_limit_w:.0f} W"


def temp(value: float | None) -> str:
    return NA if value is None else f"{value:.0f}°C"


def mhz(value: float | None) -> str:
    return NA if value is None else f"{value:.0f} MHz"


def rate(kbs: float | None) -> str:
    """NVML's KB/s as a short rate: `850 KB/s`, `205 MB/s`, `12.3 GB/s`."""
    if kbs is None:
        return NA
    if kbs < 1000:
        return f"{kbs:.0f} KB/s"
    if kbs < 1_000_000:
        return f"{kbs / 1000:.0f} MB/s"
    return f"{kbs / 1_000_000:.1f} GB/s"


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
    return proc.state
