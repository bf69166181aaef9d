"""The machine a preset will launch on: paths, the port, the GPUs tp-size needs (memory, who holds it,
orphaned holders) and their topology against that SGLang version's custom all-reduce rule."""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from specmon.gpu.model import MIB, GpuReading, GpuSnapshot
from specmon.launch.marks import PortHolders
from specmon.launch.presets import Preset
from specmon.ports import PortCheckError, port_holders, port_is_free
from specmon.preflight.report import PreflightReport
from specmon.sglang.rules import SGLangRules

PATH_FLAGS = ("model-path", "tokenizer-path", "speculative-draft-model-path")
GIB = 1024**3


def local_path(value: Any) -> Path | None:
    """The local directory a path flag names, or None for what SGLang would take as a Hugging Face repo id."""
    if not isinstance(value, str) or not value:
        return None
    path = Path(value).expanduser()
    if value.startswith(("/", ".", "~")) or path.exists():
        return path
    return None


def checkpoint_bytes(path: Path) -> int:
    """The size of a checkpoint's weight files (safetensors, else .bin)."""
    files = list(path.glob("*.safetensors")) or list(path.glob("*.bin"))
    total = 0
    for file in files:
        try:
            total += file.stat().st_size
        except OSError:
            continue
    return total


def check_paths(preset: Preset, report: PreflightReport) -> None:
    for key in PATH_FLAGS:
        value = preset.args.get(key)
        if not isinstance(value, str):
            continue
        path = local_path(value)
        if path is None:
            report.add("warning", "path-not-local", f"{value} is not a local path: SGLang will download it as a "
                       "Hugging Face repo id", None, f"--{key}")
        elif not path.exists():
            report.add("error", "path-missing", f"{path} does not exist", None, f"--{key}")
        elif not os.access(path, os.R_OK | os.X_OK if path.is_dir() else os.R_OK):
            report.add("error", "path-unreadable", f"{path} is not readable by this user", None, f"--{key}")


def check_port(preset: Preset, port: int | None, report: PreflightReport, replacing: Collection[int] = ()) -> None:
    """The port is free, or held only by ``replacing`` (the server a switch stops first)."""
    port = port if port is not None else preset.port
    try:
        free = port_is_free(port, preset.host)
    except PortCheckError as error:
        report.add("warning", "port-unchecked", str(error), None, "--port")
        return
    if not free:
        holders = port_holders(port)
        if holders and all(h.pid in replacing for h in holders):
            report.notes.append(f"port {port}: held by the server this launch replaces (freed when it stops)")
            return
        taken = PortHolders.of(preset.host, port, holders)
        report.add("error", "port-in-use", f"port {port} on {preset.host} is taken by {taken.who()}; SGLang would "
                   "find out only after loading the whole model",
                   taken.switch_advice(preset.name) or "stop that server or pick another --port", "--port")


def _arg_int(preset: Preset, *keys: str, default: int = 1) -> int:
    for key in keys:
        value = preset.args.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return default


def _visible(snapshot: GpuSnapshot, env: dict[str, str]) -> list[GpuReading]:
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(snapshot.gpus)
    by_index = {g.index: g for g in snapshot.gpus}
    chosen = []
    for part in visible.split(","):
        part = part.strip()
        if part.isdigit() and int(part) in by_index:
            chosen.append(by_index[int(part)])
    return chosen


