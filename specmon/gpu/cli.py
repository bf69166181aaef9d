"""`specmon gpus [--json] [--watch SECONDS]`: one NVML reading of every GPU, or one every SECONDS.

With `--watch` and `--json`, each reading is one JSON object on its own line (JSON Lines).

Without NVML it prints `available: false` with the reason and exits 0. Never imports Textual.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from specmon import units
from specmon.gpu import describe
from specmon.gpu.model import GpuSnapshot
from specmon.gpu.nvml import NvmlSource
from specmon.text import aligned_rows, printable, strict_json

CLEAR_SCREEN = "\x1b[H\x1b[2J"  # with --watch on a terminal, each table replaces the last, like watch(1)


def render_table(snapshot: GpuSnapshot) -> str:
    """An nvidia-smi-like compact table: one line per GPU, then its processes."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(snapshot.taken_at))
    if not snapshot.available:
        return f"available: false  ({stamp})\nreason: {snapshot.reason}\n"
    lines = [
        f"driver {snapshot.driver or units.NA}  NVML {snapshot.nvml_version or units.NA}  {stamp}"
        + (f"  poll {snapshot.poll_ms:.0f} ms" if snapshot.poll_ms is not None else "")
    ]
    table = [("GPU", "NAME", "MEMORY", "UTIL", "MEMBW", "POWER", "TEMP", "SM CLOCK", "PCIE TX/RX", "THROTTLE")]
    for gpu in snapshot.gpus:
        if not gpu.error:
            flags = describe.throttle(gpu)
            ecc = describe.ecc(gpu)
            table.append((str(gpu.index), gpu.name or units.NA, describe.memory(gpu), units.pct(gpu.util_gpu_pct),
                          units.pct(gpu.util_mem_pct), describe.power(gpu), units.temp(gpu.temp_c),
                          units.mhz(gpu.sm_clock_mhz), describe.pcie(gpu), f"{flags}; {ecc}" if ecc else flags))
    aligned = aligned_rows(table, right={0, 2, 3, 4, 5, 6, 7, 8}, gap=("  ", *[" "] * 7, "  "),
                           min_widths=(3, 20, 20, 5, 5, 11, 5, 9, 21), max_widths=(None, 20))
    lines.append(aligned[0])
    rows = iter(aligned[1:])
    lines += [f"{gpu.index:>3}  {gpu.error}" if gpu.error else next(rows) for gpu in snapshot.gpus]
    processes = snapshot.processes
    if processes:
        lines.append("")
        lines += aligned_rows(
            [("GPU", "PID", "USER", "MEMORY", "STATE", "COMMAND"),
             *((str(proc.gpu_index if proc.gpu_index is not None else "?"), str(proc.pid), proc.user or "",
                describe.process_memory(proc), describe.process_state(proc), proc.name) for proc in processes)],
            right={0, 1, 3}, gap=("  ", "  ", " ", "  ", " "), min_widths=(3, 8, 10, 10, 16), max_widths=(None, None, 10))
    links = snapshot.topology
    if links:
        kinds = sorted({f"{link.kind} ({link.detail})" if link.kind == "PCIe" else link.kind for link in links})
        lines.append("")
        lines.append(f"links: {', '.join(kinds)} ({len(links)} GPU pairs)")
    return "\n".join(lines) + "\n"


def print_snapshot(snapshot: GpuSnapshot, as_json: bool, out: TextIO, one_line: bool = False) -> None:
    """Print a reading: the table, indented JSON, or (`one_line`, for --watch) one JSON object per line."""
    if as_json:
        out.write(strict_json(snapshot.to_json(), indent=None if one_line else 2) + "\n")
    else:
        out.write(printable(render_table(snapshot), newlines=True))
    out.flush()


def run_gpus(args: argparse.Namespace) -> int:
    """Handler of `specmon gpus`."""
    source = NvmlSource(pcie="inline")
    watching = args.watch is not None
    try:
        print_snapshot(source.read(), args.json, sys.stdout, one_line=watching)
        if args.watch is None:
            return 0
        interval = max(0.1, float(args.watch))
        next_at = time.monotonic() + interval
        while True:
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at += interval
            if not args.json:
                sys.stdout.write(CLEAR_SCREEN if sys.stdout.isatty() else "\n")
            print_snapshot(source.read(), args.json, sys.stdout, one_line=True)
    finally:
        source.close()
