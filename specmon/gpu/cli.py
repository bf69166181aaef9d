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
from specmon.text import printable, strict_json

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
    header = (
        f"{'GPU':>3}  {'NAME':<20} {'MEMORY':>20} {'UTIL':>5} {'MEMBW':>5} {'POWER':>11} {'TEMP':>5} "
        f"{'SM CLOCK':>9} {'PCIE TX/RX':>21}  THROTTLE"
    )
    lines.append(header)
    for gpu in snapshot.gpus:
        if gpu.error:
            lines.append(f"{gpu.index:>3}  {gpu.error}")
            continue
        flags = describe.throttle(gpu)
        ecc = describe.ecc(gpu)
        if ecc:
            flags += f"; {ecc}"
        lines.append(
            f"{gpu.index:>3}  {(gpu.name or units.NA)[:20]:<20} {describe.memory(gpu):>20} {units.pct(gpu.util_gpu_pct):>5} "
            f"{units.pct(gpu.util_mem_pct):>5} {describe.power(gpu):>11} {units.temp(gpu.temp_c):>5} "
            f"{units.mhz(gpu.sm_clock_mhz):>9} {describe.pcie(gpu):>21}  {flags}"
        )
    processes = snapshot.processes
    if processes:
        lines.append("")
        lines.append(f"{'GPU':>3}  {'PID':>8}  {'USER':<10} {'MEMORY':>10}  {'STATE':<16} COMMAND")
        for proc in processes:
            lines.append(
                f"{proc.gpu_index if proc.gpu_index is not None else '?':>3}  {proc.pid:>8}  "
                f"{(proc.user or '')[:10]:<10} {describe.process_memory(proc):>10}  {describe.process_state(proc):<16} "
                f"{proc.name}"
            )
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
