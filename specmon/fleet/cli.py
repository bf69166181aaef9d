"""`specmon fleet ... --once [--json]` (one snapshot of every server, for scripts) and `specmon fleet rules`
(the Prometheus rules file). No Textual: the app (`specmon fleet` without --once) is in specmon.tui."""

from __future__ import annotations

import argparse
import asyncio
import math
import shutil
import sys
from dataclasses import dataclass

from specmon.fleet.model import FleetSnapshot
from specmon.fleet.promapi import PromAuth, PromClient, PromError
from specmon.fleet.promql import (
    MAX_WINDOW_S,
    FleetQueries,
    canonical_selector,
    selector_problem,
    valid_label_name,
)
from specmon.live.paying import CurveFinder
from specmon.text import printable, quoted, strict_json
from specmon.urls import UrlRefused, base_url

EXIT_OK, EXIT_ALERTING, EXIT_PROMETHEUS = 0, 1, 2
MAX_INTERVAL_S = 86400.0


@dataclass(frozen=True)
class FleetOptions:
    """What `specmon fleet` reads, from its command line (checked: `problems()`)."""

    prometheus: str | None
    queries: FleetQueries
    window_s: float
    interval_s: float
    routers: tuple[str, ...]
    auth: PromAuth

    def problems(self) -> list[str]:
        """What is wrong with the options, each in one line; the secret and CA files are read now (a secret
        file others may read is warned of on stderr)."""
        q = self.queries
        out = []
        for flag, selector, example in (("--selector", q.selector, 'job="sglang"'),
                                        ("--gpu-selector", q.gpu_selector, 'job="dcgm"')):
            problem = selector_problem(selector)
            if problem:
                out.append(f"{flag} {quoted(selector)} is not a list of matchers ({problem}; e.g. '{example}', "
                           f"no braces)")
        for flag, name in (("--server-label", q.server_label), ("--host-label", q.host_label)):
            if name is not None and not valid_label_name(name):
                out.append(f"{flag} {quoted(name)} is not a Prometheus label name")
        for flag, seconds, most in (("--window", self.window_s, MAX_WINDOW_S),
                                    ("--interval", self.interval_s, MAX_INTERVAL_S)):
            if not (math.isfinite(seconds) and 0 < seconds <= most):
                out.append(f"{flag} {seconds:g} is not a number of seconds above 0 and at most {most:g}")
        for flag, url in (("--prometheus", self.prometheus), *(("--router", router) for router in self.routers)):
            try:
                if url is not None:
                    base_url(url, what=flag, scheme_required=True)
            except UrlRefused as exc:
                out.append(str(exc))
        try:
            self.auth.check(warn=lambda line: print(f"specmon fleet: warning: {printable(line)}", file=sys.stderr))
        except PromError as exc:
            out.append(exc.message)
        return out

    def client(self) -> PromClient:
        assert self.prometheus is not None
        return PromClient(self.prometheus, self.auth, timeout_s=min(10.0, max(2.0, self.interval_s)))


def options_from(args: argparse.Namespace) -> FleetOptions:
    """The options of a `fleet` command line, its selectors in canonical form (`problems()` says what is wrong
    with them)."""
    queries = FleetQueries(selector=canonical_selector(args.selector), server_label=args.server_label,
                           host_label=args.host_label, gpu_selector=canonical_selector(args.gpu_selector),
                           window_s=float(args.window))
    return FleetOptions(args.prometheus, queries, float(args.window), float(args.interval), tuple(args.router or ()),
                        PromAuth(args.bearer_token_file, args.basic_auth_file, args.ca_file))


def run_fleet(args: argparse.Namespace) -> int:
    """`fleet rules` or `fleet --once` (each row with its configuration's measured curve, given `args.curves`):
    exit 0 all well, 1 a server down or alerting, 2 Prometheus unreachable or not answering the API (or bad
    usage)."""
    curves: CurveFinder | None = getattr(args, "curves", None)
    options = options_from(args)
    problems = options.problems()
    if problems:
        for problem in problems:
            print(f"specmon fleet: {problem}", file=sys.stderr)
        return EXIT_PROMETHEUS
    if args.action == "rules":
        print(options.queries.rules_file(), end="")
        return EXIT_OK
    if args.action == "dashboard":
        from specmon.fleet.dashboard import dashboard_json

        print(dashboard_json(options.queries), end="")
        return EXIT_OK
    if not options.prometheus:
        print("specmon fleet: give --prometheus URL (the Prometheus that scrapes your servers)", file=sys.stderr)
        return EXIT_PROMETHEUS
    snapshot = asyncio.run(snapshot_once(options, curves=curves))
    if snapshot.error:
        print(f"specmon fleet: {printable(snapshot.error)}", file=sys.stderr)
        return EXIT_PROMETHEUS
    for note in (*snapshot.notes, *([snapshot.gpu_note] if snapshot.gpu_note else [])):
        print(f"specmon fleet: {printable(note)}", file=sys.stderr)
    if args.json:
        print(strict_json(snapshot.to_json(), indent=2))
    else:
        from specmon.fleet.text import snapshot_lines

        width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None  # piped: nothing cut
        print("\n".join(snapshot_lines(snapshot, width)))
    return EXIT_ALERTING if snapshot.alerting else EXIT_OK


async def snapshot_once(options: FleetOptions, records=None, history: bool = True,
                        curves: CurveFinder | None = None) -> FleetSnapshot:
    """One FleetSnapshot (its `error` set when Prometheus could not be read); without the 15-minute tok/s
    history when `history` is False (one server's drill-down needs only the rows); each row with its
    configuration's measured curve given ``curves``."""
    from specmon.fleet.reader import FleetReader
    from specmon.fleet.records import own_presets, own_records
    from specmon.fleet.tracker import FleetTracker

    tracker = FleetTracker(options.queries, options.prometheus or "",
                           own_records() if records is None else records, own_presets(), curves)
    try:
        async with options.client() as client:
            reader = FleetReader(client, options.queries, options.window_s, options.routers)
            reader.with_history = history
            tracker.queries = await reader.configure()
            return tracker.update(await reader.read())
    except PromError as exc:
        return tracker.failed(exc, 0.0)
