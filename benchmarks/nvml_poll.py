"""Time each NVML call specmon makes, per GPU, and one full poll of every GPU (PCIe included).

Prints a JSON report. On a GPU machine it uses the real NVML; with `--fake` it uses the fake NVML module
(specmon.testing.fake_nvml) whose PCIe call sleeps `--pcie-delay-ms` (default 20 ms, as measured on an H200).
Full polls are timed in both PCIe modes of NvmlSource: "background" (the sampler's: the PCIe round runs
between polls) and "inline" (one-shot `specmon gpus`: the round runs in parallel inside the poll).
`sequential_pcie_round_ms` against `parallel_pcie_round_ms` shows whether the driver lets PCIe calls
overlap or serialises them.

    python -m benchmarks.nvml_poll                 # real NVML
    python -m benchmarks.nvml_poll --fake --gpus 8 # simulated 8 x H200
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from specmon.gpu.nvml import NvmlSource

TARGET_POLL_MS = 100.0


def _stats(samples_s: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000.0 for s in samples_s)
    if not ms:
        return {}
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return {
        "n": len(ms),
        "mean_ms": round(statistics.fmean(ms), 4),
        "p50_ms": round(statistics.median(ms), 4),
        "p95_ms": round(p95, 4),
        "max_ms": round(ms[-1], 4),
    }


def _call_specs(nvml: Any) -> list[tuple[str, str, tuple, dict]]:
    """(label, function, extra args, kwargs): every per-GPU call NvmlSource makes."""
    return [
        ("nvmlDeviceGetName", "nvmlDeviceGetName", (), {}),
        ("nvmlDeviceGetUUID", "nvmlDeviceGetUUID", (), {}),
        ("nvmlDeviceGetMemoryInfo(v2)", "nvmlDeviceGetMemoryInfo", (), {"version": 0x02000028}),
        ("nvmlDeviceGetMemoryInfo(v1)", "nvmlDeviceGetMemoryInfo", (), {}),
        ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetUtilizationRates", (), {}),
        ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetPowerUsage", (), {}),
        ("nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetEnforcedPowerLimit", (), {}),
        ("nvmlDeviceGetTemperature", "nvmlDeviceGetTemperature", (0,), {}),
        ("nvmlDeviceGetClockInfo(SM)", "nvmlDeviceGetClockInfo", (1,), {}),
        ("nvmlDeviceGetClockInfo(MEM)", "nvmlDeviceGetClockInfo", (2,), {}),
        ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksEventReasons", (), {}),
        ("nvmlDeviceGetTotalEccErrors(corrected)", "nvmlDeviceGetTotalEccErrors", (0, 0), {}),
        ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses", (), {}),
        ("nvmlDeviceGetGraphicsRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses", (), {}),
        ("nvmlDeviceGetPcieThroughput(TX)", "nvmlDeviceGetPcieThroughput", (0,), {}),
        ("nvmlDeviceGetPcieThroughput(RX)", "nvmlDeviceGetPcieThroughput", (1,), {}),
    ]


def time_calls(module: Any, repeats: int) -> tuple[dict[str, Any], dict[str, str]]:
    """Each call on each GPU, `repeats` times, one at a time (so PCIe shows its full blocking cost)."""
    count = module.nvmlDeviceGetCount()
    handles = [module.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    timings: dict[str, list[float]] = {}
    failures: dict[str, str] = {}
    for label, name, extra, kwargs in _call_specs(module):
        fn = getattr(module, name, None)
        if fn is None:
            failures[label] = "not in this nvidia-ml-py"
            continue
        for handle in handles:
            for _ in range(repeats):
                started = time.perf_counter()
                try:
                    fn(handle, *extra, **kwargs)
                except Exception as exc:
                    failures[label] = f"{type(exc).__name__}: {exc}"
                    break
                timings.setdefault(label, []).append(time.perf_counter() - started)
    return {label: _stats(samples) for label, samples in timings.items()}, failures


def time_sequential_pcie(module: Any) -> float:
    """One round of PCIe TX and RX on every GPU, one after the other (what a naive poll would do)."""
    count = module.nvmlDeviceGetCount()
    started = time.perf_counter()
    for index in range(count):
        handle = module.nvmlDeviceGetHandleByIndex(index)
        for direction in (0, 1):
            try:
                module.nvmlDeviceGetPcieThroughput(handle, direction)
            except Exception:  # noqa: S112 - a GPU without PCIe counters just does not count
                continue
    return (time.perf_counter() - started) * 1000.0


def time_parallel_pcie(module: Any) -> float:
    """The same round with every call on its own thread: about one call's time if NVML lets them overlap,
    the sequential time if it serialises them internally."""
    count = module.nvmlDeviceGetCount()
    handles = [module.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=2 * count) as pool:
        futures = [pool.submit(module.nvmlDeviceGetPcieThroughput, h, d) for h in handles for d in (0, 1)]
        for future in futures:
            future.exception()
    return (time.perf_counter() - started) * 1000.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fake", action="store_true", help="use the fake NVML module (no GPU needed)")
    parser.add_argument("--gpus", type=int, default=8, help="with --fake: how many simulated H200s")
    parser.add_argument("--pcie-delay-ms", type=float, default=20.0, help="with --fake: PCIe call blocking time")
    parser.add_argument("--serialized", action="store_true",
                        help="with --fake: NVML calls wait for a PCIe call in progress (a driver-wide lock)")
    parser.add_argument("--polls", type=int, default=20, help="full polls to time, per PCIe mode")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between polls (the sampler's)")
    parser.add_argument("--repeats", type=int, default=5, help="timings per call and GPU")
    parser.add_argument("--pcie-every", type=int, default=1, help="NvmlSource's pcie_every")
    args = parser.parse_args(argv)

    if args.fake:
        from specmon.testing.fake_nvml import FakeNvml

        module = FakeNvml.h200s(args.gpus, pcie_delay_s=args.pcie_delay_ms / 1000.0, serialized=args.serialized)
    else:
        import pynvml

        module = pynvml

    source = NvmlSource(module, pcie="inline", pcie_every=args.pcie_every)
    started = time.perf_counter()
    first = source.read()
    first_ms = (time.perf_counter() - started) * 1000.0
    source.close()
    report: dict[str, Any] = {
        "source": "fake" if args.fake else "nvml",
        "host": platform.node(),
        "python": platform.python_version(),
        "available": first.available,
        "reason": first.reason,
        "driver": first.driver,
        "nvml_version": first.nvml_version,
        "gpu_count": len(first.gpus),
        "gpu_names": sorted({g.name for g in first.gpus if g.name}),
        "first_read_ms": round(first_ms, 3),
        "first_read_note": "includes nvmlInit, the topology pairs and an inline PCIe round",
        "interval_s": args.interval,
        "target_poll_ms": TARGET_POLL_MS,
    }
    if args.fake:
        report["fake_pcie_delay_ms"] = args.pcie_delay_ms
        report["fake_serialized"] = args.serialized
    if not first.available:
        print(json.dumps(report, indent=2))
        return 0

    for mode in ("background", "inline"):
        source = NvmlSource(module, pcie=mode, pcie_every=args.pcie_every)
        source.read()  # init and topology, not timed
        poll_s: list[float] = []
        for _ in range(args.polls):
            time.sleep(args.interval)  # the sampler's sleep, during which a background PCIe round runs
            t0 = time.perf_counter()
            snapshot = source.read()
            poll_s.append(time.perf_counter() - t0)
        source.close()
        stats = _stats(poll_s)
        report[f"full_poll_{mode}"] = {
            **stats,
            "pcie_every": args.pcie_every,
            "gpus_without_pcie_values": sum(1 for g in snapshot.gpus if g.pcie_tx_kbs is None),
            "within_target": stats["max_ms"] < TARGET_POLL_MS,
        }

    module.nvmlInit()
    report["sequential_pcie_round_ms"] = round(time_sequential_pcie(module), 3)
    report["parallel_pcie_round_ms"] = round(time_parallel_pcie(module), 3)
    calls, failures = time_calls(module, args.repeats)
    report["per_call"] = calls
    report["per_call_failures"] = failures
    module.nvmlShutdown()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
