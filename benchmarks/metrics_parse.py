"""How long one /metrics reading takes to parse: `check` and `bench` (`parse_metrics`) against the Live view's
(`parse_scrape`), on a real SGLang 0.5.16 answer grown to an 8-rank server's size.

The text is the real answer of `tests/fixtures/api/h200-0.5.16-metrics-eagle3.txt` (one GPU, 58 KB), every
sample with a `tp_rank` label repeated for ranks 0..7 (as a TP 8 server's schedulers report), then the whole
repeated with a `model_name` per copy up to at least --kib KiB (0.5 MB by default: a big deployment's answer).
"all families" is prometheus_client's parser over the whole text, which is what `parse_metrics` ran before it
became `parse_scrape` plus a mapping. Each parser runs --repeat times, interleaved, in one process; medians.

    .venv/bin/python -m benchmarks.metrics_parse [--kib 512] [--repeat 15]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from specmon.serving.metrics import parse_metrics
from specmon.serving.prom import parse_scrape

REAL = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "api" / "h200-0.5.16-metrics-eagle3.txt"


def eight_rank_text(kib: int) -> str:
    """The real answer with its per-rank samples for 8 TP ranks, copies of it (other model names) up to `kib`."""
    lines = []
    for line in REAL.read_text().splitlines():
        if 'tp_rank="0"' in line and not line.startswith("#"):
            lines += [line.replace('tp_rank="0"', f'tp_rank="{rank}"') for rank in range(8)]
        else:
            lines.append(line)
    text = "\n".join(lines) + "\n"
    samples = [line for line in lines if not line.startswith("#")]
    copy = 1
    while len(text) < kib * 1024:  # more models' samples, line by line, up to the size asked
        for line in samples:
            text += re.sub(r'model_name="[^"]*"', f'model_name="/models/copy{copy}"', line) + "\n"
            if len(text) >= kib * 1024:
                break
        copy += 1
    return text


def all_families(text: str) -> int:
    return sum(len(family.samples) for family in text_string_to_metric_families(text))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kib", type=int, default=512)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    text = eight_rank_text(args.kib)
    readers = {
        "parse_metrics (check, bench)": lambda: parse_metrics(text, 0.0),
        "parse_scrape (Live view)": lambda: parse_scrape(text, 0.0),
        "prometheus_client, all families": lambda: all_families(text),
    }
    times: dict[str, list[float]] = {name: [] for name in readers}
    for _ in range(args.repeat):
        for name, read in readers.items():
            start = time.process_time()
            read()
            times[name].append(time.process_time() - start)
    snap = parse_metrics(text, 0.0)
    print(f"/metrics text: {len(text) / 1024:.0f} KiB, {text.count(chr(10))} lines; generation tokens "
          f"{snap.generation_tokens:.0f}, running {snap.num_running_reqs}")
    for name, values in times.items():
        print(f"{name:34} median {1000 * statistics.median(values):6.1f} ms  (min {1000 * min(values):.1f}, "
              f"max {1000 * max(values):.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
