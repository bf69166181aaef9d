"""Accuracy and overhead of the benchmark client against a loopback server with known timing.

The loopback SGLang stand-in (`python -m specmon.testing.loopback_server`) runs as its own process, streams
`/generate` in SGLang 0.5.16's shape (several tokens per chunk, cumulative text and completion_tokens,
spec_verify_ct at the end) at a fixed rate, and records when it sent each chunk. This script runs
`BenchRun` against it in this process and compares:

* single stream, ~100 and ~1,500 tok/s: each request's measured decode tok/s against the rate computed
  from the server's own send times (target: within 1 % and 2 %), and the acceptance length (exact);
* 64 concurrent streams: the client process's CPU time over the run's wall time (target: under half a core).

    python -m benchmarks.bench_accuracy            # the full run (about 40 s)
    python -m benchmarks.bench_accuracy --quick    # fewer, shorter requests

`--standin` measures issue 14 item 27 instead: a ThreadingHTTPServer child (HTTP/1.1 chunked SSE, no
TCP_NODELAY, headers, 40 ms, then one event per verify step at a fixed cadence) at ~100, ~1,500, ~4,000, ~5,000 and
~10,000 tok/s; truth = (tokens after the first event) / (last send - first send). Columns: specmon's
`stream_generate` as BenchRun uses it (`stream_client`: specmon's aiohttp client, a connection per stream), the same
without the TCP quick-ACK, and SGLang's own `async_request_sglang_generate` (aiohttp, one connection per
request) when `--sglang-src DIR` points at an unzipped sglang wheel (else that column is skipped):

    pip download --no-deps sglang==0.5.16 -d /tmp/sg && unzip -q /tmp/sg/sglang-*.whl 'sglang/*' -d /tmp/sg/src
    python -m benchmarks.bench_accuracy --standin --sglang-src /tmp/sg/src

`--nodelay` makes the stand-in set TCP_NODELAY, as SGLang's own server does (uvicorn on asyncio, which sets it on
every TCP socket); without it the stand-in's small writes wait for the previous write's ACK (Nagle).

With `--lags` each client's row also says where its error comes from: per request, the lag of each event (when the
client timed it minus when the stand-in sent it, one monotonic clock) relative to the first event's lag, as
`lag_last_minus_first_us` and `lag_median_minus_first_us` (medians over the requests; a negative figure: the first
event was timed late against the rest, so the span is short and tok/s reads high), and for specmon's client the
first event's own lag beside the median event's (`lag_first_us`, `lag_median_us`).

`--streams 1,8,64` measures CPU per stream at N concurrent streams (issue 33): the same stand-in (one process per 8
streams), `--tok-s` per stream (default 250, 5 tokens a step), `--tokens` a request (default 512). Each batch (a
warm-up request, then N at once) runs in a child process whose CPU time from the batch's start to its last stream's
end, over N, is the figure; the sides (specmon's client, SGLang's function with `--sglang-src`, and another
checkout's specmon with `--baseline DIR`) alternate, `--repeats` rounds, and `cpu_ratio_to_sglang` is the median of
each round's ratio. `--profile PREFIX` writes cProfile stats of specmon's batches:

    python -m benchmarks.bench_accuracy --streams 1,8,64 --repeats 6 --sglang-src /tmp/sg/src --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from specmon.bench.prompts import load_prompts
from specmon.bench.run import BenchRun, RunSettings

CHUNKS = "3,2,4,1,3"  # tokens per verify step, cycled: mean 2.6


class LoopbackProcess:
    """The loopback server as a child process (argv list, 127.0.0.1, killed on exit)."""

    def __init__(self, tokens_per_s: float) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "specmon.testing.loopback_server", "--port", "0", "--tokens-per-s", str(tokens_per_s),
             "--chunk-tokens", CHUNKS],
            stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parent.parent,
        )  # fmt: skip
        self.url = (self.proc.stdout.readline() if self.proc.stdout else "").strip()
        if not self.url.startswith("http://127.0.0.1:"):
            self.close()
            raise RuntimeError("the loopback server did not start")

    def sent(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(self.url + "/_loopback/sent", timeout=10) as answer:
            return json.loads(answer.read())

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
    client_tau = result.summary.accept_length.token_weighted
    return {
        "nominal_tok_s": rate,
        "requests": requests,
        "max_new_tokens": max_new_tokens,
        "truth_tok_s_median": statistics.median(truth_tok_s(s) for s in sent),
        "measured_tok_s_median": result.summary.median_tok_s,
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
        "requests_ok": result.summary.requests_ok,
        "tokens": sum(r.completion_tokens for r in result.measured),
        "chunks": chunks,
        "wall_s": wall,
        "client_cpu_s": cpu,
        "client_cores": cpu / wall,
        "measured_tok_s_median": result.summary.median_tok_s,
    }


STANDIN_CASES = [(0.025, 2, 256), (0.004, 6, 1024), (0.0012, 5, 1024), (0.001, 5, 1024), (0.0005, 5, 2048)]  # cadence, tokens/step, n


def serve_standin(cadence: float, per_step: int) -> None:
    """The ThreadingHTTPServer stand-in (run as a child process; prints its port). `GET /sent` answers the last
    stream's send times and token counts, `GET /sent/PROMPT` those of the stream whose prompt text was PROMPT."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    sent: dict[str, tuple[list[float], list[int]]] = {}
    encoded: dict[tuple[int, int, bool], bytes] = {}  # the same event is encoded once: the stand-in's CPU stays low

    def event_bytes(tokens: int, step: int, final: bool) -> bytes:
        key = (tokens, step if final else 0, final)
        if key not in encoded:
            meta = {"completion_tokens": tokens, "prompt_tokens": 5,
                    "finish_reason": {"type": "length"} if final else None}
            if final:
                meta["spec_verify_ct"] = step
            event = {"text": "tok " * tokens, "output_ids": list(range(tokens)), "meta_info": meta}
            data = b"data: " + json.dumps(event).encode() + b"\n\n"
            encoded[key] = b"%x\r\n%s\r\n" % (len(data), data)
        return encoded[key]

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            if os.environ.get("STANDIN_NODELAY") == "1":  # as SGLang's uvicorn (asyncio sets it on every socket)
                import socket

                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            max_new = body["sampling_params"]["max_new_tokens"]
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            time.sleep(0.04)
            times: list[float] = []
            counts: list[int] = []
            start, step, tokens = time.perf_counter(), 0, 0
            while tokens < max_new:
                tokens = min(max_new, tokens + (1 if step == 0 else per_step))
                delay = start + step * cadence - time.perf_counter()
                step += 1
                if delay > 0:
                    time.sleep(delay)
                self.wfile.write(event_bytes(tokens, step, tokens == max_new))
                self.wfile.flush()
                times.append(time.perf_counter())
                counts.append(tokens)
            # before the last chunk: a client may ask for /sent as soon as it has it
            sent[str(body.get("text"))] = sent[""] = (times, counts)
            done = b"data: [DONE]\n\n"
            self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
            self.wfile.flush()

        def do_GET(self) -> None:
            data = json.dumps(sent[self.path.removeprefix("/sent").removeprefix("/")]).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_address[1], flush=True)
    while True:
        time.sleep(3600)


