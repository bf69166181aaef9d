"""`python -m benchmarks.traffic_read [N]`: `specmon traffic --json` over N generated export records (default
100,000), in hourly files of 20,000; prints its wall time and peak RSS. Issue 35's goal: 1,000,000 records
(~2 GB with prompt text; these carry a short text) in ≤ 30 s and ≤ 200 MB."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.peak_rss import peak_rss_mib

PER_FILE = 20_000


def write_records(folder: Path, count: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    for start in range(0, count, PER_FILE):
        hour = start // PER_FILE
        name = f"sglang-request-metrics-202601{1 + hour // 24:02d}_{hour % 24:02d}.log"
        with open(folder / name, "w", encoding="utf-8") as handle:
            for i in range(start, min(count, start + PER_FILE)):
                verify = rng.randint(5, 400)
                completion = verify + sum(rng.randint(0, 3) for _ in range(8)) * verify // 8
                params = {"rid": f"r{i}", "text": "prompt " * rng.randint(5, 40),
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
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_records(folder, count)
        size = sum(p.stat().st_size for p in folder.iterdir())
        started = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "tests.support.peak_rss", "traffic", str(folder), "--json"],
                             capture_output=True, text=True, check=False)
        seconds = time.monotonic() - started
    result = json.loads(run.stdout)
    print(f"{result['requests']:,} records ({size / 1e6:.0f} MB) read in {seconds:.1f} s, "
          f"peak RSS {peak_rss_mib(run.stderr):.0f} MiB, skipped {result['skipped']['count']}")
    return 0 if run.returncode == 0 and result["requests"] == count else 1


if __name__ == "__main__":
    sys.exit(main())
