"""How close the prediction of shorter chains comes to what a chain of that length measures, on agreement shaped
like the trained pair's (bursty, a few memorised prompts): the trace replay against the histogram formula, over
several seeds, and what `specmon predict` costs.

Run: .venv/bin/python -m benchmarks.predict_accuracy [--seeds 20]
The truth is SGLang's chain verification run over the same agreement sequences at each length
(`tests/support/chains.py`), so the only error left is the predictor's own (real SGLang adds one more: its greedy
outputs change with the chain length).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from specmon.bench.predict import accept_length, predict_run
from tests.support.chains import measured_accept, trained_like_agreements, write_chain_run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    errors: dict[tuple[str, int], list[float]] = {}
    cost = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            agreements = trained_like_agreements(seed=seed)
            run = write_chain_run(Path(tmp) / str(seed), agreements, 16)
            started = time.perf_counter()
            predicted = {p.draft_tokens: p.accept_length for p in predict_run(run, [16, 10, 5]).predictions}
            cost.append(time.perf_counter() - started)
            histograms = [r.accept_histogram for r in run.requests]
            for m in (16, 10, 5):
                truth = measured_accept(agreements, m, 256)
                errors.setdefault(("replay", m), []).append((predicted[m] / truth - 1) * 100)
                errors.setdefault(("formula", m), []).append((accept_length(histograms, m) / truth - 1) * 100)
    print(f"{args.seeds} seeds x 24 requests x 256 tokens, predicted from 16 draft tokens")
    print("method   M   mean error   worst")
    for (method, m), values in sorted(errors.items(), key=lambda kv: (kv[0][0] != "replay", -kv[0][1])):
        worst = max(values, key=abs)
        print(f"{method:<8} {m:>2}  {statistics.mean(values):+8.2f}%   {worst:+6.2f}%")
    print(f"predict_run (3 lengths, 2000 bootstrap resamples each): median {statistics.median(cost) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
