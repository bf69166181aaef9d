"""StartupTracker cost per line: steady-state lines after ready (rejected early) and whole startup logs.

Run: .venv/bin/python -m benchmarks.tracker_feed
Feeds lines straight to the tracker (no file reading, no splitting) so the figure is the tracker's own.
"""

from __future__ import annotations

import re
import statistics
import time
import tracemalloc
from pathlib import Path

from specmon.logs.tracker import StartupTracker

LOGS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "logs"
STARTUP = LOGS / "h200-0.5.16-standalone-ready.log"
STEADY = [
    "[2026-11-29 10:48:42] Decode batch, #running-req: 1, #token: 48, token usage: 0.00, accept len: 1.07, "
    "accept rate: 0.03, cuda graph: True, gen throughput (token/s): 10.73, #queue-req: 0",
    '[2026-11-29 10:48:42] INFO:     127.0.0.1:37412 - "POST /generate HTTP/1.1" 200 OK',
    "[2026-11-29 10:48:43] Prefill batch, #new-seq: 1, #new-token: 8, #cached-token: 1, token usage: 0.00, "
    "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: True, input throughput (token/s): 23.91",
    '[2026-11-29 10:48:43] INFO:     127.0.0.1:37416 - "GET /health HTTP/1.1" 200 OK',
]


def startup_items(path: Path) -> list[tuple[bool, str]]:
    text = path.read_text(encoding="utf-8", errors="replace")
    parts = re.split(r"(\r|\n)", text)
    items = []
    for i in range(0, len(parts), 2):
        sep = parts[i + 1] if i + 1 < len(parts) else "\n"
        if parts[i] or sep == "\n":
            items.append((sep == "\r", parts[i]))
    return items


def ready_tracker() -> StartupTracker:
    tracker = StartupTracker()
    for is_frame, text in startup_items(STARTUP):
        if text.startswith("[2026-11-29 10:48:41]"):
            break
        (tracker.feed_frame if is_frame else tracker.feed_line)(text)
    assert tracker.state.state == "ready", tracker.state.state
    return tracker


def steady_rate(lines: int) -> float:
    tracker = ready_tracker()
    feed = tracker.feed_line
    batch = STEADY * (lines // len(STEADY))
    start = time.perf_counter()
    for line in batch:
        feed(line)
    return len(batch) / (time.perf_counter() - start)


def startup_rate(path: Path, repeats: int = 20) -> tuple[int, float]:
    items = startup_items(path)
    times = []
    for _ in range(repeats):
        tracker = StartupTracker()
        line, frame = tracker.feed_line, tracker.feed_frame
        start = time.perf_counter()
        for is_frame, text in items:
            (frame if is_frame else line)(text)
        times.append(time.perf_counter() - start)
    return len(items), len(items) / statistics.median(times)


def steady_memory(lines: int) -> int:
    tracker = ready_tracker()
    tracemalloc.start()
    for line in STEADY * (lines // len(STEADY)):
        tracker.feed_line(line)
    current, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return current


def main() -> None:
    rates = [steady_rate(1_000_000) for _ in range(3)]
    print(f"steady-state lines after ready: {statistics.median(rates):,.0f} lines/s "
          f"({1e6 / statistics.median(rates):.2f} us/line), median of 3 x 1,000,000")
    for path in sorted(LOGS.glob("*ready*.log")):
        count, rate = startup_rate(path)
        print(f"startup replay {path.name}: {count} items, {rate:,.0f} items/s")
    for lines in (100_000, 1_000_000):
        print(f"memory retained after {lines:,} steady lines: {steady_memory(lines):,} bytes")


if __name__ == "__main__":
    main()
