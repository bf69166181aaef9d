"""A safe wrapper around NVML (nvidia-ml-py) and the GPU source that reads every GPU through it.

Every NVML call may fail, and every failure becomes a state: no library or driver makes the whole snapshot
`available=False` with the reason in words; a call a GPU does not support leaves that field `None` (N/A);
a lost GPU keeps its row with `error="GPU is lost"`; and if NVML itself goes away mid-run, the next read
initialises it again, so the source recovers when the driver comes back.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from specmon.gpu.model import MIB, GpuLink, GpuProcess, GpuReading, GpuSnapshot, decode_throttle_reasons
from specmon.gpu.processes import ProcessInspector

# NVML return codes (nvml.h); fixed by the C API, so they are spelled out here rather than looked up.
ERR_UNINITIALIZED = 1
ERR_NOT_SUPPORTED = 3
ERR_NO_PERMISSION = 4
ERR_DRIVER_NOT_LOADED = 9
ERR_LIBRARY_NOT_FOUND = 12
ERR_FUNCTION_NOT_FOUND = 13
ERR_GPU_IS_LOST = 15
ERR_LIB_RM_VERSION_MISMATCH = 18
ERR_ARGUMENT_VERSION_MISMATCH = 25

_INIT_REASONS = {
    ERR_LIBRARY_NOT_FOUND: "libnvidia-ml.so not found: no NVIDIA driver on this machine, or a container "
    "started without the GPU driver libraries",
    ERR_DRIVER_NOT_LOADED: "the NVIDIA kernel driver is not loaded",
    ERR_LIB_RM_VERSION_MISMATCH: "driver/library version mismatch: libnvidia-ml does not match the loaded "
    "kernel driver (reload the driver or reboot after a driver upgrade)",
    ERR_NO_PERMISSION: "no permission to open the NVIDIA devices",
    ERR_UNINITIALIZED: "NVML is not initialised",
}

# Codes after which NVML as a whole is unusable until initialised again.
_FATAL = frozenset({ERR_UNINITIALIZED, ERR_DRIVER_NOT_LOADED, ERR_LIBRARY_NOT_FOUND, ERR_LIB_RM_VERSION_MISMATCH})
# Codes that mean "this GPU will never answer this call": the call is not made again for that GPU.
_NEVER = frozenset({ERR_NOT_SUPPORTED, ERR_FUNCTION_NOT_FOUND, ERR_ARGUMENT_VERSION_MISMATCH})

_TOPOLOGY_WORDS = {0: "same board", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_NVLINK_P2P_INDEX = 2  # NVML_P2P_CAPS_INDEX_NVLINK
_P2P_OK = 0
_MEMORY_V2 = 0x02000028  # nvmlMemory_v2
_ECC_VOLATILE = 0
_ECC_CORRECTED, _ECC_UNCORRECTED = 0, 1
_CLOCK_SM, _CLOCK_MEM = 1, 2
_PCIE_TX, _PCIE_RX = 0, 1
_TEMP_GPU = 0


class NvmlUnavailable(Exception):
    """NVML cannot be used at all; `reason` says why in words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class GpuLost(Exception):
    """One GPU stopped answering (NVML_ERROR_GPU_IS_LOST)."""


