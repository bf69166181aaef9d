"""What the Live view's batch-line reader costs per line: `parse_batch_line` on real-shaped 0.5.16 lines, and a
`BatchLog` fed 10,000 lines a second for 2 s and then read once (as the app does every 2 s).

The lines are `Decode batch` lines of a DP-attention server (`[date time DPn TP0] Decode batch, …`, DP0 and DP1 in
turn, 1,000 a second of log time) and `Prefill batch` lines; each timing is the best of --repeat, CPU time.

    .venv/bin/python -m benchmarks.live_batch_lines [--lines 120000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
import time

from specmon.live.loglines import BatchLog
from specmon.logs.batchlines import parse_batch_line

DECODE = ("[2026-12-01 10:{m:02d}:{s:02d} DP{dp} TP0] Decode batch, #running-req: 48, #full token: {n}, full token "
          "usage: 0.34, #swa token: 52113, swa token usage: 0.21, accept len: 3.12, accept rate: 0.53, cuda graph: "
          "True, gen throughput (token/s): 4211.07, #queue-req: 0")
PREFILL = ("[2026-12-01 10:{m:02d}:{s:02d}] Prefill batch, #new-seq: 1, #new-token: 47, #cached-token: 1, full token "
           "usage: 0.00, swa token usage: 0.00, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: True, "
           "input throughput (token/s): 0.04")


def lines(count: int) -> list[str]:
    out = []
    for n in range(count):
        m, s = divmod(n // 1000 % 3600, 60)
        out.append((PREFILL if n % 6 == 5 else DECODE).format(m=m, s=s, dp=n % 2, n=n))
    return out


def best_of(repeat: int, run) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        run()
        best = min(best, time.process_time() - start)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=120_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    text = lines(args.lines)
    parse_s = best_of(args.repeat, lambda: [parse_batch_line(line) for line in text])
    print(f"parse_batch_line: {1e6 * parse_s / len(text):.2f} µs a line ({len(text):,} lines)")

    window = text[:20_000]

    def follow_two_seconds() -> None:
        log = BatchLog()
        for line in window:
            log.feed(line, 0.0)
        log.figures(60.0)

    feed_s = best_of(args.repeat, follow_two_seconds)
    print(f"BatchLog, 20,000 lines fed then read once: {1000 * feed_s:.1f} ms "
          f"({100 * feed_s / 2:.2f} % of a core at 10,000 lines/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
