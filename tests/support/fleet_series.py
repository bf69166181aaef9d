"""Series shaped like a fleet's, for a real Prometheus to answer from: `openmetrics(shapes, end)` writes 30
minutes of every family `specmon fleet` reads (SGLang 0.5.16's names, labels and TTFT buckets; DCGM exporter's
framebuffer and utilization) for one server per Shape, and `fleet_prometheus` starts Prometheus holding them:
`feed="scrape"` in its head block, as a live Prometheus holds its recent samples (one scrape of a target that
serves every sample with its own timestamp), `feed="backfill"` in blocks made by `promtool tsdb
create-blocks-from openmetrics`; with `rules=True`, `specmon fleet rules`' recording rules are backfilled and
loaded too. Made series, not recorded ones: their shapes (TP duplicates, DP ranks, SGLang versions without a
family, a restart, a stall) are what the tests and benchmarks need.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from specmon.sglang.metrics import load_shipped_metrics
from tests.support.prometheus import Job, Prometheus, promtool_binary

STEP_S = 15
SPAN_S = 1800
TTFT_BUCKETS = (*load_shipped_metrics("0.5.16").get("sglang:time_to_first_token_seconds").buckets, float("inf"))
GPUS_PER_HOST = 8


@dataclass(frozen=True)
class Shape:
    """One server's series: its parallelism and the SGLang version's families, a restart or a stall."""

    tp: int = 2
    """Scheduler series repeat on every TP rank (as with --enable-metrics-for-all-schedulers)."""
    dp: int = 1
    running: tuple[int, ...] = (24,)
    """Running requests per DP rank."""
    realtime: bool = True
    """`realtime_tokens_total` (SGLang 0.5.9+); without it the decode rate is the generation counter's."""
    verify: bool = True
    """`spec_verify_calls_total` (0.5.16+); without it acceptance is the gauge's."""
    speculative: bool = True
    kv_tokens: bool = True
    """`num_used_tokens` and `max_total_num_tokens`; without them the KV use is `token_usage`'s."""
    restart_at: float | None = None
    """The counters start again from 0 this far into the span (0 to 1)."""
    stalled_s: int = 0
    """No decode progress over the span's last this-many seconds, with requests running."""
    ttft: str = "spread"
    """TTFT's p99: "spread" between two finite bounds, "fast" in the first bucket, "slow" in the +Inf one."""
    ttft_buckets: tuple[float, ...] | None = None
    """The finite TTFT bucket bounds, when not SGLang 0.5.16's (its `--bucket-time-to-first-token`)."""
    dcgm: str | None = None
    """This server's host has DCGM series, its host named by this label (`Hostname`, or `hostname` since
    dcgm-exporter#655)."""


def instance(i: int) -> str:
    return f"10.0.{i // 250}.{i % 250}:30000"


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def openmetrics(shapes: list[Shape], end: int, seed: int = 7) -> str:
    """OpenMetrics text of every shape's series over SPAN_S seconds at STEP_S, ending at `end`."""
    families: dict[str, list[str]] = {}
    _series(shapes, end, SPAN_S, seed, lambda family, lines: families.setdefault(family, []).extend(lines))
    return "".join(f"{_type_line(family)}\n" + "\n".join(lines) + "\n" for family, lines in families.items()) + "# EOF\n"


def write_openmetrics(shapes: list[Shape], end: int, path: Path, span_s: int = SPAN_S, seed: int = 7) -> None:
    """`openmetrics` written to `path` as it is made (each family spilled to its own file beside it, then joined),
    so that 10,000 servers' series never sit in memory whole. `span_s`: how far back the series go."""
    spill = path.parent / (path.name + ".families")
    spill.mkdir()
    files: dict[str, Any] = {}
    try:
        def add(family: str, lines) -> None:
            if family not in files:
                files[family] = (spill / f"{len(files)}.om").open("w")
            files[family].write("\n".join(lines) + "\n")

        _series(shapes, end, span_s, seed, add)
        for handle in files.values():
            handle.close()
        with path.open("w") as out:
            for i, family in enumerate(files):
                out.write(_type_line(family) + "\n")
                with (spill / f"{i}.om").open() as part:
                    shutil.copyfileobj(part, out, 1 << 20)
            out.write("# EOF\n")
    finally:
        for handle in files.values():
            handle.close()
        shutil.rmtree(spill)


