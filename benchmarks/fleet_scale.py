"""`specmon fleet --once` at 100 to 10,000 servers against a real Prometheus, beside other code (main).

    python -m benchmarks.fleet_scale [once] [--servers 100 1000 10000] [--runs 3] [--base /tmp/perffleet-base]
    python -m benchmarks.fleet_scale idle [--servers 100 1000] [--window 60] [--base /tmp/perffleet-base]

For each fleet size, series of SGLang 0.5.16's shape (tests/support/fleet_series.py: each server TP2 with every
family `fleet` reads, DCGM on every 4th host) over --history-s seconds at a 15 s step are written, backfilled
with `promtool tsdb create-blocks-from openmetrics`, and served by one Prometheus (started and stopped by its
pid) that logs every query it answers with its own timings. Then, alternated run by run, the checkout's
`fleet --once --json` and --base's (the same interpreter, its source first on the path), each its own process
reading the fleet at the series' end (`FleetReader`'s clock; `fleet --once` reads at Prometheus' time): wall
time, peak RSS and CPU (the child's rusage), Prometheus' CPU over the run, and the sum of Prometheus' own
evaluation times of the run's queries (its query log). Then the same with `specmon fleet rules` loaded, their
records backfilled over the last --rules-s seconds (`promtool tsdb create-blocks-from rules`): the recorded
columns are read by record name, the tok/s history from the records' last minutes only. Targets: ≤ 5 s and
≤ 200 MiB at 10,000 servers, either way.

`idle` runs the fleet app headless (200x50, refresh every 5 s) over series that reach --ahead-s past now (so
the app reads them at Prometheus' own time, as it reads a live fleet), the checkout's and --base's alternated
(--base's own tui/ and widgets/), and measures the app's own process' CPU from /proc over --window seconds
after --warmup (the first refresh, with the 15-minute history, falls in the warm-up). Targets: ≤ 1 % of one
core at 100 servers, ≤ 3 % at 1,000.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from benchmarks.app_idle_cpu import cpu_seconds
from benchmarks.checkouts import alternated, checkout_env
from tests.support.fleet_series import STEP_S, benchmark_shapes, fleet_prometheus, with_fleet_rules
from tests.support.prometheus import Prometheus

ROOT = Path(__file__).resolve().parent.parent


ONCE = """
import asyncio, sys
from specmon.cli import build_parser
from specmon.fleet.cli import options_from
from specmon.fleet.reader import FleetReader
from specmon.fleet.records import own_presets, own_records
from specmon.fleet.tracker import FleetTracker
from specmon.text import strict_json

url, at = sys.argv[1], float(sys.argv[2])
options = options_from(build_parser().parse_args(["fleet", "--prometheus", url, "--once", "--json"]))

async def once():
    tracker = FleetTracker(options.queries, url, own_records(), own_presets())
    async with options.client() as client:
        reader = FleetReader(client, options.queries, options.window_s, options.routers, clock=lambda: at)
        tracker.queries = await reader.configure()
        return tracker.update(await reader.read())

snapshot = asyncio.run(once())
if snapshot.error:
    sys.exit(snapshot.error)
print(strict_json(snapshot.to_json(), indent=2))
"""
"""`fleet --once --json` (specmon.fleet.cli's snapshot_once and output) read at a given time (the series' end)."""


def fleet_once(code: Path, url: str, at: float, prom: Prometheus, query_log: Path, home: str) -> dict:
    """One `fleet --once --json` of the checkout at `code`, its own process: wall time, peak RSS and CPU (its
    rusage), and Prometheus' CPU and own evaluation time over the same run."""
    server = psutil.Process(prom.proc.pid)
    logged = query_log.stat().st_size if query_log.exists() else 0
    env = checkout_env(code, XDG_STATE_HOME=home)
    prom_cpu, started = cpu_seconds(server), time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", ONCE, url, str(at)], cwd=code, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.stdout.read(), proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    prom_cpu = cpu_seconds(server) - prom_cpu
    evals = []
    with query_log.open() as log:
        log.seek(logged)
        entries = [json.loads(line) for line in log]
    # the API's queries only (the log holds the rule evaluations Prometheus makes meanwhile too)
    evals = [entry.get("stats", {}).get("timings", {}).get("evalTotalTime", 0.0)
             for entry in entries if "httpRequest" in entry]
    rows = len(json.loads(out)["servers"]) if proc.returncode == 0 else 0
    return {"code": proc.returncode, "wall_s": wall, "rows": rows, "peak_mib": usage.ru_maxrss / 1024,
            "cpu_s": usage.ru_utime + usage.ru_stime, "prom_cpu_s": prom_cpu, "prom_eval_s": sum(evals),
            "queries": len(evals), "stderr": err.decode(errors="replace")[-400:]}