def error_code(exc: BaseException) -> int | None:
    """The NVML return code carried by a pynvml.NVMLError (None for anything else)."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class Nvml:
    """NVML behind calls that never raise except to say the GPU or NVML itself is gone.

    `module` is the pynvml module, or a fake with the same functions (for tests); by default pynvml is
    imported on first use.
    """

    def __init__(self, module: Any = None) -> None:
        self._module = module
        self.initialized = False
        self.reason: str | None = None
        self.call_seconds: dict[str, float] = {}
        self.call_counts: dict[str, int] = {}
        self._never: set[tuple[str, int | None]] = set()
        self._lock = threading.Lock()

    @property
    def module(self) -> Any:
        return self._module

    def init(self) -> bool:
        """Initialise NVML; on failure `reason` says why and False is returned."""
        if self.initialized:
            return True
        if self._module is None:
            try:
                import pynvml
            except ImportError as exc:
                self.reason = f"nvidia-ml-py (pynvml) is not installed: {exc}"
                return False
            self._module = pynvml
        try:
            self._module.nvmlInit()
        except Exception as exc:
            code = error_code(exc)
            self.reason = _INIT_REASONS.get(code) if code is not None else None
            self.reason = self.reason or f"NVML failed to initialise: {exc}"
            return False
        self.initialized = True
        self.reason = None
        with self._lock:
            self._never.clear()
        return True

    def shutdown(self) -> None:
        if self.initialized:
            self.initialized = False
            with contextlib.suppress(Exception):  # already broken: nothing left to release
                self._module.nvmlShutdown()

    def call(self, name: str, *args: Any, gpu: int | None = None, label: str | None = None, **kwargs: Any) -> Any:
        """`module.name(*args)`, or None when this GPU does not answer it (not supported, no permission,
        any other error). Raises GpuLost when the GPU is lost, NvmlUnavailable when NVML itself is.

        `label` names the call for timing and for remembering that a GPU does not support it (default:
        `name`; two uses of one function with different arguments get different labels)."""
        label = label or name
        key = (label, gpu)
        if key in self._never:
            return None
        fn = getattr(self._module, name, None)
        if fn is None:
            with self._lock:
                self._never.add(key)
            return None
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            code = error_code(exc)
            if code is None:
                if isinstance(exc, (TypeError, AttributeError)):  # this nvidia-ml-py lacks the call's form
                    with self._lock:
                        self._never.add(key)
                return None
            if code == ERR_GPU_IS_LOST:
                raise GpuLost(f"GPU {gpu} is lost") from exc
            if code in _FATAL:
                raise NvmlUnavailable(
                    f"NVML stopped answering: {_INIT_REASONS.get(code) or exc}"
                ) from exc
            if code in _NEVER:
                with self._lock:
                    self._never.add(key)
            return None
        finally:
            elapsed = time.perf_counter() - started
            with self._lock:
                self.call_seconds[label] = self.call_seconds.get(label, 0.0) + elapsed
                self.call_counts[label] = self.call_counts.get(label, 0) + 1


class NvmlSource:
    """Reads every GPU through NVML; `read()` returns a GpuSnapshot and never raises.

    NVML's PCIe-throughput call blocks ~20 ms per GPU and direction, and the driver may serialise NVML
    calls behind it, so PCIe is kept off the poll's path. With `pcie="background"` (the sampler's
    default) a round of PCIe calls is started on a small thread pool at the end of a read, runs while the
    sampler sleeps, and its values appear in the next reads; a round still running is never started
    twice. With `pcie="inline"` (one-shot `specmon gpus`) the round runs in parallel with the other reads
    and the read waits up to `pcie_wait_s` for it. `pcie_every=N` starts a round only every N-th read;
    `pcie="off"` never reads PCIe.
    """

    def __init__(
        self,
        module: Any = None,
        pcie: str = "background",
        pcie_every: int = 1,
        pcie_wait_s: float = 1.0,
        inspector: ProcessInspector | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if pcie not in ("background", "inline", "off"):
            raise ValueError(f"pcie must be background, inline or off, not {pcie!r}")
        self.nvml = Nvml(module)
        self.pcie = pcie
        self.pcie_every = max(1, int(pcie_every))
        self.pcie_wait_s = pcie_wait_s
        self.inspector = inspector or ProcessInspector()
        self._clock = clock
        self._reads = 0
        self._driver: str | None = None
        self._nvml_version: str | None = None
        self._topology: list[GpuLink] | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._pool_size = 0
        self._pcie_pending: dict[tuple[int, int], Future] = {}
        self._pcie_last: dict[tuple[int, int], float | None] = {}

    def read(self) -> GpuSnapshot:
        """One reading of every GPU, or an unavailable snapshot with the reason."""
        started = time.perf_counter()
        taken_at = self._clock()
        try:
            snapshot = self._read(taken_at)
        except NvmlUnavailable as exc:
            self._reset()
            snapshot = GpuSnapshot.unavailable(exc.reason)
            snapshot.taken_at = taken_at
        except Exception as exc:  # a bug or an unexpected library error must not kill the sampler
            self._reset()
            snapshot = GpuSnapshot.unavailable(f"reading NVML failed: {type(exc).__name__}: {exc}")
            snapshot.taken_at = taken_at
        snapshot.poll_ms = (time.perf_counter() - started) * 1000.0
        return snapshot

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)  # no PCIe call may outlive nvmlShutdown
            self._pool = None
        self._reset()

    def _reset(self) -> None:
        # An NVML call still running on the PCIe pool while nvmlShutdown runs can crash the process (seen once
        # on a real H200): let the in-flight ones (~20 ms each) finish first.
        wait([f for f in self._pcie_pending.values() if not f.cancel()], timeout=2.0)
        self.nvml.shutdown()
        self._topology = None
        self._pcie_pending.clear()
        self._pcie_last.clear()

    def _read(self, taken_at: float) -> GpuSnapshot:
        nvml = self.nvml
        if not nvml.initialized:
            if not nvml.init():
                snapshot = GpuSnapshot.unavailable(nvml.reason or "NVML is unavailable")
                snapshot.taken_at = taken_at
                return snapshot
            self._driver = self._opt_text(nvml.call("nvmlSystemGetDriverVersion"))
            self._nvml_version = self._opt_text(nvml.call("nvmlSystemGetNVMLVersion"))
        count = nvml.call("nvmlDeviceGetCount")
        if count is None:
            raise NvmlUnavailable("NVML could not count the GPUs")
        handles: dict[int, Any] = {}
        lost: dict[int, str] = {}
        for index in range(int(count)):
            try:
                handle = nvml.call("nvmlDeviceGetHandleByIndex", index, gpu=index)
            except GpuLost:
                handle = None
            if handle is None:
                lost[index] = "GPU is lost: NVML gives no handle for it"
            else:
                handles[index] = handle

        self._reads += 1
        pcie_due = self.pcie != "off" and (self._reads - 1) % self.pcie_every == 0
        if pcie_due and self.pcie == "inline":
            self._submit_pcie(handles)

        readings = []
        for index in range(int(count)):
            if index in lost:
                readings.append(GpuReading(index=index, error=lost[index]))
                continue
            try:
                readings.append(self._read_gpu(index, handles[index]))
            except GpuLost:
                readings.append(GpuReading(index=index, error="GPU is lost (fell off the bus or hung)"))
                handles.pop(index)

        self._collect_pcie(self.pcie_wait_s if self.pcie == "inline" else 0.0)
        for reading in readings:
            if reading.error is None:
                reading.pcie_tx_kbs = self._pcie_last.get((reading.index, _PCIE_TX))
                reading.pcie_rx_kbs = self._pcie_last.get((reading.index, _PCIE_RX))
        self.inspector.describe(readings)

        if self._topology is None:
            self._topology = self._read_topology(handles)
        if pcie_due and self.pcie == "background":
            self._submit_pcie(handles)
        return GpuSnapshot(
            available=True,
            driver=self._driver,
            nvml_version=self._nvml_version,
            gpus=readings,
            taken_at=taken_at,
            topology=list(self._topology),
        )

    @staticmethod
    def _opt_text(value: Any) -> str | None:
        return None if value is None else _text(value)

    def _read_gpu(self, index: int, handle: Any) -> GpuReading:
        call = self.nvml.call
        reading = GpuReading(index=index)
        reading.name = self._opt_text(call("nvmlDeviceGetName", handle, gpu=index))
        reading.uuid = self._opt_text(call("nvmlDeviceGetUUID", handle, gpu=index))
        self._read_memory(reading, handle)
        util = call("nvmlDeviceGetUtilizationRates", handle, gpu=index)
        if util is not None:
            reading.util_gpu_pct = float(util.gpu)
            reading.util_mem_pct = float(util.memory)
        power = call("nvmlDeviceGetPowerUsage", handle, gpu=index)
        reading.power_w = None if power is None else power / 1000.0
        limit = call("nvmlDeviceGetEnforcedPowerLimit", handle, gpu=index)
        if limit is None:
            limit = call("nvmlDeviceGetPowerManagementLimit", handle, gpu=index)
        reading.power_limit_w = None if limit is None else limit / 1000.0
        temp = call("nvmlDeviceGetTemperature", handle, _TEMP_GPU, gpu=index)
        reading.temp_c = None if temp is None else float(temp)
        sm = call("nvmlDeviceGetClockInfo", handle, _CLOCK_SM, gpu=index, label="nvmlDeviceGetClockInfo(SM)")
        reading.sm_clock_mhz = None if sm is None else float(sm)
        mem = call("nvmlDeviceGetClockInfo", handle, _CLOCK_MEM, gpu=index, label="nvmlDeviceGetClockInfo(MEM)")
        reading.mem_clock_mhz = None if mem is None else float(mem)
        mask = call("nvmlDeviceGetCurrentClocksEventReasons", handle, gpu=index)
        if mask is None:
            mask = call("nvmlDeviceGetCurrentClocksThrottleReasons", handle, gpu=index)
        reading.throttle_reasons = decode_throttle_reasons(mask)
        ecc = "nvmlDeviceGetTotalEccErrors"
        corrected = call(ecc, handle, _ECC_CORRECTED, _ECC_VOLATILE, gpu=index, label=f"{ecc}(corrected)")
        uncorrected = call(ecc, handle, _ECC_UNCORRECTED, _ECC_VOLATILE, gpu=index, label=f"{ecc}(uncorrected)")
        reading.ecc_corrected = None if corrected is None else int(corrected)
        reading.ecc_uncorrected = None if uncorrected is None else int(uncorrected)
        reading.processes = self._read_processes(index, handle)
        return reading

    def _read_memory(self, reading: GpuReading, handle: Any) -> None:
        # v2 reports "used" without the driver's reserved memory, as nvidia-smi does; v1 includes it.
        name, index = "nvmlDeviceGetMemoryInfo", reading.index
        info = self.nvml.call(name, handle, version=_MEMORY_V2, gpu=index, label=f"{name}(v2)")
        if info is not None:
            reading.memory_reserved_mib = getattr(info, "reserved", 0) / MIB
        else:
            info = self.nvml.call(name, handle, gpu=index, label=f"{name}(v1)")
        if info is not None:
            reading.memory_used_mib = info.used / MIB
            reading.memory_total_mib = info.total / MIB

    def _read_processes(self, index: int, handle: Any) -> list[GpuProcess]:
        by_pid: dict[int, GpuProcess] = {}
        for kind, name in (
            ("compute", "nvmlDeviceGetComputeRunningProcesses"),
            ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
        ):
            for info in self.nvml.call(name, handle, gpu=index) or []:
                pid = int(info.pid)
                used = getattr(info, "usedGpuMemory", None)
                used_mib = None if used is None else used / MIB
                if pid in by_pid:
                    known = by_pid[pid]
                    if known.used_mib is None:
                        known.used_mib = used_mib
                    known.kind = "compute+graphics" if known.kind != kind else kind
                    continue
                by_pid[pid] = GpuProcess(pid=pid, used_mib=used_mib, name="", alive=True, gpu_index=index, kind=kind)
        return list(by_pid.values())

    def _ensure_pool(self, workers: int) -> ThreadPoolExecutor:
        if self._pool is None or self._pool_size < workers:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
            self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nvml-pcie")
            self._pool_size = workers
        return self._pool

    def _submit_pcie(self, handles: dict[int, Any]) -> None:
        if not handles:
            return
        pool = self._ensure_pool(min(32, 2 * len(handles)))
        for index, handle in handles.items():
            for direction in (_PCIE_TX, _PCIE_RX):
                key = (index, direction)
                pending = self._pcie_pending.get(key)
                if pending is not None:
                    if not pending.done():
                        continue  # still blocked from a previous poll; collected when it finishes
                    self._pcie_last[key] = self._pcie_result(pending)
                self._pcie_pending[key] = pool.submit(self._pcie_call, handle, direction, index)

    def _pcie_call(self, handle: Any, direction: int, index: int) -> float | None:
        try:
            label = "nvmlDeviceGetPcieThroughput(TX)" if direction == _PCIE_TX else "nvmlDeviceGetPcieThroughput(RX)"
            value = self.nvml.call("nvmlDeviceGetPcieThroughput", handle, direction, gpu=index, label=label)
        except (GpuLost, NvmlUnavailable):
            return None
        return None if value is None else float(value)

    def _collect_pcie(self, wait_s: float) -> None:
        if not self._pcie_pending:
            return
        if wait_s > 0:
            wait(list(self._pcie_pending.values()), timeout=wait_s)
        for key, future in list(self._pcie_pending.items()):
            if future.done():
                del self._pcie_pending[key]
                self._pcie_last[key] = self._pcie_result(future)

    @staticmethod
    def _pcie_result(future: Future) -> float | None:
        try:
            return future.result()
        except Exception:
            return None

    def _read_topology(self, handles: dict[int, Any]) -> list[GpuLink]:
        links = []
        indices = sorted(handles)
        for i, a in enumerate(indices):
            for b in indices[i + 1 :]:
                try:
                    p2p = self.nvml.call(
                        "nvmlDeviceGetP2PStatus", handles[a], handles[b], _NVLINK_P2P_INDEX, gpu=a
                    )
                    level = self.nvml.call("nvmlDeviceGetTopologyCommonAncestor", handles[a], handles[b], gpu=a)
                except GpuLost:
                    continue
                word = _TOPOLOGY_WORDS.get(level) if level is not None else None
                if p2p == _P2P_OK:
                    links.append(GpuLink(a=a, b=b, kind="NVLink", detail="NV"))
                elif word is not None:
                    links.append(GpuLink(a=a, b=b, kind="PCIe", detail=word))
        return links
