"""Helpers for scripts/multi-gpu-check.sh, run on a machine with several NVIDIA GPUs (issue 6).

    python3 -m scripts.multi_gpu_check allreduce --rank R --world W --init FILE --ready DIR [--mib 256] [--seconds S]
        one NCCL all-reduce worker on GPU R (no torchrun: init_method file://FILE); DIR/rank-R.ready gets
        "pid gpu" once its first all-reduce is done; prints its achieved bus bandwidth at the end
    python3 -m scripts.multi_gpu_check hold --gpus 0,1 --gib 10 --ready FILE [--seconds S]
        one process holding about GIB GiB on each listed GPU; FILE gets "pid 0,1" once it does
    python3 -m scripts.multi_gpu_check nvlink OUT.json [--seconds 5]
        NVLink data counters (NVML field values, KiB, summed over each GPU's links) read SECONDS apart
    python3 -m scripts.multi_gpu_check compare RUN [--target-ms 100]
        every check on the run folder (see `compare_run`) -> RUN/compare.json; exit 1 if any fails
    python3 -m scripts.multi_gpu_check screenshot RUN [--seconds 20] [--fake N]
        the GpuPane fed by a GpuSampler on its own thread for SECONDS (the UI thread's stalls timed into
        RUN/ui-thread.json), saved as SVG at 200x50 (live) and 80x24 (the same readings replayed)

NVLink multicast is never used: MULTICAST_OFF is set in every worker's environment before torch loads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from scripts.h200_gpu_check import csv_rows, gpu_checks, number, pane_svg

SCRIPTS = Path(__file__).resolve().parent

MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
WORKER_COMMAND = "multi_gpu_check.py allreduce"
HOLDER_COMMAND = "multi_gpu_check.py hold"
PROCESS_MIB_TOLERANCE = 64
UI_TICK_S = 0.05
ANSI = re.compile(r"\x1b\[[0-9;]*m")
NVLINK_DATA_TX, NVLINK_DATA_RX, NVLINK_LINK_COUNT = 138, 139, 91  # NVML_FI_DEV_NVLINK_{THROUGHPUT_DATA_*,LINK_COUNT}
HOPPER_NVLINKS = 18


def allreduce(args: argparse.Namespace) -> int:
    os.environ.update(MULTICAST_OFF)
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", args.rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method=f"file://{args.init}", rank=args.rank,
                            world_size=args.world, device_id=device)
    tensor = torch.zeros(int(args.mib * 2**20) // 4, dtype=torch.float32, device=device)
    dist.all_reduce(tensor)
    torch.cuda.synchronize()
    Path(args.ready, f"rank-{args.rank}.ready").write_text(f"{os.getpid()} {args.rank}\n")
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    deadline = time.monotonic() + args.seconds
    started, rounds = time.perf_counter(), 0
    stop = torch.zeros(1, device=device)
    while True:
        for _ in range(10):
            dist.all_reduce(tensor)
        rounds += 10
        stop.fill_(1.0 if stopping.is_set() or time.monotonic() > deadline else 0.0)
        dist.all_reduce(stop, op=dist.ReduceOp.MAX)  # every rank leaves after the same round
        if stop.item() > 0:
            break
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    size = tensor.numel() * tensor.element_size()
    bus_gbs = 2 * (args.world - 1) / args.world * size * rounds / elapsed / 1e9
    print(json.dumps({"rank": args.rank, "pid": os.getpid(), "all_reduces": rounds, "seconds": round(elapsed, 2),
                      "tensor_mib": size / 2**20, "bus_bandwidth_gbs": round(bus_gbs, 1),
                      "multicast_env": {k: os.environ.get(k) for k in MULTICAST_OFF}}), flush=True)
    dist.destroy_process_group()
    return 0


def hold(args: argparse.Namespace) -> int:
    import torch

    gpus = [int(g) for g in args.gpus.split(",")]
    held = []
    for gpu in gpus:
        block = torch.empty(int(args.gib * 2**30), dtype=torch.uint8, device=torch.device("cuda", gpu))
        block.fill_(1)
        held.append(block)
        torch.cuda.synchronize(gpu)
    Path(args.ready).write_text(f"{os.getpid()} {','.join(map(str, gpus))}\n")
    print(f"pid {os.getpid()} holds {args.gib} GiB on GPUs {gpus}", flush=True)
    time.sleep(args.seconds)
    return 0


def read_nvlink_counters(module: Any, handle: Any) -> tuple[int, int, int]:
    """(links that answered, TX KiB, RX KiB): NVML's NVLink data counters summed over the GPU's links.
    When NVML does not say how many links the GPU has, Hopper's 18 are asked."""
    count = module.nvmlDeviceGetFieldValues(handle, [NVLINK_LINK_COUNT])[0]
    links = int(count.value.uiVal) if count.nvmlReturn == 0 else HOPPER_NVLINKS
    if links == 0:
        return 0, 0, 0
    fields = [(field, link) for link in range(links) for field in (NVLINK_DATA_TX, NVLINK_DATA_RX)]
    tx = rx = answered = 0
    for value in module.nvmlDeviceGetFieldValues(handle, fields):
        if value.nvmlReturn != 0:
            continue
        if value.fieldId == NVLINK_DATA_TX:
            tx += int(value.value.ullVal)
            answered += 1
        else:
            rx += int(value.value.ullVal)
    return answered, tx, rx


