"""Measure the SGLang emulator over real HTTP: decode tok/s and accept length per speculative setting,
and (with --startup) the wall time from launch to `/health` 200 at a given --emulator-speed.

Usage: .venv/bin/python -m benchmarks.emulator_speed [--tokens 256] [--requests 3] [--startup]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request

from specmon.ports import free_port

MODEL = ["--model-path", "demo/Kimi-K2.5", "--tp-size", "8", "--mem-fraction-static", "0.85"]
SETTINGS = {
    "no speculation": [],
    "eagle3 steps 3 topk 1 draft 4": ["3", "1", "4"],
    "eagle3 steps 4 topk 1 draft 5": ["4", "1", "5"],
    "eagle3 steps 9 topk 1 draft 10": ["9", "1", "10"],
    "eagle3 steps 15 topk 1 draft 16": ["15", "1", "16"],
}


def _spec_flags(triple: list[str]) -> list[str]:
    if not triple:
        return []
    steps, topk, draft = triple
    return ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "demo/kimi-k25-eagle3",
            "--speculative-num-steps", steps, "--speculative-eagle-topk", topk,
            "--speculative-num-draft-tokens", draft]


def _launch(flags: list[str], speed: float) -> tuple[subprocess.Popen, str, float]:
    port = free_port()
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "specmon.emulator", *MODEL, "--port", str(port), "--emulator-speed", str(speed), *flags],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"emulator exited {proc.returncode}")
        with contextlib.suppress(OSError), urllib.request.urlopen(url + "/health", timeout=2) as answer:
            if answer.status == 200:
                return proc, url, time.monotonic() - started
        time.sleep(0.05)


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(10)


def _one(url: str, prompt: str, tokens: int) -> tuple[int, int, float]:
    """(completion tokens, verify steps, decode seconds after the first token) of one streamed request."""
    body = {"text": prompt, "stream": True, "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}}
    first = None
    request = urllib.request.Request(url + "/generate", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        for raw in response:
            line = raw.decode().rstrip("\r\n")
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            meta = json.loads(line[6:])["meta_info"]
            if first is None:
                first = time.monotonic()
            if meta["finish_reason"]:
                done = time.monotonic()
                return meta["completion_tokens"], meta.get("spec_verify_ct", meta["completion_tokens"] - 1), done - first
    raise RuntimeError("stream ended early")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--requests", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--startup", action="store_true", help="also time launch-to-ready at --speed")
    parser.add_argument("--speed", type=float, default=1.0)
    args = parser.parse_args()
    print(f"| setting | accept length | single-stream decode tok/s | {args.concurrency}-stream total tok/s |"
          + (" launch to ready (s) |" if args.startup else ""))
    print("|---|---|---|---|" + ("---|" if args.startup else ""))
    for name, triple in SETTINGS.items():
        proc, url, ready_s = _launch(_spec_flags(triple), args.speed if args.startup else 50.0)
        try:
            tokens = verifies = 0
            seconds = 0.0
            for i in range(args.requests):
                n, v, s = _one(url, f"benchmark prompt {i}", args.tokens)
                tokens, verifies, seconds = tokens + n, verifies + v, seconds + s
            single = (tokens - args.requests) / seconds
            accept = tokens / verifies if triple else 1.0
            results: list[tuple[int, int, float]] = []
            started = time.monotonic()
            def worker(i: int, url: str = url, results: list = results) -> None:
                results.append(_one(url, f"c{i}", args.tokens))

            workers = [threading.Thread(target=worker, args=(i,)) for i in range(args.concurrency)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            total = sum(r[0] for r in results) / (time.monotonic() - started)
        finally:
            _stop(proc)
        extra = f" {ready_s:.1f} |" if args.startup else ""
        print(f"| {name} | {accept:.2f} | {single:.1f} | {total:.1f} |{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