LAUNCH = """
import importlib.abc, importlib.util, runpy, sys
from pathlib import Path

code = Path(sys.argv.pop(1))
folders = {"specmon.tui": code / "tui", "specmon.widgets": code / "widgets"}


class Checkout(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        folder = folders.get(name)
        return None if folder is None else importlib.util.spec_from_file_location(
            name, folder / "__init__.py", submodule_search_locations=[str(folder)])


sys.meta_path.insert(0, Checkout())
sys.argv[0] = "specmon"
runpy.run_module("specmon", run_name="__main__", alter_sys=True)
"""
"""`python -m specmon` of the checkout given first, its tui/ and widgets/ too (installed as specmon.tui and
specmon.widgets, which the interpreter's editable install maps to this checkout's)."""


def app_idle(code: Path, url: str, home: str, warmup: float, window: float) -> tuple[float, int]:
    """The fleet app of the checkout at `code` (headless, 200x50, refresh every 5 s): its own process' CPU over
    `window` seconds after `warmup`, as % of one core, and its exit code."""
    env = checkout_env(code, XDG_STATE_HOME=home, SPECMON_HEADLESS_SIZE="200x50")
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH, str(code), "fleet", "--prometheus", url, "--headless",
                             "--duration", str(warmup + window + 3)], cwd=code, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    app = psutil.Process(proc.pid)
    time.sleep(warmup)
    cpu0, t0 = cpu_seconds(app), time.monotonic()
    time.sleep(window)
    cpu1, t1 = cpu_seconds(app), time.monotonic()
    _, err = proc.communicate(timeout=120)
    if proc.returncode:
        print(f"    exit {proc.returncode}: {err.decode(errors='replace')[-600:]}")
    return 100 * (cpu1 - cpu0) / (t1 - t0), proc.returncode