def load_sglang_request_function(src: str | None) -> Any:
    """SGLang's `async_request_sglang_generate`, verbatim from its source, with stand-ins for its globals."""
    import ast
    import dataclasses
    import traceback
    import types

    path = Path(src or "", "sglang", "benchmark", "serving.py")
    if not src or not path.is_file():
        return None
    import aiohttp

    text = path.read_text()
    tree = ast.parse(text)
    wanted = {"async_request_sglang_generate", "_create_bench_client_session", "RequestFuncOutput"}
    nodes = [n for n in tree.body if getattr(n, "name", None) in wanted]
    namespace: dict[str, Any] = {
        "aiohttp": aiohttp, "json": json, "time": time, "sys": sys, "traceback": traceback, "dataclass":
        dataclasses.dataclass, "field": dataclasses.field, "Optional": Any, "List": list, "Dict": dict, "Any": Any,
        "tqdm": Any, "RequestFuncInput": Any, "get_request_headers": dict, "_ROUTING_KEY_HEADER": "x",
        "remove_prefix": lambda t, p: t[len(p):] if t.startswith(p) else t,
        "args": types.SimpleNamespace(temperature=0.0, disable_ignore_eos=False, top_p=1.0, disable_stream=False,
                                      return_logprob=False, return_routed_experts=False, logprob_start_len=-1,
                                      top_logprobs_num=0, token_ids_logprob=None, cache_report=False),
    }
    for node in nodes:
        exec(compile(ast.Module([node], []), str(path), "exec"), namespace)  # noqa: S102
    out_cls = namespace["RequestFuncOutput"]
    if not hasattr(out_cls, "init_new"):
        out_cls.init_new = classmethod(lambda cls, inp: cls())
    return namespace["async_request_sglang_generate"]


