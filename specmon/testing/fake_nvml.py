"""A fake NVML module with the pynvml functions specmon calls, for tests and `nvml_poll.py --fake`.

It raises the real `pynvml.NVMLError` subclasses (pynvml imports without libnvidia-ml), so the wrapper
sees exactly what the real library would raise: set `init_error`, `FakeGpu.fail[name] = code`, or
`FakeGpu.lost = True`, or call `driver_gone()` / `driver_back()` mid-run.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

MIB = 1024 * 1024


@dataclass
class FakeGpu:
    """One simulated GPU; values in NVML's units (bytes, mW, MHz, KB/s)."""

    name: str = "NVIDIA H200"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    total_mib: int = 143771
    used_mib: int = 0
    reserved_mib: int = 540
    util_gpu: int = 0
    util_mem: int = 0
    power_mw: int = 75_000
    power_limit_mw: int = 700_000
    temp_c: int = 30
    sm_clock: int = 345
    mem_clock: int = 2619
    throttle_mask: int = 0x1
    pcie_tx_kbs: int = 0
    pcie_rx_kbs: int = 0
    ecc: tuple[int, int] = (0, 0)
    processes: list[tuple[int, int]] = field(default_factory=list)  # (pid, used bytes or None)
    graphics_processes: list[tuple[int, int]] = field(default_factory=list)
    nvlink: bool = True
    fail: dict[str, int] = field(default_factory=dict)  # function name -> NVML error code
    lost: bool = False