def run_idle(args: argparse.Namespace, codes: list[tuple[str, Path]]) -> bool:
    """The fleet app's idle CPU at each fleet size, the codes alternated; the series reach --ahead-s past now
    so that the app reads them at Prometheus' own time."""
    ok = True
    for servers in args.servers:
        with tempfile.TemporaryDirectory() as tmp:
            started = time.monotonic()
            end = int(time.time()) + args.ahead_s
            prom = fleet_prometheus(Path(tmp), benchmark_shapes(servers), end, feed="backfill",
                                    span_s=args.history_s + args.ahead_s)
            try:
                print(f"{servers} servers: written, backfilled and started in {time.monotonic() - started:.0f} s",
                      flush=True)
                results: dict[str, list[float]] = {name: [] for name, _ in codes}
                for name, code in alternated(codes, args.runs):
                    pct, exit_code = app_idle(code, prom.url, tmp, args.warmup, args.window)
                    results[name].append(pct)
                    ok &= exit_code == 0 or name != "this"
                limit = 1.0 if servers <= 100 else 3.0
                for name, runs in results.items():
                    print(f"  fleet app idle, {name}: {statistics.median(runs):.2f} % of one core "
                          f"({', '.join(format(r, '.2f') for r in runs)}; {args.window:g} s windows, refresh every "
                          f"5 s, 200x50; load average {os.getloadavg()[0]:.1f})", flush=True)
                    if name == "this":
                        ok &= statistics.median(runs) <= limit
            finally:
                prom.stop()
    print("PASS" if ok else "FAIL", "(target: ≤ 1 % of one core at 100 servers, ≤ 3 % at 1,000)")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", choices=("once", "idle"), default="once")
    parser.add_argument("--servers", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--runs", type=int, default=3, help="runs of each code, alternated")
    parser.add_argument("--base", type=Path, default=None, help="another checkout to alternate with (main)")
    parser.add_argument("--history-s", type=int, default=1020, help="the series reach this far back")
    parser.add_argument("--rules-s", type=int, default=120, help="the records are backfilled this far back")
    parser.add_argument("--no-rules", action="store_true", help="inline only")
    parser.add_argument("--ahead-s", type=int, default=900, help="idle: the series reach this far past now")
    parser.add_argument("--window", type=float, default=60.0, help="idle: seconds measured")
    parser.add_argument("--warmup", type=float, default=20.0, help="idle: seconds before measuring")
    args = parser.parse_args()
    codes = [("this", ROOT)] + ([("base", args.base.resolve())] if args.base else [])
    if args.what == "idle":
        return 0 if run_idle(args, codes) else 1
    ok = True
    for servers in args.servers:
        with tempfile.TemporaryDirectory() as tmp:
            tmp_path = Path(tmp)
            query_log = tmp_path / "queries.log"
            options = {"extra_args": ["--storage.tsdb.retention.time=30d"], "scrape_interval": f"{STEP_S}s",
                       "query_log": query_log}
            started = time.monotonic()
            end = int(time.time()) - 60
            prom = fleet_prometheus(tmp_path, benchmark_shapes(servers), end, feed="backfill",
                                    span_s=args.history_s, query_log=query_log)
            try:
                print(f"{servers} servers: written, backfilled and started in {time.monotonic() - started:.0f} s "
                      f"(load average {os.getloadavg()[0]:.1f})", flush=True)
                for rules in (False,) if args.no_rules else (False, True):
                    if rules:
                        started = time.monotonic()
                        prom = with_fleet_rules(tmp_path, prom, end, args.rules_s, options)
                        print(f"  rules backfilled and loaded in {time.monotonic() - started:.0f} s", flush=True)
                    results: dict[str, list[dict]] = {name: [] for name, _ in codes}
                    for name, code in alternated(codes, args.runs):
                        results[name].append(fleet_once(code, prom.url, end, prom, query_log, tmp))
                    ok &= report(results, servers, "with the fleet rules" if rules else "inline")
            finally:
                prom.stop()
    print("PASS" if ok else "FAIL", "(targets: every server's row; fleet --once ≤ 5 s and ≤ 200 MiB at 10,000 "
          f"servers{'' if max(args.servers) >= 10000 else ', not run here'})")
    return 0 if ok else 1


def report(results: dict[str, list[dict]], servers: int, how: str) -> bool:
    ok = True
    for name, runs in results.items():
        failed = [r for r in runs if r["code"] != 0]
        for r in failed:
            print(f"  {how:15s} {name}: FAILED (exit {r['code']}, after {r['wall_s']:.1f} s): "
                  f"{r['stderr'].strip().splitlines()[-1:] or ''}")
        ok &= not failed or name != "this"
        runs = [r for r in runs if r["code"] == 0]
        if not runs:
            continue
        med = {key: statistics.median(r[key] for r in runs)
               for key in ("wall_s", "peak_mib", "cpu_s", "prom_cpu_s", "prom_eval_s")}
        print(f"  {how:15s} {name}: {runs[0]['rows']} rows, wall {med['wall_s']:.2f} s ({', '.join(format(r['wall_s'], '.2f') for r in runs)}"
              f"), peak RSS {med['peak_mib']:.0f} MiB, its CPU {med['cpu_s']:.2f} s; Prometheus' CPU "
              f"{med['prom_cpu_s']:.2f} s, its own evaluation {med['prom_eval_s']:.2f} s over {runs[0]['queries']} "
              f"queries (load average {os.getloadavg()[0]:.1f})", flush=True)
        if name == "this":
            ok &= all(r["rows"] == servers for r in runs)
            if servers >= 10000:
                ok &= med["wall_s"] <= 5 and med["peak_mib"] <= 200
    return ok


if __name__ == "__main__":
    sys.exit(main())