def nvlink(args: argparse.Namespace) -> int:
    import pynvml

    report: dict[str, Any] = {"seconds": args.seconds, "unit": "KiB",
                              "fields": "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX per link, summed", "gpus": {}}
    try:
        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        first = [read_nvlink_counters(pynvml, h) for h in handles]
        time.sleep(args.seconds)
        second = [read_nvlink_counters(pynvml, h) for h in handles]
        for index, ((links, tx0, rx0), (_, tx1, rx1)) in enumerate(zip(first, second, strict=True)):
            report["gpus"][str(index)] = {"links": links, "tx_kib": tx1 - tx0, "rx_kib": rx1 - rx0}
        pynvml.nvmlShutdown()
    except Exception as exc:
        report["error"] = f"{type(exc).__name__}: {exc}"
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps(report))
    return 0 if "error" not in report else 1


def parse_topology(text: str) -> dict[tuple[int, int], str]:
    """`nvidia-smi topo -m` -> {(a, b): cell} for GPU pairs a < b ("NV18", "SYS", "NODE", ...)."""
    lines = [ANSI.sub("", line) for line in text.splitlines()]
    header = next((line.split("\t") for line in lines if re.search(r"\tGPU0(\t|$)", line)), None)
    if header is None:
        return {}
    columns = {name.strip(): col for col, name in enumerate(header) if re.fullmatch(r"GPU\d+", name.strip())}
    pairs = {}
    for line in lines:
        cells = line.split("\t")
        row = re.fullmatch(r"GPU(\d+)", cells[0].strip())
        if row is None:
            continue
        a = int(row.group(1))
        for name, col in columns.items():
            b = int(name[3:])
            if b > a and col < len(cells):
                pairs[(a, b)] = cells[col].strip()
    return pairs


def _ready_files(run: Path) -> tuple[dict[int, int], tuple[int, list[int]] | None]:
    """The all-reduce workers ({pid: gpu}) and the holder ((pid, gpus) or None) the run started."""
    workers = {}
    for path in sorted((run / "workers").glob("rank-*.ready")):
        pid, gpu = path.read_text().split()
        workers[int(pid)] = int(gpu)
    holder = None
    if (run / "holder.ready").exists():
        pid, gpus = (run / "holder.ready").read_text().split()
        holder = (int(pid), [int(g) for g in gpus.split(",")])
    return workers, holder


