"""`log-summary` on the project's real SGLang logs, as a ratio to a bare Python binary line loop over the same file,
optionally alternated with another checkout (the code before a change) in the same run.

Two logs, built in a temporary directory from every SGLang log under tests/ (`tests/fixtures/logs/**` and
`tests/fixtures/real-sglang-*/**`, the server logs of real runs; not the NCCL worker log):

* startup-heavy: all of them concatenated (sorted by path), repeated to at least --lines lines: real startups,
  their `\\r` progress frames, tracebacks and shutdowns; each `server_args` line begins a launch that the tracker
  reads in full (the code before read everything after the first log's failure as lines after a failure; issue 33
  measured this file at 0.057 that way).
* serving: a real 0.5.16 startup to its ready line (tests/fixtures/logs/03-…-ready.log), then the lines that real
  servers wrote between their ready line and their end (every fixture that served, shutdown lines left out),
  repeated to at least --lines lines.

Each side is timed in a child process (`PYTHONPATH` = that checkout): per round, a bare `for line in f: pass`
(binary) then `summarize_stream`, --repeat times; best of each, in CPU time by default (`--clock wall` for the
wall clock; on a machine shared by many processes the wall clock mostly measures the waiting). Rounds alternate
the sides so that a noisy neighbour hits both alike.

    .venv/bin/python -m benchmarks.log_summary_real [--lines 1000000] [--repeat 3] [--rounds 2] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.checkouts import alternated, checkout_env

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
STARTUP_LOG = FIXTURES / "logs" / "03-laguna-int4-dflash-v0.5.16-ready.log"
READY_LINE = b"The server is fired up and ready to roll!"
SHUTDOWN_MARKS = (b"SIGTERM received", b"Gracefully exiting", b"kill_process_tree", b"Killed", b"leaked")


def sglang_logs() -> list[Path]:
    """Every real (or made-from-real) SGLang server log under tests/, sorted (not SGLang's request records,
    `sglang-request-metrics-*.log`: JSON lines, not a server's log)."""
    paths = [*FIXTURES.glob("logs/**/*.log"), *FIXTURES.glob("real-sglang-*/**/*.log")]
    return sorted(p for p in paths if not p.name.startswith("sglang-request-metrics-"))


def _whole_lines(data: bytes) -> bytes:
    return data if data.endswith(b"\n") else data + b"\n"


def startup_heavy(min_lines: int) -> bytes:
    """All the real logs concatenated, repeated to at least ``min_lines`` lines."""
    one = b"".join(_whole_lines(p.read_bytes()) for p in sglang_logs())
    return one * -(-min_lines // one.count(b"\n"))


def serving_lines() -> bytes:
    """The lines real servers wrote after their ready line (up to their shutdown), from every fixture that served."""
    out = []
    for path in sglang_logs():
        data = _whole_lines(path.read_bytes())
        at = data.find(READY_LINE)
        if at < 0:
            continue
        for line in data[data.index(b"\n", at) + 1 :].splitlines(keepends=True):
            if any(mark in line for mark in SHUTDOWN_MARKS):
                break
            out.append(line)
    return b"".join(out)


def serving(min_lines: int) -> bytes:
    """A real startup to ready, then the real serving lines repeated to at least ``min_lines`` lines."""
    raw = STARTUP_LOG.read_bytes()
    startup = raw[: raw.index(b"\n", raw.index(READY_LINE)) + 1]
    body = serving_lines()
    return startup + body * -(-min_lines // body.count(b"\n"))


CHILD = r"""
import json, sys, time
from specmon.logs.summary import summarize_stream
path, repeat = sys.argv[1], int(sys.argv[2])
clock = time.process_time if sys.argv[3] == "cpu" else time.perf_counter
loop, summary = [], []
for _ in range(repeat):
    t = clock()
    with open(path, "rb") as f:
        for _line in f:
            pass
    loop.append(clock() - t)
    t = clock()
    with open(path, "rb") as f:
        state = summarize_stream(f)
    summary.append(clock() - t)
print(json.dumps({"loop": loop, "summary": summary, "state": state.state, "lines_seen": state.lines_seen,
                  "error": state.error.kind if state.error else None,
                  "launches": getattr(state, "earlier_launches", 0) + 1}))
"""


def measure(checkout: Path, log: Path, repeat: int, clock: str) -> dict:
    env = checkout_env(checkout)
    out = subprocess.run([sys.executable, "-c", CHILD, str(log), str(repeat), clock], env=env, cwd=checkout,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000, help="at least this many lines in each log")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each, per round; the best is kept")
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the checkouts")
    parser.add_argument("--baseline", type=Path, help="another checkout to alternate with (e.g. main's worktree)")
    parser.add_argument("--only", choices=("startup-heavy", "serving"), help="one log only")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="the process's CPU time (default: steadier on a shared machine) or the wall clock")
    args = parser.parse_args()
    sides = [("this", ROOT)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
    with tempfile.TemporaryDirectory(prefix="specmon-real-") as tmp:
        for name, build in (("startup-heavy", startup_heavy), ("serving", serving)):
            if args.only and args.only != name:
                continue
            log = Path(tmp) / f"{name}.log"
            data = build(args.lines)
            log.write_bytes(data)
            lines, frames = data.count(b"\n"), data.count(b"\r")
            print(f"# {name}: {lines:,} lines, {frames:,} \\r frames, {len(data) / 1e6:.0f} MB")
            for side, checkout in alternated(sides, args.rounds):
                r = measure(checkout, log, args.repeat, args.clock)
                loop, summary = min(r["loop"]), min(r["summary"])
                print(f"  {side:<9} loop {loop:.3f} s  summary {summary:.3f} s  ratio {loop / summary:.3f}  "
                      f"(summary runs {', '.join(f'{t:.2f}' for t in r['summary'])}; state {r['state']}, "
                      f"{r['lines_seen']:,} lines, error {r['error']}, {r['launches']:,} launches read)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