def _type_line(family: str) -> str:
    return f"# TYPE {family} unknown" if family.startswith(("sglang:", "DCGM")) else f"# TYPE {family} gauge"


def _series(shapes: list[Shape], end: int, span_s: int, seed: int, sink: Callable[[str, list[str]], None]) -> None:
    """Every shape's series over `span_s` seconds at STEP_S, ending at `end`, given to `sink` family by family
    (one server's lines of one family at a time; a family's lines in order of the shapes)."""
    rng = random.Random(seed)
    times = list(range(end - span_s, end + 1, STEP_S))
    stamps = [f" {t}" for t in times]

    def add(family: str, sample: str, labels: str, values) -> None:
        head = sample + labels + " "
        if len(set(values)) == 1:  # a gauge that holds: its value written once
            head += f"{values[0]:.6g}"
            sink(family, [head + t for t in stamps])
        else:
            sink(family, [f"{head}{v:.6g}{t}" for t, v in zip(stamps, values, strict=True)])

    for i, shape in enumerate(shapes):
        base = {"job": "sglang", "instance": instance(i)}
        host = instance(i).split(":")[0]
        tok_s = rng.uniform(500, 5000)
        accept = rng.uniform(1.5, 4.0)
        restart = None if shape.restart_at is None else times[0] + shape.restart_at * span_s
        stall_from = times[-1] - shape.stalled_s if shape.stalled_s else None

        def counter(rate: float, restart=restart, stall_from=stall_from) -> list[float]:
            values = []
            for t in times:
                start = times[0] if restart is None or t < restart else restart
                values.append(rate * (min(t, stall_from or t) - start))
            return values

        add("up", "up", _labels(**base), [1.0] * len(times))
        tokenizer = {**base, "engine_type": "unified", "model_name": "m"}
        generated = counter(tok_s)
        add("sglang:generation_tokens_total", "sglang:generation_tokens_total", _labels(**tokenizer), generated)
        add("sglang:num_requests_total", "sglang:num_requests_total", _labels(**tokenizer), counter(tok_s / 256))
        add("sglang:prompt_tokens_total", "sglang:prompt_tokens_total", _labels(**tokenizer), counter(tok_s / 2))
        if shape.speculative and shape.verify:
            add("sglang:spec_verify_calls_total", "sglang:spec_verify_calls_total", _labels(**tokenizer),
                counter(tok_s / accept))
        for le in (*shape.ttft_buckets, float("inf")) if shape.ttft_buckets else TTFT_BUCKETS:
            share = 1.0 if le == float("inf") else {"fast": min(1.0, 0.995 + (le - 0.1)),
                                                    "slow": min(0.97, 0.3 + le / 4)}.get(shape.ttft, min(1.0, 0.3 + le / 4))
            add("sglang:time_to_first_token_seconds", "sglang:time_to_first_token_seconds_bucket",
                _labels(**tokenizer, le="+Inf" if le == float("inf") else f"{le}"), counter(tok_s / 256 * share))
        for dp in range(shape.dp):
            running = shape.running[dp % len(shape.running)]
            for tp in range(shape.tp):
                rank = {**tokenizer, "tp_rank": str(dp * shape.tp + tp), "pp_rank": "0"}
                if shape.dp > 1:
                    rank["dp_rank"] = str(dp)
                if shape.realtime:
                    add("sglang:realtime_tokens_total", "sglang:realtime_tokens_total",
                        _labels(**rank, mode="decode"), counter(tok_s / shape.dp))
                gauges = [("sglang:num_running_reqs", running), ("sglang:num_queue_reqs", 2),
                          ("sglang:token_usage", 0.4)]
                if shape.kv_tokens:
                    gauges += [("sglang:num_used_tokens", 40000), ("sglang:max_total_num_tokens", 100000)]
                # a server that does not speculate reports its spec gauges as 0 (SGLang 0.5.16, as captured)
                gauges += [("sglang:spec_accept_length", accept if shape.speculative else 0.0),
                           ("sglang:spec_num_draft_tokens", 4 if shape.speculative else 0),
                           ("sglang:spec_num_steps", 3 if shape.speculative else 0)]
                for name, value in gauges:
                    add(name, name, _labels(**rank), [value] * len(times))
        if shape.dcgm:
            for gpu in range(GPUS_PER_HOST):
                dcgm = {"job": "dcgm", "instance": f"{host}:9400", "gpu": str(gpu), shape.dcgm: host,
                        "modelName": "NVIDIA H200", "UUID": f"GPU-{i:04d}-{gpu}"}
                for name, value in (("DCGM_FI_DEV_FB_USED", 120000 + 100 * gpu), ("DCGM_FI_DEV_FB_FREE", 23000),
                                    ("DCGM_FI_DEV_GPU_UTIL", rng.uniform(40, 99))):
                    add(name, name, _labels(**dcgm), [value] * len(times))


