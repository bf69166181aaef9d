"""`specmon sweep`, and its `--report RUN_ID [--prometheus URL]`: a stored grid sweep's report weighted by the
running-request load Prometheus observed over the last hour, by the one module above both the sweep and the fleet
(so that neither imports the other)."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

EXIT_OK, EXIT_UNWEIGHTED, EXIT_USAGE = 0, 1, 2


def run_sweep(args: argparse.Namespace) -> int:
    """The `sweep` handler: a sweep (`specmon.sweep.cli`), or with --report a stored grid sweep's report (exit 0;
    1 when Prometheus was asked and could not weight it: the report is printed unweighted; 2 bad usage)."""
    from specmon.sweep.cli import run_sweep as sweep

    if args.report is None:
        if args.prometheus:
            return _usage("--prometheus weights a stored grid sweep's report: give --report RUN_ID")
        return sweep(args)
    return _report(args)


def _usage(message: str) -> int:
    from specmon.text import printable

    print(f"specmon sweep: {printable(message)}", file=sys.stderr)
    return EXIT_USAGE


def _report(args: argparse.Namespace) -> int:
    from specmon.sweep.cli import stored_grid_report
    from specmon.sweep.grid_report import format_grid
    from specmon.sweep.plan import SweepError
    from specmon.text import printable, strict_json

    try:
        report = stored_grid_report(args.report)
    except SweepError as exc:
        return _usage(str(exc))
    code = EXIT_OK
    if args.prometheus:
        observed, why = _observed_load(args, report)
        if why is not None and observed is None:
            if why.startswith("--"):
                return _usage(why)
            print(f"specmon sweep: not weighted by observed load: {printable(why)}", file=sys.stderr)
            code = EXIT_UNWEIGHTED
        report["observed_load"] = observed
    print(strict_json(report, indent=2) if args.json else format_grid(report))
    return code


def _observed_load(args: argparse.Namespace, report: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The report's weighting by the running counts of the servers --selector picks in Prometheus over the last
    hour (`weigh_by_load`), or None and why (a bad option starts with its flag)."""
    from specmon.fleet.drill import running_history
    from specmon.fleet.promapi import PromClient, PromError
    from specmon.fleet.promql import FleetQueries, canonical_selector, selector_problem, valid_label_name
    from specmon.sweep.load_weight import weigh_by_load
    from specmon.text import quoted

    if problem := selector_problem(args.selector):
        return None, f"--selector {quoted(args.selector)} is not a list of matchers ({problem}; e.g. 'job=\"sglang\"')"
    if not valid_label_name(args.server_label):
        return None, f"--server-label {quoted(args.server_label)} is not a Prometheus label name"
    queries = FleetQueries(selector=canonical_selector(args.selector), server_label=args.server_label)

    async def read() -> tuple[list[float | None], float, int] | None:
        async with PromClient(args.prometheus, timeout_s=10.0) as client:
            return await running_history(client, queries.running(), time.time())

    try:
        history = asyncio.run(read())
    except PromError as exc:
        return None, exc.message
    if history is None:
        return None, f"Prometheus at {args.prometheus} holds no running-request history of a server {args.selector}"
    counts, span, servers = history
    source = f"Prometheus ({servers} server{'s' if servers > 1 else ''} {args.selector})"
    observed = weigh_by_load(report, counts, span, source)
    return observed, None if observed is not None else "too few running-request samples"
