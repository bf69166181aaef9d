"""Helpers for scripts/h200-gpu-check.sh, run on a real GPU machine.

    python3 -m scripts.h200_gpu_check load --gib 20 --seconds 120 --ready FILE
        hold about GIB GiB on GPU 0 with PyTorch and keep it computing; FILE gets the pid once ready
    python3 -m scripts.h200_gpu_check compare OUT
        compare OUT/specmon-gpus.json with the nvidia-smi CSVs taken at the same moment -> OUT/compare.json
    python3 -m scripts.h200_gpu_check screenshot OUT [--seconds 20]
        feed the GpuPane live NVML readings for SECONDS, then save SVG screenshots under OUT
    python3 -m scripts.h200_gpu_check replay-screenshot READING.json OUT [--count 40] [--before IDLE.json]
        feed the GpuPane a saved `specmon gpus --json` reading COUNT times, one second apart (no GPU needed),
        after IDLE.json's reading BEFORE_COUNT times if given; save OUT/gpu-pane-h200-real-80x24.svg, -200x50.svg
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import sys
import time
from pathlib import Path


def load(args: argparse.Namespace) -> int:
    import torch

    device = torch.device("cuda:0")
    held = torch.empty(int(args.gib * 2**30) - 2 * 8192 * 8192 * 2 * 3, dtype=torch.uint8, device=device)
    held.fill_(1)
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    c = a @ b
    torch.cuda.synchronize()
    Path(args.ready).write_text(f"{os.getpid()}\n")
    print(f"pid {os.getpid()} holds {torch.cuda.memory_reserved() / 2**30:.2f} GiB reserved", flush=True)
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        for _ in range(20):
            c = a @ b
        torch.cuda.synchronize()
    del held, c
    return 0


def csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        return []
    header = [h.strip() for h in rows[0]]
    return [dict(zip(header, (v.strip() for v in row), strict=False)) for row in rows[1:] if row]


def number(text: str | None) -> float | None:
    if text is None:
        return None
    word = text.strip().split(" ")[0]
    try:
        return float(word)
    except ValueError:
        return None


def gpu_checks(specmon: dict, smi_gpus: list[dict[str, str]]) -> list[dict]:
    """specmon's reading of every GPU against nvidia-smi's `--query-gpu` rows of the same moment:
    NVML seen, each GPU present (by UUID), memory used within 1 % or 64 MiB, total within 1 MiB,
    utilization within 15 points. Each check is {"check": label, "ok": bool, ...detail}."""
    checks: list[dict] = []

    def check(label: str, ok: bool, **detail: object) -> None:
        checks.append({"check": label, "ok": bool(ok), **detail})

    check("specmon sees NVML", specmon.get("available") is True, reason=specmon.get("reason"))
    by_uuid = {g.get("uuid"): g for g in specmon.get("gpus", [])}
    for row in smi_gpus:
        gpu = by_uuid.get(row.get("uuid"))
        check(f"GPU {row.get('index')} present", gpu is not None, uuid=row.get("uuid"))
        if gpu is None:
            continue
        smi_used = number(row.get("memory.used [MiB]"))
        smi_total = number(row.get("memory.total [MiB]"))
        smi_util = number(row.get("utilization.gpu [%]"))
        used = gpu.get("memory_used_mib")
        check(f"GPU {gpu['index']} memory used (MiB) within 1% or 64 MiB of nvidia-smi",
              used is not None and smi_used is not None and abs(used - smi_used) <= max(64, 0.01 * smi_used),
              specmon=used, nvidia_smi=smi_used)
        total = gpu.get("memory_total_mib")
        check(f"GPU {gpu['index']} memory total within 1 MiB of nvidia-smi",
              total is not None and smi_total is not None and abs(total - smi_total) <= 1,
              specmon=total, nvidia_smi=smi_total)
        util = gpu.get("util_gpu_pct")
        check(f"GPU {gpu['index']} utilization within 15 points of nvidia-smi",
              util is not None and smi_util is not None and abs(util - smi_util) <= 15,
              specmon=util, nvidia_smi=smi_util)
    return checks


def compare(args: argparse.Namespace) -> int:
    out = Path(args.out)
    specmon = json.loads((out / "specmon-gpus.json").read_text())
    smi_gpus = csv_rows(out / "nvidia-smi-gpu.csv")
    smi_apps = csv_rows(out / "nvidia-smi-apps.csv")
    load_pid = int((out / "load.ready").read_text().split()[0]) if (out / "load.ready").exists() else None
    checks = gpu_checks(specmon, smi_gpus)

    def check(label: str, ok: bool, **detail: object) -> None:
        checks.append({"check": label, "ok": bool(ok), **detail})

    specmon_procs = {p["pid"]: p for g in specmon.get("gpus", []) for p in g.get("processes", [])}
    smi_pids = {int(number(r.get("pid")) or -1): r for r in smi_apps}
    check("same compute pids as nvidia-smi", set(smi_pids) <= set(specmon_procs),
          specmon=sorted(specmon_procs), nvidia_smi=sorted(smi_pids))
    for pid, row in smi_pids.items():
        proc = specmon_procs.get(pid)
        smi_mib = number(row.get("used_gpu_memory [MiB]"))
        if proc is not None:
            check(f"pid {pid} memory within 64 MiB of nvidia-smi",
                  proc.get("used_mib") is not None and smi_mib is not None
                  and abs(proc["used_mib"] - smi_mib) <= 64,
                  specmon=proc.get("used_mib"), nvidia_smi=smi_mib, name=proc.get("name"), state=proc.get("state"))
    if load_pid is not None:
        proc = specmon_procs.get(load_pid)
        namespaced = proc is None and any(p.get("state") == "not visible" for p in specmon_procs.values())
        check("the PyTorch load's own pid is listed, alive, with its command line",
              proc is not None and proc.get("alive") and "h200_gpu_check.py" in (proc.get("name") or ""),
              load_pid=load_pid, found=proc, pid_namespace_differs=namespaced)
    result = {"ok": all(c["ok"] for c in checks), "checks": checks}
    (out / "compare.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


SCREENSHOT_SIZES = ((80, 24), (200, 50))
SCREENSHOT_TITLE = "specmon GPU pane on a real H200"


def pane_svg(size: tuple[int, int], snapshots: list, title: str = SCREENSHOT_TITLE) -> str:
    """The GpuPane alone at `size`, fed `snapshots` in turn, as an SVG screenshot."""
    from textual.app import App, ComposeResult

    from specmon.widgets.gpu_pane import GpuPane

    class PaneApp(App):
        def compose(self) -> ComposeResult:
            yield GpuPane()

    async def run() -> str:
        app = PaneApp()
        async with app.run_test(size=size) as pilot:
            pane = app.query_one(GpuPane)
            for snap in snapshots:
                pane.show(snap)
                await pilot.pause()
            await pilot.pause()
            return app.export_screenshot(title=title)

    return asyncio.run(run())


def screenshot(args: argparse.Namespace) -> int:
    from specmon.gpu.nvml import NvmlSource

    out = Path(args.out)
    source = NvmlSource()
    snapshots = []
    for _ in range(int(args.seconds)):
        snapshots.append(source.read())
        time.sleep(1.0)
    source.close()
    (out / "gpu-pane-live-last.json").write_text(json.dumps(snapshots[-1].to_json(), indent=2))
    for size in SCREENSHOT_SIZES:
        (out / f"gpu-pane-h200-{size[0]}x{size[1]}.svg").write_text(pane_svg(size, snapshots))
    print(f"saved screenshots from {len(snapshots)} live readings")
    return 0


def replay_screenshot(args: argparse.Namespace) -> int:
    import copy

    from specmon.gpu.model import GpuSnapshot

    def load(path: str) -> GpuSnapshot:
        return GpuSnapshot.from_json(json.loads(Path(path).read_text()))

    timeline = [load(args.before)] * args.before_count if args.before else []
    timeline += [load(args.reading)] * args.count
    last = timeline[-1].taken_at
    snapshots = []
    for step, reading in enumerate(timeline):
        snap = copy.deepcopy(reading)
        snap.taken_at = last - (len(timeline) - 1 - step)
        snapshots.append(snap)
    out = Path(args.out)
    for size in SCREENSHOT_SIZES:
        path = out / f"gpu-pane-h200-real-{size[0]}x{size[1]}.svg"
        path.write_text(pane_svg(size, snapshots))
        print(f"saved {path}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description="helpers for scripts/h200-gpu-check.sh")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("load")
    p.add_argument("--gib", type=float, default=20.0)
    p.add_argument("--seconds", type=float, default=120.0)
    p.add_argument("--ready", required=True)
    p.set_defaults(func=load)
    p = sub.add_parser("compare")
    p.add_argument("out")
    p.set_defaults(func=compare)
    p = sub.add_parser("screenshot")
    p.add_argument("out")
    p.add_argument("--seconds", type=float, default=20.0)
    p.set_defaults(func=screenshot)
    p = sub.add_parser("replay-screenshot")
    p.add_argument("reading")
    p.add_argument("out")
    p.add_argument("--count", type=int, default=40)
    p.add_argument("--before", help="a reading shown first (the idle GPU)")
    p.add_argument("--before-count", type=int, default=20)
    p.set_defaults(func=replay_screenshot)
    args = parser.parse_args()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
