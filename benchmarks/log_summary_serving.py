"""`log-summary` on steady serving lines, as a ratio against a bare Python loop over the same file's lines.

Builds one big log in a temporary directory: a real SGLang 0.5.16 startup to ready
(tests/fixtures/logs/03-…-ready.log, DFLASH on a GB10), then millions of real-shaped serving lines as
0.5.16 writes them: `Decode batch, …` (with accept len/rate), `Prefill batch, …` and uvicorn access lines
(`INFO:     127.0.0.1:PORT - "POST /generate HTTP/1.1" 200 OK`), one second of the log's clock per few
lines. Then, in the same process and the same run, times (a) a bare `for line in f: pass` over the file
(binary and text mode; the faster is the baseline) and (b) `summarize_stream` on it, and prints lines/s and
the ratio (b)/(a), best of ``--repeat`` runs each (the machine is shared: best-of is the least noisy).

    .venv/bin/python -m benchmarks.log_summary_serving                 # 2,000,000 serving lines
    .venv/bin/python -m benchmarks.log_summary_serving --lines 5000000 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from specmon.logs.summary import summarize_stream

ROOT = Path(__file__).resolve().parent.parent
STARTUP_LOG = ROOT / "tests" / "fixtures" / "logs" / "03-laguna-int4-dflash-v0.5.16-ready.log"
READY_LINE = b"The server is fired up and ready to roll!"


def serving_lines(count: int, start: datetime, seed: int = 1) -> list[bytes]:
    """``count`` real-shaped 0.5.16 serving lines (decode, prefill, access log), the clock moving on."""
    rng = random.Random(seed)
    out: list[bytes] = []
    ts = start
    tokens = 0
    while len(out) < count:
        ts += timedelta(seconds=1)
        stamp = ts.strftime("[%Y-%m-%d %H:%M:%S]")
        port = rng.randint(30000, 60000)
        new = rng.randint(5, 4000)
        out.append(
            f"{stamp} Prefill batch, #new-seq: 1, #new-token: {new}, #cached-token: {rng.randint(0, 512)}, "
            f"full token usage: 0.01, swa token usage: 0.00, #running-req: {rng.randint(0, 8)}, #queue-req: 0, "
            f"#pending-token: 0, cuda graph: False, input throughput (token/s): {rng.uniform(100, 9000):.2f}".encode()
        )
        for _ in range(rng.randint(2, 6)):
            tokens += rng.randint(20, 400)
            out.append(
                f"{stamp} Decode batch, #running-req: {rng.randint(1, 8)}, #full token: {tokens % 90000}, "
                f"full token usage: 0.0{rng.randint(0, 9)}, #swa token: {tokens % 9000}, swa token usage: 0.00, "
                f"accept len: {rng.uniform(1, 4):.2f}, accept rate: {rng.uniform(0, 1):.2f}, cuda graph: True, "
                f"gen throughput (token/s): {rng.uniform(5, 900):.2f}, #queue-req: 0".encode()
            )
        out.append(f'{stamp} INFO:     127.0.0.1:{port} - "POST /generate HTTP/1.1" 200 OK'.encode())
        if rng.random() < 0.05:
            out.append(f'{stamp} INFO:     127.0.0.1:{port} - "GET /health HTTP/1.1" 200 OK'.encode())
    return out[:count]


def build_log(path: Path, serving: int) -> int:
    """The startup to ready, then ``serving`` serving lines; returns the number of lines written."""
    raw = STARTUP_LOG.read_bytes()
    ready = raw.index(READY_LINE)
    startup = raw[: raw.index(b"\n", ready) + 1]
    start = datetime(2026, 8, 1, 23, 45, 0)
    block = 100_000
    with open(path, "wb") as out:
        out.write(startup)
        written = 0
        while written < serving:
            n = min(block, serving - written)
            out.write(b"\n".join(serving_lines(n, start + timedelta(seconds=written), seed=written)) + b"\n")
            written += n
    return startup.count(b"\n") + serving


def bare_loop(path: Path, mode: str) -> float:
    started = time.perf_counter()
    with open(path, mode) as f:
        for _line in f:
            pass
    return time.perf_counter() - started


def summarize(path: Path) -> tuple[float, object]:
    started = time.perf_counter()
    with open(path, "rb") as f:
        state = summarize_stream(f)
    return time.perf_counter() - started, state


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2_000_000, help="serving lines after the startup")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the best is reported")
    parser.add_argument("--target", type=float, default=0.25, help="exit 1 below this ratio")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="specmon-serving-") as tmp:
        log = Path(tmp) / "serving.log"
        total = build_log(log, args.lines)
        size = log.stat().st_size
        print(f"# log-summary on serving lines ({platform.python_implementation()} {platform.python_version()}, "
              f"{os.cpu_count()} CPUs): {total:,} lines, {size / 1e6:.0f} MB")
        times: dict[str, list[float]] = {"rb": [], "r": [], "summary": []}
        state = None
        for _ in range(args.repeat):  # interleaved, so a noisy neighbour hits all three alike
            times["rb"].append(bare_loop(log, "rb"))
            times["r"].append(bare_loop(log, "r"))
            elapsed, state = summarize(log)
            times["summary"].append(elapsed)
        best = {k: min(v) for k, v in times.items()}
        baseline = min(best["rb"], best["r"])
        for name, label in (("rb", "bare loop, binary"), ("r", "bare loop, text"), ("summary", "summarize_stream")):
            runs = ", ".join(f"{t:.3f}" for t in times[name])
            print(f"{label:<20} {total / best[name]:>12,.0f} lines/s  best {best[name]:.3f} s  (runs: {runs})")
        ratio = baseline / best["summary"]
        print(f"ratio summarize_stream / fastest bare loop: {ratio:.3f} (target ≥ {args.target})")
        print(f"state: {state.state}, lines_seen {state.lines_seen:,}, last_ts {state.last_ts}")  # type: ignore[union-attr]
        if state.lines_seen != total or state.state != "ready":  # type: ignore[union-attr]
            print("!! the summary did not read every line or did not end ready", file=sys.stderr)
            return 2
        return 0 if ratio >= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
