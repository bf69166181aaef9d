"""`python -m benchmarks.traffic_read [N [TEXT]] [--categories] [--base CHECKOUT --rounds R]`: `specmon traffic
--json` over N generated export records
(default 100,000), in hourly files of 20,000, each carrying a prompt of about TEXT characters (default 1,800: a
record of ~2 KB, as production's with their prompt text); prints its wall time, CPU time and peak RSS. Issue 35's
goal: 1,000,000 records (~2 GB) in ≤ 30 s and ≤ 200 MB. The machine's load average is printed too: wall time on
a busy host is not the reader's."""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.checkouts import alternated, checkout_env
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


RULES = """\
default = "prose"
[[category]]
name = "code"
match = '(?m)^[ \\t]*(def|class|import|#include)\\b'
[[category]]
name = "fenced"
match = '```'
[[category]]
name = "support"
key = "sampling_params.temperature"
equals = "0.7"
"""
"""The rules `--categories` reads by: two text rules (neither matches these prompts: each is searched in full) and a
key rule."""


def read_once(folder: Path, checkout: Path | None, extra: list[str]) -> tuple[float, float, float, dict]:
    """(wall s, CPU s, peak RSS MiB, the JSON) of one `specmon traffic FOLDER --json` of `checkout` (None: this)."""
    before = os.times()
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "tests.support.peak_rss", "traffic", str(folder), "--json", *extra],
                         capture_output=True, text=True, check=False, env=checkout_env(checkout),
                         cwd=checkout or Path.cwd())
    seconds = time.monotonic() - started
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    if run.returncode != 0:
        raise SystemExit(f"traffic_read: {checkout or 'this checkout'}: exit {run.returncode}: {run.stderr[-500:]}")
    return seconds, cpu, peak_rss_mib(run.stderr), json.loads(run.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("count", nargs="?", type=int, default=100_000, help="records (default 100,000)")
    parser.add_argument("text_chars", nargs="?", type=int, default=1800, help="prompt characters (default 1,800)")
    parser.add_argument("--categories", action="store_true", help="also read with a rules file (RULES)")
    parser.add_argument("--base", type=Path, help="another checkout (the code before a change), alternated with this")
    parser.add_argument("--rounds", type=int, default=1, help="alternations of the sides (default 1)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "records"
        folder.mkdir()
        rules = Path(tmp) / "categories.toml"
        rules.write_text(RULES)
        write_records(folder, args.count, text_chars=args.text_chars)
        size = sum(p.stat().st_size for p in folder.iterdir())
        sides: list[tuple[str, Path | None, list[str]]] = [("this checkout", None, [])]
        if args.categories:
            sides.append(("this checkout, --categories", None, ["--categories", str(rules)]))
        if args.base:
            sides.append((f"{args.base}", args.base.resolve(), []))
        ok = True
        for name, checkout, extra in alternated(sides, args.rounds):
            seconds, cpu, rss, result = read_once(folder, checkout, extra)
            ok = ok and result["requests"] == args.count
            print(f"{name}: {result['requests']:,} records ({size / 1e6:.0f} MB) read in {seconds:.1f} s "
                  f"({cpu:.1f} s of CPU), peak RSS {rss:.0f} MiB, skipped {result['skipped']['count']}, "
                  f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
