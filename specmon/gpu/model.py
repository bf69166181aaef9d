"""GPU readings as plain data: what NVML (or the emulator) says about each GPU at one moment.

`GpuSnapshot.to_json()` is the `specmon gpus --json` shape, and `GpuSnapshot.from_json()` reads it back
(the emulator serves that same shape on `/_emulator/gpus`). A field that a GPU does not report is `None`
("N/A" on screen), never a made-up zero.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

MIB = 1024 * 1024

# NVML's clock-event (throttle) reason bits, decoded into words. The bit values are NVML's
# `nvmlClocksEventReason*` constants (the same as the older `nvmlClocksThrottleReason*`).
THROTTLE_REASON_BITS: tuple[tuple[int, str], ...] = (
    (0x001, "idle"),
    (0x002, "applications clocks"),
    (0x004, "power cap"),
    (0x008, "hw slowdown"),
    (0x010, "sync boost"),
    (0x020, "thermal"),
    (0x040, "hw thermal"),
    (0x080, "power brake"),
    (0x100, "display clocks"),
    (0x200, "board limit"),
    (0x400, "reliability"),
)

# The reasons that mean the GPU ran slower than it could: a benchmark run during which one of these was
# set is flagged. Idle, sync boost and application clocks are not slowdowns.
SLOWDOWN_REASONS: frozenset[str] = frozenset(
    {"power cap", "hw slowdown", "thermal", "hw thermal", "power brake", "board limit", "reliability"}
)


def decode_throttle_reasons(mask: int | None) -> list[str]:
    """Words for the bits set in an NVML clock-event reason mask (unknown bits become `bit 0x...`)."""
    if not mask:
        return []
    words = [word for bit, word in THROTTLE_REASON_BITS if mask & bit]
    known = 0
    for bit, _ in THROTTLE_REASON_BITS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            words.append(f"bit {bit:#x}")
            rest &= ~bit
        bit <<= 1
    return words


@dataclass
class GpuProcess:
    """A process holding memory on a GPU, with what the OS says about it.

    `state` is "running" (or another live psutil status such as "sleeping"), "defunct" (a zombie:
    exited but not reaped, its GPU memory may still be held), "gone" (no such pid any more) or
    "not visible" (not in this PID namespace, e.g. inside a container: neither alive nor dead for sure).
    """

    pid: int
    used_mib: float | None
    name: str
    alive: bool
    gpu_index: int | None = None
    user: str | None = None
    state: str = "running"
    kind: str = "compute"
    orphan: bool = False
    """An SGLang worker (``sglang::…``) whose server process is gone (its parent is no SGLang process): it lives
    on, holding the memory, until killed."""

    @property
    def zombie(self) -> bool:
        """True when a dead or defunct process still holds GPU memory: the next launch may run out of it."""
        return self.state in ("defunct", "gone") and bool(self.used_mib)

    @property
    def leftover(self) -> str | None:
        """Why the memory it holds is left over ("defunct", "gone", "orphaned", "not visible"), or None."""
        if not self.used_mib:
            return None
        if self.zombie:
            return self.state
        if self.orphan and self.alive:
            return "orphaned"
        return "not visible" if self.state == "not visible" else None

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "used_mib": self.used_mib,
            "name": self.name,
            "alive": self.alive,
            "gpu_index": self.gpu_index,
            "user": self.user,
            "state": self.state,
            "kind": self.kind,
            "zombie": self.zombie,
        } | ({"orphan": True} if self.orphan else {})  # only when set: the readings' JSON stays as it was

    @classmethod
    def from_json(cls, data: dict[str, Any], gpu_index: int | None = None) -> GpuProcess:
        alive = bool(data.get("alive", True))
        return cls(
            pid=int(data["pid"]),
            used_mib=_opt_float(data.get("used_mib")),
            name=str(data.get("name") or ""),
            alive=alive,
            gpu_index=data.get("gpu_index", gpu_index),
            user=data.get("user"),
            state=str(data.get("state") or ("running" if alive else "gone")),
            kind=str(data.get("kind") or "compute"),
            orphan=bool(data.get("orphan", False)),
        )


@dataclass
class GpuReading:
    """One GPU at one moment. `None` means not reported (not supported, no permission, or lost)."""

    index: int
    name: str | None = None
    uuid: str | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None
    memory_reserved_mib: float | None = None
    util_gpu_pct: float | None = None
    util_mem_pct: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temp_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    pcie_tx_kbs: float | None = None
    pcie_rx_kbs: float | None = None
    throttle_reasons: list[str] = field(default_factory=list)
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    processes: list[GpuProcess] = field(default_factory=list)
    error: str | None = None

    @property
    def memory_fraction(self) -> float | None:
        if self.memory_used_mib is None or not self.memory_total_mib:
            return None
        return self.memory_used_mib / self.memory_total_mib

    @property
    def slowdowns(self) -> list[str]:
        """The throttle reasons that mean the GPU ran slower than it could."""
        return [r for r in self.throttle_reasons if r in SLOWDOWN_REASONS]

    @property
    def zombie_mib(self) -> float:
        """GPU memory held by processes that are gone or defunct."""
        return sum(p.used_mib or 0.0 for p in self.processes if p.zombie)

    def to_json(self) -> dict[str, Any]:
        ecc = None
        if self.ecc_corrected or self.ecc_uncorrected:
            ecc = {"corrected": self.ecc_corrected, "uncorrected": self.ecc_uncorrected}
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "memory_used_mib": self.memory_used_mib,
            "memory_total_mib": self.memory_total_mib,
            "memory_reserved_mib": self.memory_reserved_mib,
            "util_gpu_pct": self.util_gpu_pct,
            "util_mem_pct": self.util_mem_pct,
            "power_w": self.power_w,
            "power_limit_w": self.power_limit_w,
            "temp_c": self.temp_c,
            "sm_clock_mhz": self.sm_clock_mhz,
            "mem_clock_mhz": self.mem_clock_mhz,
            "pcie_tx_kbs": self.pcie_tx_kbs,
            "pcie_rx_kbs": self.pcie_rx_kbs,
            "throttle_reasons": list(self.throttle_reasons),
            "ecc_errors": ecc,
            "error": self.error,
            "processes": [p.to_json() for p in self.processes],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GpuReading:
        index = int(data["index"])
        ecc = data.get("ecc_errors") or {}
        return cls(
            index=index,
            name=data.get("name"),
            uuid=data.get("uuid"),
            memory_used_mib=_opt_float(data.get("memory_used_mib")),
            memory_total_mib=_opt_float(data.get("memory_total_mib")),
            memory_reserved_mib=_opt_float(data.get("memory_reserved_mib")),
            util_gpu_pct=_opt_float(data.get("util_gpu_pct")),
            util_mem_pct=_opt_float(data.get("util_mem_pct")),
            power_w=_opt_float(data.get("power_w")),
            power_limit_w=_opt_float(data.get("power_limit_w")),
            temp_c=_opt_float(data.get("temp_c")),
            sm_clock_mhz=_opt_float(data.get("sm_clock_mhz")),
            mem_clock_mhz=_opt_float(data.get("mem_clock_mhz")),
            pcie_tx_kbs=_opt_float(data.get("pcie_tx_kbs")),
            pcie_rx_kbs=_opt_float(data.get("pcie_rx_kbs")),
            throttle_reasons=[str(r) for r in data.get("throttle_reasons") or []],
            ecc_corrected=ecc.get("corrected"),
            ecc_uncorrected=ecc.get("uncorrected"),
            processes=[GpuProcess.from_json(p, index) for p in data.get("processes") or []],
            error=data.get("error"),
        )


@dataclass
class GpuLink:
    """How two GPUs are connected: `kind` is "NVLink" or "PCIe"; `detail` is nvidia-smi topo's word
    (NV, PIX, PXB, PHB, NODE, SYS) for the closest common ancestor."""

    a: int
    b: int
    kind: str
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"gpus": [self.a, self.b], "kind": self.kind, "detail": self.detail}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GpuLink:
        a, b = data["gpus"]
        return cls(a=int(a), b=int(b), kind=str(data.get("kind") or "PCIe"), detail=data.get("detail"))


@dataclass
class GpuSnapshot:
    """Every GPU at one moment, or why there are none (`available=False` with `reason` in words)."""

    available: bool
    reason: str | None = None
    driver: str | None = None
    nvml_version: str | None = None
    gpus: list[GpuReading] = field(default_factory=list)
    taken_at: float = field(default_factory=time.time)
    poll_ms: float | None = None
    topology: list[GpuLink] = field(default_factory=list)
    source: str = "nvml"

    @classmethod
    def unavailable(cls, reason: str, source: str = "nvml") -> GpuSnapshot:
        return cls(available=False, reason=reason, source=source)

    @property
    def processes(self) -> list[GpuProcess]:
        return [p for gpu in self.gpus for p in gpu.processes]

    def to_json(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "reason": self.reason,
            "driver": self.driver,
            "nvml_version": self.nvml_version,
            "taken_at": self.taken_at,
            "poll_ms": self.poll_ms,
            "source": self.source,
            "topology": [link.to_json() for link in self.topology],
            "gpus": [gpu.to_json() for gpu in self.gpus],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GpuSnapshot:
        """Read the `specmon gpus --json` shape; unknown keys are ignored, missing ones become None."""
        return cls(
            available=bool(data.get("available")),
            reason=data.get("reason"),
            driver=data.get("driver"),
            nvml_version=data.get("nvml_version"),
            gpus=[GpuReading.from_json(g) for g in data.get("gpus") or []],
            taken_at=float(data.get("taken_at") or time.time()),
            poll_ms=_opt_float(data.get("poll_ms")),
            topology=[GpuLink.from_json(link) for link in data.get("topology") or []],
            source=str(data.get("source") or "nvml"),
        )


@dataclass(frozen=True)
class GpuThrottle:
    """A GPU that reported a slowdown reason during a time window (for flagging a benchmark run)."""

    gpu_index: int
    reason: str
    samples: int
    first_at: float
    last_at: float


@dataclass(frozen=True)
class GpuWindowSummary:
    """One GPU over a time window (a benchmark run): its clocks, temperature, power and slowdowns."""

    gpu_index: int
    samples: int
    sm_clock_median_mhz: float | None
    sm_clock_min_mhz: float | None
    temp_max_c: float | None
    power_max_w: float | None
    util_mean_pct: float | None
    slowdowns: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu_index": self.gpu_index,
            "samples": self.samples,
            "sm_clock_median_mhz": self.sm_clock_median_mhz,
            "sm_clock_min_mhz": self.sm_clock_min_mhz,
            "temp_max_c": self.temp_max_c,
            "power_max_w": self.power_max_w,
            "util_mean_pct": self.util_mean_pct,
            "slowdowns": list(self.slowdowns),
        }


def _opt_float(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
