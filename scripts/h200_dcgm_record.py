"""Record NVML readings of every GPU as dcgm-exporter's default counters, for the DCGM stand-in to replay.

On the device machine (torch and nvidia-ml-py are there), from the repository root:

    python3 -m scripts.h200_dcgm_record --out $OUT/h200-nvml-dcgm.json [--idle 10 --load 20 --cool 5]

then copy the file into tests/fixtures/dcgm/ (tests/support/dcgm_exporter.py replays every `*.json` there).

It reads each GPU once a second: `--idle` seconds with nothing running, `--load` seconds while a thread holds
about `--gib` GiB on GPU 0 and multiplies bf16 matrices with torch, then `--cool` seconds after. Each reading
is stored under the dcgm-exporter field it stands for (etc/default-counters.csv of NVIDIA/dcgm-exporter), in
that field's unit (FB_* in MiB, GPU_UTIL in %, POWER_USAGE in W, TOTAL_ENERGY_CONSUMPTION in mJ), with the NVML
call that gave it in `fields`; null where NVML did not answer (the error is in `errors`). The profiling fields
(DCGM_FI_PROF_*) come from NVML's GPM metrics, which DCGM itself uses on Hopper, as ratios (GPM gives %).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

MIB = 1024 * 1024

# dcgm-exporter field -> the NVML call recorded for it (the stand-in's provenance).
FIELDS = {
    "DCGM_FI_DEV_SM_CLOCK": "nvmlDeviceGetClockInfo(NVML_CLOCK_SM)",
    "DCGM_FI_DEV_MEM_CLOCK": "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)",
    "DCGM_FI_DEV_MEMORY_TEMP": "nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)",
    "DCGM_FI_DEV_GPU_TEMP": "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)",
    "DCGM_FI_DEV_POWER_USAGE": "nvmlDeviceGetPowerUsage / 1000 (W)",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "nvmlDeviceGetTotalEnergyConsumption (mJ)",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "nvmlDeviceGetPcieReplayCounter",
    "DCGM_FI_DEV_GPU_UTIL": "nvmlDeviceGetUtilizationRates().gpu (%)",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "nvmlDeviceGetUtilizationRates().memory (%)",
    "DCGM_FI_DEV_ENC_UTIL": "nvmlDeviceGetEncoderUtilization()[0] (%)",
    "DCGM_FI_DEV_DEC_UTIL": "nvmlDeviceGetDecoderUtilization()[0] (%)",
    "DCGM_FI_DEV_XID_ERRORS": "none: XIDs are NVML events (not waited for); 0 = no XID, as dcgm-exporter reports",
    "DCGM_FI_DEV_FB_FREE": "nvmlDeviceGetMemoryInfo(nvmlMemory_v2).free // MiB",
    "DCGM_FI_DEV_FB_USED": "nvmlDeviceGetMemoryInfo(nvmlMemory_v2).used // MiB",
    "DCGM_FI_DEV_FB_RESERVED": "nvmlDeviceGetMemoryInfo(nvmlMemory_v2).reserved // MiB",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL)",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "none: 0 unless nvmlDeviceGetVirtualizationMode says vGPU",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "nvmlDeviceGetRemappedRows()[1]",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": "nvmlDeviceGetRemappedRows()[0]",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "nvmlDeviceGetRemappedRows()[3]",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "nvmlGpmMetricsGet(NVML_GPM_METRIC_GRAPHICS_UTIL) / 100",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "nvmlGpmMetricsGet(NVML_GPM_METRIC_ANY_TENSOR_UTIL) / 100",
    "DCGM_FI_PROF_DRAM_ACTIVE": "nvmlGpmMetricsGet(NVML_GPM_METRIC_DRAM_BW_UTIL) / 100",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "nvmlGpmMetricsGet(NVML_GPM_METRIC_PCIE_TX_PER_SEC) MiB/s * MiB, "
                                  "else nvmlDeviceGetPcieThroughput(TX) KB/s * 1024",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "nvmlGpmMetricsGet(NVML_GPM_METRIC_PCIE_RX_PER_SEC) MiB/s * MiB, "
                                  "else nvmlDeviceGetPcieThroughput(RX) KB/s * 1024",
}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _field_value(nvml: Any, handle: Any, field_id: int) -> float | None:
    value = nvml.nvmlDeviceGetFieldValues(handle, [field_id])[0]
    if value.nvmlReturn != nvml.NVML_SUCCESS:
        raise nvml.NVMLError(value.nvmlReturn)
    kinds = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    return getattr(value.value, kinds.get(value.valueType, "ullVal"))


class GpmReader:
    """NVML's GPM metrics between two samples of one GPU (Hopper's DCP figures); None where unsupported."""

    METRICS = {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 1, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 5,
               "DCGM_FI_PROF_DRAM_ACTIVE": 10, "DCGM_FI_PROF_PCIE_TX_BYTES": 20, "DCGM_FI_PROF_PCIE_RX_BYTES": 21}

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml, self.handle = nvml, handle
        self.error: str | None = None
        self.previous = None
        try:
            if not nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
                self.error = "GPM: not supported on this device"
            else:
                self.previous = nvml.nvmlGpmSampleGet(handle, nvml.nvmlGpmSampleAlloc())
        except Exception as error:  # noqa: BLE001 - NVMLError, or a pynvml without GPM: recorded
            self.error = f"GPM: {type(error).__name__}: {error}"

    def read(self) -> dict[str, float]:
        if self.previous is None:
            return {}
        nvml = self.nvml
        try:
            current = nvml.nvmlGpmSampleGet(self.handle, nvml.nvmlGpmSampleAlloc())
            request = nvml.c_nvmlGpmMetricsGet_t()
            request.version = nvml.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(self.METRICS)
            request.sample1, request.sample2 = self.previous, current
            for slot, metric_id in enumerate(self.METRICS.values()):
                request.metrics[slot].metricId = metric_id
            nvml.nvmlGpmMetricsGet(request)
            nvml.nvmlGpmSampleFree(self.previous)
            self.previous = current
        except nvml.NVMLError as error:
            self.error = f"GPM: {error}"
            return {}
        out = {}
        for slot, field in enumerate(self.METRICS):
            metric = request.metrics[slot]
            if metric.nvmlReturn == nvml.NVML_SUCCESS:
                value = float(metric.value)
                out[field] = value * MIB if field.startswith("DCGM_FI_PROF_PCIE") else value / 100.0
        return out


def read_gpu(nvml: Any, handle: Any, gpm: GpmReader, errors: dict[str, str]) -> dict[str, Any]:
    """One reading of one GPU, under dcgm-exporter's field names."""
    fields: dict[str, Any] = {}

    def take(name: str, read) -> None:
        try:
            fields[name] = read()
        except Exception as error:  # noqa: BLE001 - NVMLError and missing functions alike: recorded
            fields[name] = None
            errors.setdefault(name, f"{type(error).__name__}: {error}")

    take("DCGM_FI_DEV_SM_CLOCK", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))
    take("DCGM_FI_DEV_MEM_CLOCK", lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM))
    take("DCGM_FI_DEV_MEMORY_TEMP", lambda: _field_value(nvml, handle, nvml.NVML_FI_DEV_MEMORY_TEMP))
    take("DCGM_FI_DEV_GPU_TEMP", lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
    take("DCGM_FI_DEV_POWER_USAGE", lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0)
    take("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
    take("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", lambda: nvml.nvmlDeviceGetPcieReplayCounter(handle))
    take("DCGM_FI_DEV_GPU_UTIL", lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    take("DCGM_FI_DEV_MEM_COPY_UTIL", lambda: nvml.nvmlDeviceGetUtilizationRates(handle).memory)
    take("DCGM_FI_DEV_ENC_UTIL", lambda: nvml.nvmlDeviceGetEncoderUtilization(handle)[0])
    take("DCGM_FI_DEV_DEC_UTIL", lambda: nvml.nvmlDeviceGetDecoderUtilization(handle)[0])
    fields["DCGM_FI_DEV_XID_ERRORS"] = 0
    memory: dict[str, Any] = {}

    def mem(attribute: str) -> int:
        if "m" not in memory:
            memory["m"] = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
        return int(getattr(memory["m"], attribute) // MIB)

    take("DCGM_FI_DEV_FB_FREE", lambda: mem("free"))
    take("DCGM_FI_DEV_FB_USED", lambda: mem("used"))
    take("DCGM_FI_DEV_FB_RESERVED", lambda: mem("reserved"))
    take("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
         lambda: _field_value(nvml, handle, nvml.NVML_FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL))
    fields["DCGM_FI_DEV_VGPU_LICENSE_STATUS"] = 0
    rows: dict[str, Any] = {}

    def remap(index: int) -> int:
        if "r" not in rows:
            rows["r"] = nvml.nvmlDeviceGetRemappedRows(handle)
        return int(rows["r"][index])

    take("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", lambda: remap(1))
    take("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", lambda: remap(0))
    take("DCGM_FI_DEV_ROW_REMAP_FAILURE", lambda: remap(3))
    prof = gpm.read()
    if gpm.error:
        errors.setdefault("DCGM_FI_PROF_*", gpm.error)
    for name in GpmReader.METRICS:
        fields[name] = prof.get(name)
    if fields["DCGM_FI_PROF_PCIE_TX_BYTES"] is None:
        take("DCGM_FI_PROF_PCIE_TX_BYTES",
             lambda: nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_TX_BYTES) * 1024)
        take("DCGM_FI_PROF_PCIE_RX_BYTES",
             lambda: nvml.nvmlDeviceGetPcieThroughput(handle, nvml.NVML_PCIE_UTIL_RX_BYTES) * 1024)
    return fields


def matmul_load(gib: float, stop: threading.Event, ready: threading.Event) -> None:
    """Hold about `gib` GiB on GPU 0 and multiply bf16 matrices until `stop`."""
    import torch

    device = torch.device("cuda:0")
    held = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=device)
    held.fill_(1)
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    torch.cuda.synchronize()
    ready.set()
    while not stop.is_set():
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
    del held, a, b
    torch.cuda.empty_cache()


def record(args: argparse.Namespace) -> dict[str, Any]:
    import pynvml as nvml

    nvml.nvmlInit()
    try:
        count = nvml.nvmlDeviceGetCount()
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        gpus = []
        for index, handle in enumerate(handles):
            pci = nvml.nvmlDeviceGetPciInfo(handle)
            gpus.append({"index": index, "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
                         "pci_bus_id": _text(pci.busId), "name": _text(nvml.nvmlDeviceGetName(handle))})
        gpms = [GpmReader(nvml, h) for h in handles]
        errors: dict[str, str] = {}
        samples: list[dict[str, Any]] = []
        started = time.monotonic()
        stop, ready = threading.Event(), threading.Event()
        phases = [("idle", args.idle), ("load", args.load), ("cool", args.cool)]
        load_thread = None
        for phase, seconds in phases:
            if phase == "load":
                load_thread = threading.Thread(target=matmul_load, args=(args.gib, stop, ready), daemon=True)
                load_thread.start()
                if not ready.wait(120):
                    raise SystemExit("the matmul load did not start within 120 s")
            if phase == "cool" and load_thread is not None:
                stop.set()
                load_thread.join(60)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                tick = time.monotonic()
                readings = [{"index": i, "fields": read_gpu(nvml, h, g, errors)}
                            for i, (h, g) in enumerate(zip(handles, gpms, strict=True))]
                samples.append({"t": round(tick - started, 3), "phase": phase, "gpus": readings})
                time.sleep(max(0.0, args.interval - (time.monotonic() - tick)))
        return {
            "what": "REAL: NVML readings of this machine's GPUs, stored under dcgm-exporter's default counters",
            "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "hostname": socket.gethostname(),
            "driver": _text(nvml.nvmlSystemGetDriverVersion()),
            "nvml_version": _text(nvml.nvmlSystemGetNVMLVersion()),
            "nvidia_ml_py": getattr(nvml, "__version__", None) or _package_version("nvidia-ml-py"),
            "command": " ".join([os.path.basename(sys.executable), "-m", "scripts.h200_dcgm_record", *sys.argv[1:]]),
            "load": f"{args.gib} GiB held on GPU 0 and bf16 8192x8192 matmuls (torch) during the load phase",
            "interval_s": args.interval,
            "gpus": gpus,
            "fields": FIELDS,
            "errors": errors,
            "samples": samples,
        }
    finally:
        nvml.nvmlShutdown()


def _package_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of readings before the load")
    parser.add_argument("--load", type=float, default=20.0, help="seconds of readings under the matmul load")
    parser.add_argument("--cool", type=float, default=5.0, help="seconds of readings after the load")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--gib", type=float, default=20.0, help="GiB to hold on GPU 0 during the load")
    args = parser.parse_args(argv)
    data = record(args)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"{args.out}: {len(data['samples'])} readings of {len(data['gpus'])} GPU(s); errors: {data['errors']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