def event_lags(sent: tuple[list[float], list[int]], timed: list[tuple[float, int]]) -> dict[str, float]:
    """Each event's lag (client time minus send time) against the first event's, matched by token count, in µs."""
    times, counts = sent
    sent_at = dict(zip(counts, times, strict=True))
    lags = [at - sent_at[tokens] for at, tokens in timed if tokens in sent_at]
    rel = [lag - lags[0] for lag in lags]
    quarters = {f"lag_at_{q}_pct_minus_first_us": 1e6 * rel[round(q / 100 * (len(rel) - 1))] for q in (25, 50, 75)}
    return {"lag_first_us": 1e6 * lags[0], "lag_median_us": 1e6 * statistics.median(lags), **quarters,
            "lag_last_minus_first_us": 1e6 * rel[-1], "lag_median_minus_first_us": 1e6 * statistics.median(rel)}


def gap_times(gaps: list[float], counts: list[int]) -> list[tuple[float, int]]:
    """SGLang's function's own times of each event (the first at 0) from its gaps: one per event after the first,
    or one per token (each event's gap spread over its tokens)."""
    per_token = len(gaps) == counts[-1] - counts[0]
    timed, at, used = [], 0.0, 0
    for k, tokens in enumerate(counts):
        upto = tokens - counts[0] if per_token else k
        at += sum(gaps[used:upto])
        used = upto
        timed.append((at, tokens))
    return timed