def benchmark_shapes(servers: int) -> list[Shape]:
    """`servers` servers, each TP2 with every family; DCGM on every 4th host (8 GPUs each)."""
    return [Shape(dcgm="Hostname" if i % 4 == 0 else None) for i in range(servers)]


def fleet_prometheus(tmp: Path, shapes: list[Shape], end: int, rules: bool = False, lookback: str | None = None,
                     feed: str = "scrape", span_s: int = SPAN_S, query_log: Path | None = None,
                     rules_span_s: int = 600) -> Prometheus:
    """Prometheus holding the shapes' series up to `end` (`feed`: "scrape" into its head block, "backfill" into
    blocks); with `rules`, also `specmon fleet rules`' recording rules, backfilled over the last `rules_span_s`
    (`promtool tsdb create-blocks-from rules`, evaluated every STEP_S) and loaded (so `fleet` reads those
    columns by record name). `lookback`: the query lookback delta, when not Prometheus' 5 minutes. `span_s`
    (backfill only): how far back the series go. `query_log`: Prometheus logs there each query it answers, with
    its own timings."""
    data = tmp / "prometheus" / "data"
    data.mkdir(parents=True, exist_ok=True)
    options = {"extra_args": ["--storage.tsdb.retention.time=30d",
                              *([f"--query.lookback-delta={lookback}"] if lookback else [])],
               "scrape_interval": f"{STEP_S}s",  # the series' own interval, as Prometheus reports it to `fleet`
               "query_log": query_log}
    if feed == "backfill":
        source = tmp / "series.om"
        write_openmetrics(shapes, end, source, span_s)
        subprocess.run([promtool_binary(), "tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
                       check=True, capture_output=True, timeout=600)
        source.unlink()
        prom = Prometheus(tmp, [], **options)
    elif feed == "scrape":
        if span_s != SPAN_S:
            raise ValueError("a scraped feed spans SPAN_S seconds")
        prom = _scraped(tmp, openmetrics(shapes, end), len(shapes), end, options)
    else:
        raise ValueError(f"feed is scrape or backfill, not {feed!r}")
    return with_fleet_rules(tmp, prom, end, rules_span_s, options) if rules else prom


def with_fleet_rules(tmp: Path, prom: Prometheus, end: int, rules_span_s: int, options: dict) -> Prometheus:
    """`prom` stopped and started again with `specmon fleet rules`' recording rules loaded, their records
    backfilled over the `rules_span_s` seconds before `end` (`options`: Prometheus' keyword arguments)."""
    data = tmp / "prometheus" / "data"
    rules_file = tmp / "rules.yml"
    rules_text = subprocess.run([sys.executable, "-m", "specmon", "fleet", "rules"], check=True,
                                capture_output=True, text=True).stdout
    # promtool evaluates every rule against the data alone: a rule reading another's record (the TTFT p99
    # columns read the bucket rates' record) is backfilled in a second pass, once the first pass's blocks are
    # in. Each pass is the same group in the same file, so it is evaluated at the same instants (a group's
    # offset within the interval is a hash of its name and file) as the loaded rules are.
    for rules_pass in _rules_passes(rules_text):
        rules_file.write_text(rules_pass)
        try:
            subprocess.run([promtool_binary(), "tsdb", "create-blocks-from", "rules", f"--start={end - rules_span_s}",
                            f"--end={end + 1}", f"--url={prom.url}", f"--eval-interval={STEP_S}s",
                            f"--output-dir={tmp / 'recorded'}", str(rules_file)],
                           check=True, capture_output=True, timeout=600)
        finally:
            prom.stop()
        for block in (tmp / "recorded").iterdir():
            block.rename(data / block.name)
        prom = Prometheus(tmp, list(prom.jobs.values()), **options)
    prom.stop()
    rules_file.write_text(rules_text)
    return Prometheus(tmp, list(prom.jobs.values()), rule_files=[rules_file], evaluation=f"{STEP_S}s", **options)


def _rules_passes(rules_text: str) -> list[str]:
    """The rules file's recording group in passes: the rules that read only series, then those that read a
    record (each pass a rules file of that one group)."""
    import yaml

    group = next(g for g in yaml.safe_load(rules_text)["groups"] if any("record" in r for r in g["rules"]))
    records = {rule["record"] for rule in group["rules"]}
    later = [rule for rule in group["rules"] if any(record in rule["expr"] for record in records)]
    first = [rule for rule in group["rules"] if rule not in later]
    return [yaml.safe_dump({"groups": [{"name": group["name"], "rules": rules}]}, sort_keys=False)
            for rules in (first, later) if rules]


class _OneScrape(ThreadingHTTPServer):
    """A loopback target that serves `body` to the first scrape and nothing after."""

    daemon_threads = True

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.served = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                body = b"" if server.served.is_set() else server.body
                self.send_response(200)
                self.send_header("content-type", "text/plain; version=0.0.4")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                server.served.set()

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def _scraped(tmp: Path, text: str, servers: int, end: int, options: dict) -> Prometheus:
    """Prometheus with every sample of `text` in its head: one scrape, labels and timestamps honoured."""
    lines = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value, at = line.rsplit(" ", 2)
            lines.append(f"{series} {value} {int(at) * 1000}")
    target = _OneScrape(("\n".join(lines) + "\n").encode())
    prom = Prometheus(tmp, [Job("feeder", [f"127.0.0.1:{target.server_address[1]}"], interval=f"{STEP_S}s",
                                honor=True)], **options)
    points = SPAN_S // STEP_S + 1
    deadline = time.monotonic() + 120
    try:
        while len(prom.query(f'count_over_time(up{{job="sglang"}}[{SPAN_S + STEP_S}s]) == {points}', at=end)) < servers:
            if time.monotonic() > deadline:
                raise AssertionError(f"Prometheus did not take the {servers} servers' series in one scrape")
            time.sleep(0.5)
    except BaseException:
        prom.stop()
        raise
    finally:
        target.shutdown()
        target.server_close()
    return prom


def backfilled_prometheus(tmp: Path, shapes: list[Shape], end: int, rules: bool = False,
                          lookback: str | None = None) -> Prometheus:
    """`fleet_prometheus` with the series in blocks (`promtool tsdb create-blocks-from openmetrics`)."""
    return fleet_prometheus(tmp, shapes, end, rules, lookback, feed="backfill")
