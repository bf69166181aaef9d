"""`specmon bench` with production's request records: `--prompts-from-traffic PATH` samples the prompts from
them, `--against-traffic PATH` (and the former) checks the run's τ against theirs (specmon.traffic.production);
without either it is specmon.bench.cli's `run_bench` as it is."""

from __future__ import annotations

import argparse
import os
import sys

from specmon.bench import cli as bench_cli
from specmon.bench.prompts import Prompt, PromptError
from specmon.bench.run import RunSettings
from specmon.text import printable
from specmon.traffic.production import TRAFFIC_PREFIX, NoPromptText, judge_against, sample_prompts
from specmon.traffic.reader import PathRefused


def run_bench(args: argparse.Namespace) -> int:
    """Handler of `specmon bench`: 2 for a records PATH that cannot be read or holds no prompt text."""
    source, against = getattr(args, "prompts_from_traffic", None), getattr(args, "against_traffic", None)
    if source and args.prompts:
        print("specmon bench: --prompts and --prompts-from-traffic name two prompt sets: give one", file=sys.stderr)
        return 2
    if getattr(args, "keep_prompts", False) and not source:
        print("specmon bench: --keep-prompts keeps production's prompts: it goes with --prompts-from-traffic",
              file=sys.stderr)
        return 2
    for flag, path in (("--prompts-from-traffic", source), ("--against-traffic", against)):
        if path and not os.path.exists(path):
            print(f"specmon bench: {flag} {printable(path)[:200]}: no such file or directory", file=sys.stderr)
            return 2
    sampled: list[Prompt] = []
    categories = getattr(args, "prompt_categories", None)

    def sample(settings: RunSettings) -> tuple[list[Prompt], str]:
        try:
            assert source is not None
            drawn = sample_prompts([source], settings.requests, max_new_tokens=args.max_new_tokens,
                                   categories=categories)
        except (NoPromptText, PathRefused) as exc:
            raise PromptError(str(exc)) from None
        print(f"specmon bench: {drawn.describe()}", file=sys.stderr)
        sampled.extend(drawn.prompts)
        return drawn.prompts, TRAFFIC_PREFIX + printable(source)[:4000]

    paths = [p for p in (against or source,) if p]
    judge = judge_against(paths, sampled, categories) if paths else None
    return bench_cli.run_bench(args, sample if source else None, judge)