async def standin_case(cadence: float, per_step: int, n: int, repeats: int, sglang_fn: Any,
                       lags: bool = False) -> dict[str, Any]:
    import types

    import specmon.bench.stream as stream

    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(cadence), str(per_step)],
                            stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline()) if proc.stdout else 0
    url = f"http://127.0.0.1:{port}"
    payload = {"text": "hi", "sampling_params": {"max_new_tokens": n, "temperature": 0.0, "ignore_eos": True},
               "stream": True}
    columns: dict[str, list[tuple[float, float]]] = {}
    lag_rows: dict[str, list[dict[str, float]]] = {}
    timed: list[tuple[float, int]] = []  # the last request's (time, tokens) per event, as its client timed them
    gaps: list[float] = []  # SGLang's function's inter-token gaps of its last request
    quick_ack, take_tokens = stream._set_quickack, stream._StreamState._take_tokens

    def timing_take_tokens(self: Any, tokens: int, at: float) -> None:
        timed.append((at, tokens))
        take_tokens(self, tokens, at)

    try:
        if lags:
            stream._StreamState._take_tokens = timing_take_tokens  # type: ignore[method-assign]
        async with stream.stream_client(url) as streams:
            async def sent() -> tuple[list[float], list[int]]:
                times, counts = json.loads((await streams.fetch("GET", "/sent", limit=64 << 20, deadline_s=30)).content)
                return times, counts

            async def specmon_one(ack: bool) -> float:
                stream._set_quickack = quick_ack if ack else (lambda sock: None)
                timed.clear()
                result = await stream.stream_generate(streams, payload, 0, "p")
                return result.decode_tok_s

            async def sglang_one() -> float:
                inp = types.SimpleNamespace(api_url=url + "/generate", prompt="hi", output_len=n, lora_name=None, prompt_len=1,
                                            extra_request_body={}, image_data=None, routing_key=None)
                out = await sglang_fn(inp)
                gaps[:] = out.itl
                return (out.output_len - 1) / sum(out.itl)

            runners = {"specmon": lambda: specmon_one(True), "specmon, no quick-ACK (before)": lambda: specmon_one(False)}
            if sglang_fn is not None:
                runners[SGLANG] = sglang_one
            for _ in range(repeats):
                for name, run in runners.items():
                    cpu = time.process_time()
                    measured = await run()
                    cpu = time.process_time() - cpu
                    times, counts = await sent()
                    truth = (counts[-1] - counts[0]) / (times[-1] - times[0])
                    columns.setdefault(name, []).append((100 * (measured / truth - 1), cpu))
                    if lags:
                        if name == SGLANG:
                            timed[:] = gap_times(gaps, counts)
                        lag_rows.setdefault(name, []).append(event_lags((times, counts), timed))
    finally:
        stream._set_quickack, stream._StreamState._take_tokens = quick_ack, take_tokens  # type: ignore[method-assign]
        proc.kill()
    row: dict[str, Any] = {"cadence_ms": cadence * 1000, "tokens_per_step": per_step, "tokens": n}
    for name, values in columns.items():
        errors = [e for e, _ in values]
        row[name] = {"error_median_pct": round(statistics.median(errors), 3),
                     "error_max_abs_pct": round(max(abs(e) for e in errors), 3),
                     "cpu_ms_per_stream": round(1000 * statistics.median(c for _, c in values), 1)}
        keys = ["lag_at_25_pct_minus_first_us", "lag_at_50_pct_minus_first_us", "lag_at_75_pct_minus_first_us",
                "lag_last_minus_first_us", "lag_median_minus_first_us"]
        if name != SGLANG:  # SGLang's function keeps only gaps: its own lags are relative ones
            keys += ["lag_first_us", "lag_median_us"]
        for key in keys if lags else []:
            row[name][key] = round(statistics.median(r[key] for r in lag_rows[name]), 1)
    row["truth_tok_s_approx"] = round(per_step / cadence)
    return row


STREAMS_PER_STANDIN = 8  # one stand-in process (one GIL) per this many streams: 64 fast streams need several
SGLANG = "SGLang async_request_sglang_generate"