def check_gpus(preset: Preset, snapshot: GpuSnapshot, rules: SGLangRules, mem_fraction: float | None,
               weights_bytes: int, report: PreflightReport, replacing: Collection[int] = ()) -> None:
    """The GPUs tp-size needs, with the memory they will have free once ``replacing`` (the server a switch
    stops first) is gone."""
    tp = _arg_int(preset, "tp-size", "tp", "tensor-parallel-size")
    needed = tp * _arg_int(preset, "pp-size", "pipeline-parallel-size")
    if not snapshot.available:
        report.add("warning", "gpus-unchecked", f"cannot read the GPUs: {snapshot.reason}")
        return
    gpus = _visible(snapshot, {**os.environ, **preset.env})[:needed]
    if len(gpus) < needed:
        report.add("error", "gpus-too-few", f"tp-size x pp-size needs {needed} GPUs; {len(gpus)} visible",
                   "lower --tp-size or check CUDA_VISIBLE_DEVICES", "--tp-size")
        return
    per_gpu_weights = weights_bytes / max(1, tp) / GIB
    for gpu in gpus:
        if gpu.memory_total_mib is None or gpu.memory_used_mib is None:
            continue
        leaving = sum(p.used_mib or 0.0 for p in gpu.processes if p.pid in replacing)
        total, used = gpu.memory_total_mib * MIB / GIB, max(0.0, gpu.memory_used_mib - leaving) * MIB / GIB
        free = total - used
        holders = ", ".join(f"pid {p.pid} {p.name or '?'} ({(p.used_mib or 0) / 1024:.1f} GiB, {p.state})"
                            for p in gpu.processes if p.pid not in replacing) or "no process NVML lists"
        if mem_fraction is not None and free < mem_fraction * total:
            report.add("error", "gpu-memory", f"GPU {gpu.index}: {free:.1f} GiB free of {total:.1f} GiB, but "
                       f"--mem-fraction-static {mem_fraction} asks for {mem_fraction * total:.1f} GiB; held by "
                       f"{holders}", "free the GPU or lower --mem-fraction-static", "--mem-fraction-static")
        if weights_bytes and mem_fraction is not None and per_gpu_weights > mem_fraction * total:
            report.add("error", "gpu-weights", f"GPU {gpu.index}: the checkpoints need {per_gpu_weights:.1f} GiB per "
                       f"GPU at tp {tp}, more than --mem-fraction-static {mem_fraction} of {total:.1f} GiB",
                       "raise --tp-size or --mem-fraction-static", "--mem-fraction-static")
        for process in gpu.processes:
            if process.zombie:
                report.add("warning", "gpu-memory-orphaned",
                           f"GPU {gpu.index}: pid {process.pid} ({process.name or '?'}) is {process.state} but holds "
                           f"{(process.used_mib or 0) / 1024:.1f} GiB", "wait for it to go or reap its parent")
    _check_topology(preset, snapshot, [g.index for g in gpus], tp, rules, report)


def _check_topology(preset: Preset, snapshot: GpuSnapshot, indices: list[int], tp: int, rules: SGLangRules,
                    report: PreflightReport) -> None:
    if tp < 2:
        return
    wanted = set(indices[:tp])
    links = [link for link in snapshot.topology if link.a in wanted and link.b in wanted]
    if not links:
        return
    full_nvlink = all(link.kind == "NVLink" for link in links)
    rule = rules.custom_all_reduce or {}
    sizes, pcie_max = rule.get("world_sizes"), rule.get("pcie_only_max_gpus")
    disabled = bool(preset.args.get("disable-custom-all-reduce"))
    version = report.sglang.version or rules.version
    if sizes and tp not in sizes:
        reason = f"SGLang {version} supports custom all-reduce only for {sizes} GPUs"
    elif not full_nvlink and pcie_max is not None and tp > pcie_max:
        reason = f"SGLang {version} turns custom all-reduce off on more than {pcie_max} PCIe-only GPUs"
    else:
        kind = "NVLink" if full_nvlink else "PCIe"
        report.notes.append(f"custom all-reduce: SGLang {version} uses it on these {tp} {kind} GPUs "
                            "(if P2P works)" + (", but the preset disables it" if disabled else ""))
        return
    report.notes.append(f"custom all-reduce: off ({reason})")
    if not disabled:
        report.add("warning", "custom-all-reduce-off", f"{reason} (GPUs {sorted(wanted)} are joined by PCIe): it "
                   "logs a warning and uses NCCL", "add --disable-custom-all-reduce (says so and silences it)",
                   "--disable-custom-all-reduce")
