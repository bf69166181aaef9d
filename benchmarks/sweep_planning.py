"""A grid sweep's own cost.

1. Planning and bookkeeping of a 48-configuration grid at 4 concurrencies (issue 32's budget: < 1 s): the
   expansion by the installed SGLang's rules, the plan stored and read back, and the report with its predictions,
   crossovers and recommendation built from stored runs (the recorded runs in tests/fixtures/bench stand for
   every cell: the baseline's for no speculation, a chain's for each configuration). A cell's figures (its
   bootstrap CIs, its comparison with the baseline) are computed once, when the runner has measured it, and kept
   in the plan: that cost is timed apart, per cell (it is paid during the sweep, beside a benchmark of seconds).
2. With --emulator: the sweep's own overhead on a small emulator grid (budget: <= 5 % of its wall time), from
   the sweep's own timestamps: the plan's creation to its last save, less each step's server switch (stop,
   start from the launch, ready), the sweep's last switch or stop (`leave_s`, where the plan keeps it) and each
   cell's benchmark. With --base CHECKOUT (the code before a change: `git worktree add /tmp/base-grid main`),
   that checkout's sweep runs too, alternated with this one's, --rounds times each.

    python -m benchmarks.sweep_planning [--emulator [--base /tmp/base-grid] [--rounds 3]] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "tests" / "fixtures" / "bench"
AXES = {"steps": [1, 2, 3, 4, 5, 6], "topk": [1, 4, 8], "draft_tokens": [4, 8, 16, 32], "concurrency": [1, 4, 16, 64]}


def planning(repeat: int) -> tuple[float, float]:
    """The best of `repeat` timings of planning and bookkeeping, in seconds, and of the figures the runner
    computes once per measured cell (their bootstrap CIs and comparison with the baseline), in seconds a cell."""
    from specmon.bench.results import ResultStore
    from specmon.launch.presets import load_presets
    from specmon.sweep.grid import expand, plan_grid, plan_text
    from specmon.sweep.grid_predict import predict_cells
    from specmon.sweep.grid_report import build_grid_report, format_grid, keep_cell_figures
    from specmon.sweep.plan import SweepStore

    base = load_presets([]).get("demo-eagle3-10")
    runs = ResultStore(BENCH)
    by_preset = {run.preset: run for run in (runs.load(run_id) for run_id in runs.run_ids())}
    # one run per cell, each with its own id (the runs' ids key what is kept): the recorded runs stand for them
    cell_runs: dict[str, object] = {}

    def load(run_id: str | None) -> object:
        return cell_runs.get(run_id or "")

    best = per_cell = float("inf")
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            store = SweepStore(Path(tmp))
            started = time.perf_counter()
            figures_s = 0.0
            expansion = expand(base, AXES["steps"], AXES["topk"], AXES["draft_tokens"])
            assert len(expansion.configs) == 48, len(expansion.configs)
            plan = plan_grid(base, expansion, AXES["concurrency"], None, AXES, 60.0)
            plan_text(plan, True)
            store.save(plan)
            plan = store.load(plan.run_id)
            for index, step in enumerate(plan.steps):  # every cell measured, saved as the runner does
                step.state = "measured"
                for cell in step.cells:
                    cell.state = "measured"
                    cell.bench_run_id = f"{index}-{cell.concurrency}"
                    cell_runs[cell.bench_run_id] = by_preset["baseline" if step.baseline else "eagle3-5"]
                    measured = time.perf_counter()
                    keep_cell_figures(plan, step, cell, load)  # the runner's, once the cell is measured
                    figures_s += time.perf_counter() - measured
                measured = time.perf_counter()
                predict_cells(plan, load)  # the runner's after each step: the longest chain's replay, kept
                figures_s += time.perf_counter() - measured
                store.save(plan)
            report = build_grid_report(plan, load)
            format_grid(report)
            json.dumps(report)
            per_cell = min(per_cell, figures_s / sum(len(s.cells) for s in plan.steps))
            best = min(best, time.perf_counter() - started - figures_s)
    assert len(report["cells"]) == 48 * 4
    return best, per_cell


def emulator_overhead(code: Path | None = None) -> dict[str, float]:
    """A 3-configuration grid at 2 concurrencies on the emulator, run by the checkout at `code` (None: this one):
    its wall time and its own overhead."""
    from benchmarks.checkouts import checkout_env
    from specmon.ports import free_port_pair
    from specmon.sweep.plan import SweepStore

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        presets = root / "presets"
        presets.mkdir()
        (presets / "grid-base.toml").write_text(
            f'name = "grid-base"\nextends = "demo-eagle3-5"\ndemo = true\n[server.args]\nport = {free_port_pair()}\n'
            "emulator-speed = 40\nemulator-decode-speed = 4\nemulator-warmup-delay = 0.2\n"
            "[bench]\nrequests = 6\nmax-new-tokens = 40\nwarmup = 0\n")
        env = checkout_env(code, SPECMON_STATE_DIR=str(root / "state"), XDG_STATE_HOME=str(root / "xdg"))
        assert env is not None
        env.pop("SPECMON_API_KEY", None)
        started = time.time()
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen([sys.executable, "-m", "specmon", "sweep", "--presets", str(presets),
                                     "grid-base", "--steps", "2,3,5", "--topk", "1", "--concurrency", "1,4", "--json",
                                     "--leave", "none"], env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    cwd=code or ROOT)
            cpu_s = _own_cpu_until_exit(proc)
            ended = time.time()
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read().decode(), err.read().decode(errors="replace")
        if proc.returncode not in (0, 1):
            raise SystemExit(f"the sweep failed ({proc.returncode}): {stderr[-2000:]}")
        run_id = json.loads(stdout)["run_id"]
        store = SweepStore(root / "state" / "sweeps")
        plan = store.load(run_id)
        last_save = (store.directory / f"{run_id}.json").stat().st_mtime
    switching = sum(step.startup_s or 0.0 for step in plan.steps)
    leaving = plan.leave_s or 0.0
    measuring = sum(cell.measure_s or 0.0 for step in plan.steps for cell in step.cells)
    wall = last_save - plan.created_at
    overhead = wall - switching - leaving - measuring
    return {"process_wall_s": ended - started, "cpu_s": cpu_s, "sweep_wall_s": wall, "switching_s": switching, "leave_s": leaving,
            "measuring_s": measuring, "overhead_s": overhead, "overhead_pct": 100 * overhead / wall,
            "overhead_with_leave_pct": 100 * (overhead + leaving) / wall}


def _own_cpu_until_exit(proc: subprocess.Popen, poll_s: float = 0.05) -> float:
    """The CPU seconds (user + system) of the process itself, not of the servers it starts, read until it exits
    (the last reading, up to `poll_s` before its end)."""
    import psutil

    watched, cpu_s = psutil.Process(proc.pid), 0.0
    while proc.poll() is None:
        try:
            times = watched.cpu_times()
        except psutil.Error:
            break
        cpu_s = times.user + times.system
        time.sleep(poll_s)
    proc.wait(timeout=600)
    return cpu_s


def _overhead_line(label: str, figures: dict[str, float]) -> str:
    return (f"{label}: sweep wall {figures['sweep_wall_s']:.1f} s (process {figures['process_wall_s']:.1f} s, its "
            f"own CPU {figures['cpu_s']:.2f} s), "
            f"switching {figures['switching_s']:.1f} s + last stop {figures['leave_s']:.2f} s, measuring "
            f"{figures['measuring_s']:.1f} s, own overhead {figures['overhead_s']:.2f} s = "
            f"{figures['overhead_pct']:.1f} % (budget 5 %; {figures['overhead_with_leave_pct']:.1f} % with the "
            "last stop counted as overhead)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--emulator", action="store_true", help="also measure the overhead on an emulator grid")
    parser.add_argument("--base", type=Path, default=None, help="another checkout to alternate with (main)")
    parser.add_argument("--rounds", type=int, default=1, help="emulator sweeps of each checkout, alternated")
    args = parser.parse_args()
    took, per_cell = planning(args.repeat)
    print(f"planning + bookkeeping, 48 configurations x 4 concurrencies (best of {args.repeat}): "
          f"{took * 1000:.0f} ms (budget 1000 ms); besides, what the runner computes once as each cell is "
          f"measured (its figures, the longest chain's replay): {per_cell * 1000:.0f} ms a cell")
    if args.emulator:
        from benchmarks.checkouts import alternated

        sides = [None, args.base] if args.base else [None]
        for code in alternated(sides, args.rounds):
            label = f"--base {code}" if code else "this checkout"
            print(_overhead_line(f"emulator grid (3 chains + no speculation twice, concurrency 1 and 4), {label}",
                                 emulator_overhead(code)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