class FakeNvml:
    """Stands in for the pynvml module. Constants are the real ones; functions are simulated."""

    NVMLError = pynvml.NVMLError

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        init_error: int | None = None,
        pcie_delay_s: float = 0.0,
        driver: str = "570.124.06",
        nvml_version: str = "12.570.124.06",
        memory_v2: bool = True,
        serialized: bool = False,
    ) -> None:
        self.gpus = list(gpus or [])
        self.init_error = init_error
        self.pcie_delay_s = pcie_delay_s
        self.driver = driver
        self.nvml_version = nvml_version
        self.memory_v2 = memory_v2
        self.initialized = False
        self.gone_code: int | None = None
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()
        self.serialized = serialized  # every call waits for a PCIe call in progress, like the driver's RM lock
        self._rm_lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        value = getattr(pynvml, name)
        if callable(value):  # never reach the real library from the fake
            raise AttributeError(name)
        return value

    @classmethod
    def h200s(cls, count: int = 8, **kwargs: Any) -> FakeNvml:
        """`count` busy H200s serving a model with tensor parallelism."""
        gpus = [
            FakeGpu(
                uuid=f"GPU-5f3c{i:04x}-9a1e-4b7d-8c21-3e0f6d{i:06x}",
                used_mib=128_400 + 37 * i,
                util_gpu=88 + i % 5,
                util_mem=41 + i % 7,
                power_mw=512_000 + 9_000 * i,
                temp_c=52 + i % 4,
                sm_clock=1980,
                throttle_mask=0,
                pcie_tx_kbs=210_000 + 1_000 * i,
                pcie_rx_kbs=95_000 + 500 * i,
                processes=[(41000 + i, (128_400 + 37 * i - 600) * MIB)],
            )
            for i in range(count)
        ]
        return cls(gpus, **kwargs)

    # failure switches
    def driver_gone(self, code: int = pynvml.NVML_ERROR_DRIVER_NOT_LOADED) -> None:
        self.gone_code = code
        self.init_error = code

    def driver_back(self) -> None:
        self.gone_code = None
        self.init_error = None

    def _enter(self, name: str) -> None:
        with self._lock:
            self.calls[name] = self.calls.get(name, 0) + 1
        if self.gone_code is not None:
            raise pynvml.NVMLError(self.gone_code)
        if not self.initialized:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        if self.serialized and name != "nvmlDeviceGetPcieThroughput":
            with self._rm_lock:
                pass

    def _device(self, name: str, handle: Any) -> FakeGpu:
        """The GPU of a handle, for a per-device call (counted and failed as _enter does)."""
        self._enter(name)
        gpu = self.gpus[handle.index]
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        if name in gpu.fail:
            raise pynvml.NVMLError(gpu.fail[name])
        return gpu

    # pynvml's API
    def nvmlInit(self) -> None:
        with self._lock:
            self.calls["nvmlInit"] = self.calls.get("nvmlInit", 0) + 1
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._enter("nvmlSystemGetNVMLVersion")
        return self.nvml_version

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._enter("nvmlDeviceGetHandleByIndex")
        if index >= len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if self.gpus[index].lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return SimpleNamespace(index=index)

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._device("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return self._device("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        gpu = self._device("nvmlDeviceGetMemoryInfo", handle)
        if version:
            if not self.memory_v2:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            used, reserved = gpu.used_mib * MIB, gpu.reserved_mib * MIB
            return SimpleNamespace(
                total=gpu.total_mib * MIB, used=used, reserved=reserved, free=(gpu.total_mib * MIB) - used - reserved
            )
        used = (gpu.used_mib + gpu.reserved_mib) * MIB
        return SimpleNamespace(total=gpu.total_mib * MIB, used=used, free=gpu.total_mib * MIB - used)

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        gpu = self._device("nvmlDeviceGetUtilizationRates", handle)
        return SimpleNamespace(gpu=gpu.util_gpu, memory=gpu.util_mem)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetPowerManagementLimit", handle).power_limit_mw

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        return self._device("nvmlDeviceGetTemperature", handle).temp_c

    def nvmlDeviceGetClockInfo(self, handle: Any, clock: int) -> int:
        gpu = self._device("nvmlDeviceGetClockInfo", handle)
        return gpu.sm_clock if clock == pynvml.NVML_CLOCK_SM else gpu.mem_clock

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetCurrentClocksEventReasons", handle).throttle_mask

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self._device("nvmlDeviceGetCurrentClocksThrottleReasons", handle).throttle_mask

    def nvmlDeviceGetPcieThroughput(self, handle: Any, counter: int) -> int:
        gpu = self._device("nvmlDeviceGetPcieThroughput", handle)
        if self.pcie_delay_s:
            if self.serialized:
                with self._rm_lock:
                    time.sleep(self.pcie_delay_s)
            else:
                time.sleep(self.pcie_delay_s)
        return gpu.pcie_tx_kbs if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else gpu.pcie_rx_kbs

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int:
        gpu = self._device("nvmlDeviceGetTotalEccErrors", handle)
        return gpu.ecc[1] if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else gpu.ecc[0]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        gpu = self._device("nvmlDeviceGetComputeRunningProcesses", handle)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in gpu.processes]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[Any]:
        gpu = self._device("nvmlDeviceGetGraphicsRunningProcesses", handle)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in gpu.graphics_processes]

    def nvmlDeviceGetP2PStatus(self, a: Any, b: Any, index: int) -> int:
        gpu_a = self._device("nvmlDeviceGetP2PStatus", a)
        gpu_b = self.gpus[b.index]
        ok = gpu_a.nvlink and gpu_b.nvlink and index == pynvml.NVML_P2P_CAPS_INDEX_NVLINK
        return pynvml.NVML_P2P_STATUS_OK if ok else pynvml.NVML_P2P_STATUS_NOT_SUPPORTED

    def nvmlDeviceGetTopologyCommonAncestor(self, a: Any, b: Any) -> int:
        self._device("nvmlDeviceGetTopologyCommonAncestor", a)
        same_half = (a.index < len(self.gpus) // 2) == (b.index < len(self.gpus) // 2)
        return pynvml.NVML_TOPOLOGY_NODE if same_half else pynvml.NVML_TOPOLOGY_SYSTEM