class StandinProcess:
    """The stand-in as a child process (argv list, 127.0.0.1, killed on exit)."""

    def __init__(self, cadence: float, per_step: int) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", str(cadence), str(per_step)],
                                     stdout=subprocess.PIPE, text=True)
        port = (self.proc.stdout.readline() if self.proc.stdout else "").strip()
        if not port.isdigit():
            self.proc.kill()
            raise RuntimeError("the stand-in did not start")
        self.url = f"http://127.0.0.1:{port}"

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def streams_case(streams: int, rate: float, tokens: int, rounds: int, sides: list[tuple[str, Path | None]],
                 sglang_src: str | None, profile: str | None) -> dict[str, Any]:
    """`streams` concurrent requests at `rate` tok/s each, per side: a child process per batch (PYTHONPATH = the
    side's checkout), the sides alternated; its CPU from one request before the batch to the last one's end."""
    from benchmarks.checkouts import alternated, checkout_env  # here: the children run this file by its path

    per_step = 5
    servers = [StandinProcess(per_step / rate, per_step) for _ in range(-(-streams // STREAMS_PER_STANDIN))]
    batches: dict[str, list[dict[str, Any]]] = {}
    try:
        for name, checkout in alternated(sides, rounds):
            argv = [sys.executable, __file__, "--client", "sglang" if name == SGLANG else "specmon",
                    ",".join(s.url for s in servers), str(streams), str(tokens), "--sglang-src", sglang_src or ""]
            if profile and name == "specmon":
                argv += ["--profile", f"{profile}-{streams}.pstats"]
            child = subprocess.run(argv, capture_output=True, text=True, env=checkout_env(checkout), timeout=900)
            if child.returncode != 0:
                raise RuntimeError(f"{name}'s batch failed: {child.stderr.strip()[-2000:]}")
            batches.setdefault(name, []).append(json.loads(child.stdout))
    finally:
        for server in servers:
            server.close()
    row: dict[str, Any] = {"streams": streams, "tok_s_per_stream": rate, "tokens": tokens, "rounds": rounds}
    for name, runs in batches.items():
        cpu = [1000 * r["cpu_s"] / streams for r in runs]
        errors = [e for r in runs for e in r["errors_pct"]]
        row[name] = {"cpu_ms_per_stream": round(statistics.median(cpu), 2), "cpu_ms_range": [round(min(cpu), 2),
                     round(max(cpu), 2)], "error_median_pct": round(statistics.median(errors), 3) if errors else None,
                     "error_max_abs_pct": round(max(abs(e) for e in errors), 3) if errors else None,
                     "failed": sum(r["failed"] for r in runs), "wall_s_median": round(statistics.median(
                         r["wall_s"] for r in runs), 3)}
    if SGLANG in batches:  # per round, then the median: a noisy neighbour hits both sides of a round alike
        row["cpu_ratio_to_sglang"] = {name: round(statistics.median(
            a["cpu_s"] / b["cpu_s"] for a, b in zip(runs, batches[SGLANG], strict=True)), 3)
            for name, runs in batches.items() if name != SGLANG}
    return row


async def client_batch(kind: str, urls: list[str], streams: int, tokens: int, sglang_src: str | None,
                       profile: str | None) -> dict[str, Any]:
    """One child's batch: a warm-up request, then `streams` at once (spread over `urls`); CPU, wall, errors."""
    import asyncio
    import os
    import types

    from specmon.bench.stream import stream_client, stream_generate

    sglang_fn = load_sglang_request_function(sglang_src) if kind == "sglang" else None
    if kind == "sglang" and sglang_fn is None:
        raise SystemExit("no SGLang request function: give --sglang-src DIR")
    clients = {url: stream_client(url) for url in urls}

    async def one(url: str, prompt: str) -> float | None:
        if sglang_fn is not None:
            inp = types.SimpleNamespace(api_url=url + "/generate", prompt=prompt, output_len=tokens, lora_name=None,
                                        prompt_len=1, extra_request_body={}, image_data=None, routing_key=None)
            out = await sglang_fn(inp)
            return (out.output_len - 1) / sum(out.itl) if out.success and out.itl else None
        payload = {"text": prompt, "sampling_params": {"max_new_tokens": tokens, "temperature": 0.0,
                   "ignore_eos": True}, "stream": True}
        result = await stream_generate(clients[url], payload, 0, prompt)
        return result.decode_tok_s if result.ok else None

    tag = f"{kind}-{os.getpid()}"
    await one(urls[0], f"{tag}-warmup")
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    measured = await asyncio.gather(*(one(urls[i % len(urls)], f"{tag}-{i}") for i in range(streams)))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(str(profile))
    for client in clients.values():
        await client.aclose()
    errors = []
    for i, tok_s in enumerate(measured):
        if tok_s is not None:
            with urllib.request.urlopen(f"{urls[i % len(urls)]}/sent/{tag}-{i}", timeout=30) as answer:
                times, counts = json.loads(answer.read())
            errors.append(100 * (tok_s / ((counts[-1] - counts[0]) / (times[-1] - times[0])) - 1))
    return {"cpu_s": cpu, "wall_s": wall, "errors_pct": errors, "failed": measured.count(None)}


def streams_mode(args: argparse.Namespace) -> int:
    sides: list[tuple[str, Path | None]] = [("specmon", None)]
    if args.baseline:
        sides.append(("specmon, baseline", Path(args.baseline).resolve()))
    if load_sglang_request_function(args.sglang_src) is not None:
        sides.append((SGLANG, None))
    else:
        print("note: no --sglang-src (or aiohttp missing): SGLang's request function is skipped", file=sys.stderr)
    rates = [float(rate) for rate in (args.tok_s or "250").split(",")]
    rows = [streams_case(int(n), rate, args.tokens, args.repeats, sides, args.sglang_src, args.profile)
            for rate in rates for n in args.streams.split(",")]
    print(json.dumps({"python": platform.python_version(), "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
                      "load_avg": os.getloadavg(), "streams": rows}, indent=2))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer and shorter requests")
    parser.add_argument("--standin", action="store_true", help="issue 14 item 27: the ThreadingHTTPServer stand-in")
    parser.add_argument("--sglang-src", metavar="DIR", help="an unzipped sglang wheel (for SGLang's request function)")
    parser.add_argument("--repeats", type=int, default=10, help="with --standin: requests per client and case")
    parser.add_argument("--tok-s", metavar="LIST", help="with --standin: these rates only (e.g. 1000,4000: 5 tokens "
                        "a step, 1024 tokens a request) instead of the five standard cases")
    parser.add_argument("--nodelay", action="store_true", help="with --standin: the stand-in sets TCP_NODELAY")
    parser.add_argument("--lags", action="store_true", help="with --standin: each event's lag against the first's "
                        "(where the error comes from)")
    parser.add_argument("--streams", metavar="LIST", help="concurrent streams per batch (e.g. 1,8,64): CPU per stream "
                        "of specmon's client beside SGLang's, --tok-s per stream (default 250), alternated")
    parser.add_argument("--tokens", type=int, default=512, help="with --streams: tokens a request")
    parser.add_argument("--baseline", metavar="DIR", help="with --streams: another checkout's specmon as a side too")
    parser.add_argument("--profile", metavar="PREFIX", help="with --streams: cProfile specmon's batches to "
                        "PREFIX-STREAMS.pstats")
    parser.add_argument("--serve", nargs=2, metavar=("CADENCE", "PER_STEP"), help=argparse.SUPPRESS)
    parser.add_argument("--client", nargs=4, metavar=("KIND", "URLS", "STREAMS", "TOKENS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve_standin(float(args.serve[0]), int(args.serve[1]))
        return 0
    if args.client:
        import asyncio

        kind, urls, streams, tokens = args.client
        print(json.dumps(asyncio.run(client_batch(kind, urls.split(","), int(streams), int(tokens),
                                                  args.sglang_src or None, args.profile))))
        return 0
    if args.streams:
        return streams_mode(args)
    if args.standin:
        import asyncio

        if args.nodelay:
            os.environ["STANDIN_NODELAY"] = "1"  # read by the stand-in child

        sglang_fn = load_sglang_request_function(args.sglang_src)
        if sglang_fn is None:
            print("note: no --sglang-src (or aiohttp missing): SGLang's request function is skipped", file=sys.stderr)
        cases = STANDIN_CASES if not args.tok_s else [(5 / float(rate), 5, 1024) for rate in args.tok_s.split(",")]
        rows = [asyncio.run(standin_case(c, k, n, args.repeats, sglang_fn, args.lags)) for c, k, n in cases]
        print(json.dumps({"python": platform.python_version(), "standin": rows}, indent=2))
        return 0
    prompts = load_prompts()
    n = 4 if args.quick else 10
    report = {
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
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
