"""What bounded reading of a server costs, and what it saves: the time of one /metrics and /server_info read of a
real SGLang 0.5.16 answer (plain and gzipped) through specmon's `HttpClient.fetch` against aiohttp's own reading (its
own decompression, no bound), of one read of the emulator's GPU feed (`DemoGpuSource`) against urllib's, and the peak
memory of reading a `Content-Encoding: gzip, gzip` bomb each way.

    .venv/bin/python -m benchmarks.bounded_reads [--reads 300] [--bomb-mib 512]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import tracemalloc
import urllib.request

import aiohttp

from specmon.gpu.demo import DemoGpuSource
from specmon.gpu.model import GpuSnapshot
from specmon.http.client import HttpClient
from specmon.http.errors import AnswerRefused
from specmon.serving.client import MAX_INFO_BYTES, MAX_METRICS_BYTES
from tests.support.hostile_http import SGLANG_INFO, SGLANG_METRICS, Answer, HostileServer, bomb_answer


async def _time_reads(url: str, path: str, reads: int, bounded: bool, limit: int) -> list[float]:
    times = []
    async with aiohttp.ClientSession(url) as http, HttpClient(url) as ours:
        for _ in range(reads):
            started = time.perf_counter()
            if bounded:
                await ours.fetch("GET", path, limit=limit, deadline_s=10.0)
            else:
                async with http.get(path) as answer:
                    await answer.read()
            times.append(time.perf_counter() - started)
    return times


def _time_sync(make, url: str, reads: int, bounded: bool) -> list[float]:
    """A reader of the emulator's GPU feed kept across reads, as the GPU sampler keeps it (urllib's: none);
    seconds per read."""
    reader = make()
    times = []
    try:
        for _ in range(reads):
            started = time.perf_counter()
            if bounded:
                reader.read()
            else:
                with urllib.request.urlopen(url, timeout=1.0) as answer:
                    GpuSnapshot.from_json(json.loads(answer.read()))
            times.append(time.perf_counter() - started)
    finally:
        if reader is not None:
            reader.close()
    return times


async def _peak(url: str, bounded: bool) -> tuple[float, str]:
    tracemalloc.start()
    try:
        async with aiohttp.ClientSession(url) as http, HttpClient(url) as ours:
            if bounded:
                try:
                    await ours.fetch("GET", "/metrics", limit=MAX_METRICS_BYTES, deadline_s=60.0)
                    outcome = "read"
                except AnswerRefused as error:
                    outcome = f"refused: {error}"
            else:
                try:
                    async with http.get("/metrics") as answer:
                        body = await answer.read()
                except aiohttp.ClientError as error:
                    return tracemalloc.get_traced_memory()[1] / 2**20, f"failed: {type(error).__name__}"
                outcome = f"read {len(body) / 2**20:,.0f} MiB"
        return tracemalloc.get_traced_memory()[1] / 2**20, outcome
    finally:
        tracemalloc.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=300, help="reads per case")
    parser.add_argument("--bomb-mib", type=int, default=512, help="what the bomb decodes to")
    args = parser.parse_args()
    print(f"{'answer':<24} {'aiohttp':>10} {'fetch':>10}   (median per read, {args.reads} reads, alternated)")
    routes = {"/metrics": Answer.text(SGLANG_METRICS), "/server_info": Answer(SGLANG_INFO),
              "/metrics.gz": Answer.text(SGLANG_METRICS, encodings=("gzip",))}
    cases = [("/metrics (58 KB)", "/metrics", MAX_METRICS_BYTES), ("/server_info (29 KB)", "/server_info",
             MAX_INFO_BYTES), ("/metrics gzipped", "/metrics.gz", MAX_METRICS_BYTES)]
    with HostileServer(routes) as server:  # real 0.5.16 answers, a connection each (as the harness answers)
        for name, path, limit in cases:
            plain, bounded = [], []
            for _ in range(3):
                plain += asyncio.run(_time_reads(server.url, path, args.reads // 3, False, limit))
                bounded += asyncio.run(_time_reads(server.url, path, args.reads // 3, True, limit))
            print(f"{name:<24} {statistics.median(plain) * 1e3:>7.2f} ms {statistics.median(bounded) * 1e3:>7.2f} ms")
    feed = {"available": True, "gpus": [{"index": i, "name": "Emulated NVIDIA H200", "memory_used_mib": 90000.0,
                                          "memory_total_mib": 143771.0, "util_gpu_pct": 50.0} for i in range(8)]}
    with HostileServer({"/_emulator/gpus": Answer.json(feed)}) as server:
        url = server.url + "/_emulator/gpus"
        plain, bounded = [], []
        for _ in range(3):
            plain += _time_sync(lambda: None, url, args.reads // 3, False)
            bounded += _time_sync(lambda: DemoGpuSource(url), url, args.reads // 3, True)
        print(f"{'GPU feed, 8 GPUs (sync)':<24} {statistics.median(plain) * 1e3:>7.2f} ms "
              f"{statistics.median(bounded) * 1e3:>7.2f} ms   (urllib + json / DemoGpuSource.read)")
    bomb = bomb_answer(args.bomb_mib << 20, "gzip", "gzip", content_type="text/plain")
    print(f"gzip, gzip bomb: {len(bomb.body):,} bytes decoding to {args.bomb_mib} MiB")
    with HostileServer({"/metrics": bomb}) as server:
        for label, bounded in (("aiohttp", False), ("fetch", True)):
            peak, outcome = asyncio.run(_peak(server.url, bounded))
            print(f"  {label:<10} peak {peak:,.1f} MiB traced ({outcome})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
