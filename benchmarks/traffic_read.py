"""`python -m benchmarks.traffic_read [N [TEXT]]`: `specmon traffic --json` over N generated export records
(default 100,000), in hourly files of 20,000, each carrying a prompt of about TEXT characters (default 1,800: a
record of ~2 KB, as production's with their prompt text); prints its wall time, CPU time and peak RSS. Issue 35's
goal: 1,000,000 records (~2 GB) in ≤ 30 s and ≤ 200 MB. The machine's load average is printed too: wall time on
a busy host is not the reader's."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.peak_rss import peak_rss_mib

PER_FILE = 20_000


def write_records(folder: Path, count: int, seed: int = 0, text_chars: int = 1800) -> None:
    rng = random.Random(seed)
    words = max(1, text_chars // 7)
    for start in range(0, count, PER_FILE):
        hour = start // PER_FILE
        name = f"sglang-request-metrics-202601{1 + hour // 24:02d}_{hour % 24:02d}.log"
        with open(folder / name, "w", encoding="utf-8") as handle:
            for i in range(start, min(count, start + PER_FILE)):
                verify = rng.randint(5, 400)
                completion = verify + sum(rng.randint(0, 3) for _ in range(8)) * verify // 8
                params = {"rid": f"r{i}", "text": "prompt " * rng.randint(words // 2, words * 3 // 2),
                          "sampling_params": {"max_new_tokens": 1024, "temperature": 0}, "stream": True}
                meta = {"id": f"r{i}", "finish_reason": {"type": "length", "length": completion},
                        "prompt_tokens": rng.randint(10, 20000), "completion_tokens": completion,
                        "spec_verify_ct": verify, "spec_accept_length": completion / verify,
                        "e2e_latency": 1.0,
                        "request_finished_ts": 1767261600.0 + i}
                meta["spec_accept_histogram"] = [verify - 1, 1]
                handle.write(json.dumps({"request_parameters": json.dumps(params), **meta}) + "\n")


def main() -> int:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    text_chars = int(sys.argv[2]) if len(sys.argv) > 2 else 1800
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_records(folder, count, text_chars=text_chars)
        size = sum(p.stat().st_size for p in folder.iterdir())
        before = os.times()
        started = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "tests.support.peak_rss", "traffic", str(folder), "--json"],
                             capture_output=True, text=True, check=False)
        seconds = time.monotonic() - started
        after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    result = json.loads(run.stdout)
    print(f"{result['requests']:,} records ({size / 1e6:.0f} MB) read in {seconds:.1f} s ({cpu:.1f} s of CPU), "
          f"peak RSS {peak_rss_mib(run.stderr):.0f} MiB, skipped {result['skipped']['count']}, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    return 0 if run.returncode == 0 and result["requests"] == count else 1


if __name__ == "__main__":
    sys.exit(main())