def _json(path: Path) -> Any:
    """A run file's JSON, or None when the step that writes it did not (missing, empty or cut short)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def compare_run(run: Path, target_ms: float = 100.0, holder_gib: float = 10.0) -> dict[str, Any]:
    """Every check on a run folder, as {"ok", "gpu_count", "checks": [{"check", "ok", ...detail}]}.

    specmon's reading against nvidia-smi's of the same moment (per-GPU memory, utilization, and every
    (pid, GPU) pair with its memory); each all-reduce worker on its own GPU with its command line; the
    holder on its GPUs with about `holder_gib` GiB each; inter-GPU traffic on every worker's GPU (NVLink
    data counters where nvidia-smi's topology shows NVLink, else specmon's PCIe throughput); the topology
    specmon reports against `nvidia-smi topo -m`; the `--watch` readings; one full poll under `target_ms`;
    and the UI thread never waiting on a poll.
    """
    specmon = _json(run / "specmon-gpus.json") or {}
    smi_gpus = csv_rows(run / "nvidia-smi-gpu.csv") if (run / "nvidia-smi-gpu.csv").exists() else []
    smi_apps = csv_rows(run / "nvidia-smi-apps.csv") if (run / "nvidia-smi-apps.csv").exists() else []
    checks = gpu_checks(specmon, smi_gpus)

    def check(label: str, ok: bool, **detail: object) -> None:
        checks.append({"check": label, "ok": bool(ok), **detail})

    gpus = {g["index"]: g for g in specmon.get("gpus", [])}
    check("nvidia-smi listed GPUs", len(smi_gpus) > 0, count=len(smi_gpus))
    uuid_index = {g.get("uuid"): i for i, g in gpus.items()}
    ours = {(p["pid"], i): p for i, g in gpus.items() for p in g.get("processes", [])}
    theirs = {(int(number(r.get("pid")) or -1), uuid_index.get(r.get("gpu_uuid"))): r for r in smi_apps}
    check("every (pid, GPU) nvidia-smi lists is listed by specmon", set(theirs) <= set(ours),
          missing=sorted(map(list, set(theirs) - set(ours))), specmon=sorted(map(list, ours)))
    for (pid, index), row in sorted(theirs.items(), key=lambda item: (item[0][1] or 0, item[0][0])):
        proc = ours.get((pid, index))
        if proc is None:
            continue
        smi_mib = number(row.get("used_gpu_memory [MiB]"))
        check(f"pid {pid} on GPU {index} memory within {PROCESS_MIB_TOLERANCE} MiB of nvidia-smi",
              proc.get("used_mib") is not None and smi_mib is not None
              and abs(proc["used_mib"] - smi_mib) <= PROCESS_MIB_TOLERANCE,
              specmon=proc.get("used_mib"), nvidia_smi=smi_mib)

    workers, holder = _ready_files(run)
    check("every GPU has an all-reduce worker", sorted(workers.values()) == sorted(gpus) and bool(gpus),
          workers=len(workers), gpus=len(gpus))
    for pid, gpu in sorted(workers.items(), key=lambda item: item[1]):
        proc = ours.get((pid, gpu))
        check(f"all-reduce rank {gpu} (pid {pid}) listed on GPU {gpu}, alive, with its command line",
              proc is not None and proc.get("alive") is True and WORKER_COMMAND in (proc.get("name") or ""),
              found=proc)
        elsewhere = sorted(i for (p, i) in ours if p == pid and i != gpu)
        check(f"all-reduce rank {gpu} (pid {pid}) holds memory on no other GPU", not elsewhere, other_gpus=elsewhere)
    check("the memory holder started", holder is not None)
    if holder is not None:
        pid, held_on = holder
        for gpu in held_on:
            proc = ours.get((pid, gpu))
            check(f"holder (pid {pid}) listed on GPU {gpu} with at least {holder_gib:g} GiB",
                  proc is not None and WORKER_COMMAND not in (proc.get("name") or "")
                  and HOLDER_COMMAND in (proc.get("name") or "")
                  and (proc.get("used_mib") or 0) >= holder_gib * 1024,
                  found=proc)
        others = sorted(i for (p, i) in ours if p == pid and i not in held_on)
        check(f"holder (pid {pid}) on no GPU but {held_on}", not others, other_gpus=others)

    smi_topology = parse_topology((run / "nvidia-smi-topo.txt").read_text()) \
        if (run / "nvidia-smi-topo.txt").exists() else {}
    links = {tuple(sorted(link["gpus"])): link for link in specmon.get("topology", [])}
    wrong = []
    for pair, cell in sorted(smi_topology.items()):
        link = links.get(pair)
        want = "NVLink" if cell.startswith("NV") else "PCIe"
        if link is None or link["kind"] != want or (want == "PCIe" and link.get("detail") != cell):
            wrong.append({"gpus": list(pair), "nvidia_smi": cell, "specmon": link})
    expected_pairs = len(gpus) * (len(gpus) - 1) // 2
    check("topology: every GPU pair as nvidia-smi topo -m says", len(smi_topology) == expected_pairs > 0 and not wrong,
          pairs=len(smi_topology), expected_pairs=expected_pairs, disagreements=wrong,
          kinds=sorted({link["kind"] for link in links.values()}))

    watch = [json.loads(line) for line in (run / "specmon-watch.jsonl").read_text().splitlines() if line.strip()] \
        if (run / "specmon-watch.jsonl").exists() else []
    check("specmon gpus --json --watch 1: 8+ readings, each of every GPU",
          len(watch) >= 8 and all(r.get("available") and len(r.get("gpus", [])) == len(gpus) for r in watch),
          readings=len(watch), poll_ms_max=max((r.get("poll_ms") or 0 for r in watch), default=None))
    nvlink_report = _json(run / "nvlink.json") or {}
    for gpu in sorted(set(workers.values())):
        nv = nvlink_report.get("gpus", {}).get(str(gpu), {})
        pcie_max = max(((g.get("pcie_tx_kbs") or 0) + (g.get("pcie_rx_kbs") or 0)
                        for r in [specmon, *watch] for g in r.get("gpus", []) if g.get("index") == gpu), default=0)
        on_nvlink = any(cell.startswith("NV") for pair, cell in smi_topology.items() if gpu in pair)
        if on_nvlink:
            moved = (nv.get("tx_kib") or 0) + (nv.get("rx_kib") or 0)
            check(f"GPU {gpu} NVLink data moved during the all-reduce", moved > 0,
                  nvlink_kib=moved, seconds=nvlink_report.get("seconds"), links=nv.get("links"),
                  specmon_pcie_max_kbs=pcie_max, error=nvlink_report.get("error"))
        else:
            check(f"GPU {gpu} PCIe traffic (specmon) during the all-reduce", pcie_max > 0, specmon_pcie_max_kbs=pcie_max)

    poll = _json(run / "nvml_poll.json") or {}
    background = poll.get("full_poll_background") or {}
    check(f"one full poll of all GPUs (PCIe in the background, as the sampler does) under {target_ms:g} ms",
          poll.get("gpu_count") == len(gpus) and background.get("max_ms") is not None
          and background["max_ms"] < target_ms and background.get("gpus_without_pcie_values") == 0,
          gpu_count=poll.get("gpu_count"), background=background, inline=poll.get("full_poll_inline"),
          sequential_pcie_round_ms=poll.get("sequential_pcie_round_ms"),
          parallel_pcie_round_ms=poll.get("parallel_pcie_round_ms"))
    ui = _json(run / "ui-thread.json") or {}
    check(f"NVML read off the UI thread, which never stalled {target_ms:g} ms",
          bool(ui.get("read_threads")) and ui.get("ui_thread") not in ui["read_threads"]
          and ui.get("max_ui_gap_ms", float("inf")) < target_ms + UI_TICK_S * 1000 and ui.get("gpus") == len(gpus),
          **ui)
    return {"ok": all(c["ok"] for c in checks), "gpu_count": len(gpus), "checks": checks}


def compare(args: argparse.Namespace) -> int:
    run = Path(args.run)
    result = compare_run(run, target_ms=args.target_ms, holder_gib=args.holder_gib)
    (run / "compare.json").write_text(json.dumps(result, indent=2))
    for item in result["checks"]:
        print(("ok    " if item["ok"] else "FAIL  ") + item["check"])
    print("all checks passed" if result["ok"] else "SOME CHECKS FAILED")
    return 0 if result["ok"] else 1


class ThreadNotingSource:
    """A GPU source that notes the name of every thread that reads it."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.threads: set[str] = set()

    def read(self) -> Any:
        self.threads.add(threading.current_thread().name)
        return self.source.read()

    def close(self) -> None:
        self.source.close()


