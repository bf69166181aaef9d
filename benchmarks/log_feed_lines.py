"""What the app's follower thread spends on each line it reads, once the server is ready: the splitter, the
`LogFeed` (the startup tracker, steady lines counted, highlight kinds) and the Live view's batch-line intake,
as CPU time per line, best of --repeat.

The lines are those `app_follow_terminal`'s writer writes (SGLang 0.5.16 `Decode batch` lines, dated and
DP-tagged), 100 per read: 1,000 lines a second read every 0.1 s, as the app reads a stream. The feed has read a
real startup to ready first (tests/fixtures/logs/03-…-ready.log, up to its ready line).

    .venv/bin/python -m benchmarks.log_feed_lines [--reads 400] [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from specmon.live.sampler import LiveMonitor
from specmon.live.tracker import LiveTracker
from specmon.logs.follower import LineSplitter
from specmon.view.log_feed import LogFeed, feed_text

ROOT = Path(__file__).resolve().parent.parent
STARTUP_LOG = ROOT / "tests" / "fixtures" / "logs" / "03-laguna-int4-dflash-v0.5.16-ready.log"


def ready_feed() -> LogFeed:
    """A feed that has read a real startup up to its ready line, with the Live view's observer."""
    raw = STARTUP_LOG.read_bytes()
    ready = raw.index(b"The server is fired up and ready to roll!")
    feed = LogFeed()
    feed.observers.append(LiveMonitor(LiveTracker()).feed_lines)
    feed_text(feed, raw[: raw.index(b"\n", ready) + 1])
    feed.take()
    if not feed.tracker.skips_steady:
        raise SystemExit(f"!! the startup log did not end ready: {feed.state.state}")
    return feed


def reads(count: int, per_read: int = 100) -> list[bytes]:
    stamp = "2026-12-01 10:00:00"
    out = []
    for r in range(count):
        if r % 10 == 0:
            stamp = f"2026-12-01 10:{r // 600 % 60:02d}:{r // 10 % 60:02d}"
        out.append("".join(
            f"[{stamp} DP{i % 2} TP0] Decode batch, #running-req: 48, #full token: {i}, full token usage: 0.34, "
            f"#swa token: 52113, swa token usage: 0.21, accept len: 3.12, accept rate: 0.53, cuda graph: True, "
            f"gen throughput (token/s): 4211.07, #queue-req: 0\n" for i in range(r * per_read, (r + 1) * per_read)
        ).encode())
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=400, help="reads of 100 lines each")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    chunks = reads(args.reads)
    lines = args.reads * 100
    best: dict[str, float] = {}
    for _ in range(args.repeat):
        feed, splitter = ready_feed(), LineSplitter(frame_runs=True)
        started = time.process_time()
        items = [splitter.feed(chunk) for chunk in chunks]
        split = time.process_time()
        for batch in items:
            feed.feed(batch, feed.generation)
            if feed.pending > 5000:  # the app takes them every second
                feed.take()
        fed = time.process_time()
        best["splitter"] = min(best.get("splitter", 1e9), split - started)
        best["feed + Live view"] = min(best.get("feed + Live view", 1e9), fed - split)
        best["all"] = min(best.get("all", 1e9), fed - started)
    for name, seconds in best.items():
        print(f"{name:<18} {seconds / lines * 1e6:6.2f} µs a line")
    print(f"at 1,000 lines/s: {best['all'] / lines * 1e3 * 100:.2f} % of a core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
