"""Accuracy and overhead of the benchmark client against a loopback server with known timing.

The loopback SGLang stand-in (`python -m specmon.tui.bench.loopback`) runs as its own process, streams
`/generate` in SGLang 0.5.16's shape (several tokens per chunk, cumulative text and completion_tokens,
spec_verify_ct at the end) at a fixed rate, and records when it sent each chunk. This script runs
`BenchRun` against it in this process and compares:

* single stream, ~100 and ~1,500 tok/s: each request's measured decode tok/s against the rate computed
  from the server's own send times (target: within 1 % and 2 %), and the acceptance length (exact);
* 64 concurrent streams: the client process's CPU time over the run's wall time (target: under half a core).

    python -m benchmarks.bench_accuracy            # the full run (about 40 s)
    python -m benchmarks.bench_accuracy --quick    # fewer, shorter requests
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from specmon.tui.bench.prompts import load_prompts
from specmon.tui.bench.run import BenchRun, RunSettings

CHUNKS = "3,2,4,1,3"  # tokens per verify step, cycled: mean 2.6


class LoopbackProcess:
    """The loopback server as a child process (argv list, 127.0.0.1, killed on exit)."""

    def __init__(self, tokens_per_s: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "specmon.tui.bench.loopback", "--port", "0", "--tokens-per-s", str(tokens_per_s),
             "--chunk-tokens", CHUNKS],
            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parent.parent,
        )  # fmt: skip
        self.url = (self.proc.stdout.readline() if self.proc.stdout else "").strip()
        if not self.url.startswith("http://127.0.0.1:"):
            self.close()
            raise RuntimeError("the loopback server did not start")

    def sent(self) -> list[dict[str, Any]]:
        return httpx.get(self.url + "/_loopback/sent", timeout=10, trust_env=False).json()

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def __enter__(self) -> LoopbackProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def truth_tok_s(stream: dict[str, Any]) -> float:
    times, tokens = stream["send_times"], stream["tokens"]
    return (tokens[-1] - tokens[0]) / (times[-1] - times[0])


def single_stream(rate: float, requests: int, max_new_tokens: int, prompts: list) -> dict[str, Any]:
    with LoopbackProcess(rate) as server, tempfile.TemporaryDirectory() as results:
        settings = RunSettings(requests=requests, max_new_tokens=max_new_tokens, warmup=0, concurrency=1)
        result = BenchRun(server.url, f"loopback-{rate:g}", settings, results_dir=results, prompts=prompts).run_blocking()
        sent = server.sent()
    measured = result.measured
    assert len(sent) == len(measured) and all(r.ok for r in measured), result.notes
    errors = [abs(r.decode_tok_s - truth_tok_s(s)) / truth_tok_s(s) for r, s in zip(measured, sent, strict=True)]
    server_tokens = sum(s["tokens"][-1] for s in sent)
    server_steps = sum(len(s["tokens"]) - 1 for s in sent)
    client_tau = result.summary["accept_length"]["token_weighted"]
    return {
        "nominal_tok_s": rate,
        "requests": requests,
        "max_new_tokens": max_new_tokens,
        "truth_tok_s_median": statistics.median(truth_tok_s(s) for s in sent),
        "measured_tok_s_median": result.summary["decode_tok_s"]["median"],
        "rel_error_median_pct": 100 * statistics.median(errors),
        "rel_error_max_pct": 100 * max(errors),
        "accept_length_client": client_tau,
        "accept_length_server": server_tokens / server_steps,
        "accept_length_exact": client_tau == server_tokens / server_steps,
    }


def concurrent(streams: int, rate: float, requests: int, max_new_tokens: int, prompts: list) -> dict[str, Any]:
    with LoopbackProcess(rate) as server, tempfile.TemporaryDirectory() as results:
        settings = RunSettings(requests=requests, max_new_tokens=max_new_tokens, warmup=0, concurrency=streams)
        bench = BenchRun(server.url, f"loopback-x{streams}", settings, results_dir=results, prompts=prompts)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        result = bench.run_blocking()
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        chunks = sum(len(s["tokens"]) for s in server.sent())
    return {
        "streams": streams,
        "per_stream_tok_s": rate,
        "requests_ok": result.summary["requests_ok"],
        "tokens": sum(r.completion_tokens for r in result.measured),
        "chunks": chunks,
        "wall_s": wall,
        "client_cpu_s": cpu,
        "client_cores": cpu / wall,
        "measured_tok_s_median": result.summary["decode_tok_s"]["median"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer and shorter requests")
    args = parser.parse_args()
    prompts = load_prompts()
    n = 4 if args.quick else 10
    report = {
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} CPUs",
        "single_stream": [
            single_stream(100, n, 128 if args.quick else 256, prompts),
            single_stream(1500, n, 512 if args.quick else 1024, prompts),
        ],
        "concurrent": concurrent(64, 100, 64 if args.quick else 128, 128 if args.quick else 256, prompts),
    }
    print(json.dumps(report, indent=2))
    ok = (
        report["single_stream"][0]["rel_error_max_pct"] < 1.0
        and report["single_stream"][1]["rel_error_max_pct"] < 2.0
        and all(s["accept_length_exact"] for s in report["single_stream"])
        and report["concurrent"]["client_cores"] < 0.5
    )
    print("targets met" if ok else "TARGETS MISSED", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