def screenshot(args: argparse.Namespace) -> int:
    from textual.app import App, ComposeResult

    from specmon.gpu.nvml import NvmlSource
    from specmon.gpu.sampler import GpuSampler
    from specmon.tui.messages import GpuSampled
    from specmon.widgets.gpu_pane import GpuPane

    if args.fake:
        from specmon.testing.fake_nvml import FakeNvml

        source = ThreadNotingSource(NvmlSource(FakeNvml.h200s(args.fake, pcie_delay_s=0.02)))
    else:
        source = ThreadNotingSource(NvmlSource())
    snapshots: list = []
    gaps: list[float] = []

    class LivePaneApp(App):
        def compose(self) -> ComposeResult:
            yield GpuPane()

        def on_mount(self) -> None:
            self.ui_thread = threading.current_thread().name
            self.last_tick = time.perf_counter()
            self.set_interval(UI_TICK_S, self.tick)

        def tick(self) -> None:
            now = time.perf_counter()
            gaps.append(now - self.last_tick)
            self.last_tick = now

        def on_gpu_sampled(self, message: GpuSampled) -> None:
            snapshots.append(message.snapshot)
            self.query_one(GpuPane).show(message.snapshot)

    async def run() -> tuple[str, str, bool]:
        app = LivePaneApp()
        async with app.run_test(size=(200, 50)) as pilot:
            sampler = GpuSampler(source, interval_s=1.0, on_sample=lambda s: app.post_message(GpuSampled(s)))
            sampler.start()
            await asyncio.sleep(args.seconds)
            sampler.stop()
            await pilot.pause()
            return app.export_screenshot(title=title(snapshots)), app.ui_thread, \
                app.query_one(GpuPane).has_class("-compact")

    def title(snaps: list) -> str:
        last = snaps[-1] if snaps else None
        names = sorted({g.name for g in last.gpus if g.name}) if last else []
        what = f"{len(last.gpus)} × {names[0] if len(names) == 1 else 'GPUs'}" if last else "no reading"
        return f"specmon GPU pane: {what}{' (fake NVML)' if args.fake else ''}, NCCL all-reduce + memory holder"

    run_dir = Path(args.run)
    svg, ui_thread, compact = asyncio.run(run())
    if not snapshots:
        print("no GPU reading arrived", file=sys.stderr)
        return 1
    count = len(snapshots[-1].gpus)
    (run_dir / f"gpu-pane-{count}gpu-200x50.svg").write_text(svg)
    (run_dir / f"gpu-pane-{count}gpu-80x24.svg").write_text(pane_svg((80, 24), snapshots, title(snapshots)))
    (run_dir / "gpu-pane-live-last.json").write_text(json.dumps(snapshots[-1].to_json(), indent=2))
    polls = [s.poll_ms for s in snapshots if s.poll_ms is not None]
    report = {
        "ui_thread": ui_thread,
        "read_threads": sorted(source.threads),
        "reads": len(snapshots),
        "gpus": count,
        "layout": "compact" if compact else "detailed",
        "ui_tick_ms": UI_TICK_S * 1000,
        "max_ui_gap_ms": round(max(gaps) * 1000, 2) if gaps else None,
        "poll_ms_max": round(max(polls), 2) if polls else None,
    }
    (run_dir / "ui-thread.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description="helpers for scripts/multi-gpu-check.sh")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("allreduce")
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--init", required=True, help="the file for init_method file:// (must not exist yet)")
    p.add_argument("--ready", required=True, help="folder for rank-R.ready")
    p.add_argument("--mib", type=float, default=256.0)
    p.add_argument("--seconds", type=float, default=240.0)
    p.set_defaults(func=allreduce)
    p = sub.add_parser("hold")
    p.add_argument("--gpus", default="0,1")
    p.add_argument("--gib", type=float, default=10.0)
    p.add_argument("--seconds", type=float, default=240.0)
    p.add_argument("--ready", required=True)
    p.set_defaults(func=hold)
    p = sub.add_parser("nvlink")
    p.add_argument("out")
    p.add_argument("--seconds", type=float, default=5.0)
    p.set_defaults(func=nvlink)
    p = sub.add_parser("compare")
    p.add_argument("run")
    p.add_argument("--target-ms", type=float, default=100.0)
    p.add_argument("--holder-gib", type=float, default=10.0)
    p.set_defaults(func=compare)
    p = sub.add_parser("screenshot")
    p.add_argument("run")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--fake", type=int, default=0, metavar="N", help="N fake H200s instead of the real NVML")
    p.set_defaults(func=screenshot)
    args = parser.parse_args()
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
