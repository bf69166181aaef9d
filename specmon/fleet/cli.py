"""`specmon fleet ... --once [--json]` (one snapshot of every server, for scripts) and `specmon fleet rules`
(the Prometheus rules file). No Textual: the app (`specmon fleet` without --once) is in specmon.tui."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from dataclasses import dataclass

from specmon.fleet.model import FleetSnapshot
from specmon.fleet.promapi import PromAuth, PromClient, PromError
from specmon.fleet.promql import FleetQueries, valid_label_name, valid_selector
from specmon.http.urls import BadUrl, checked_url
from specmon.text import strict_json

EXIT_OK, EXIT_ALERTING, EXIT_PROMETHEUS = 0, 1, 2


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
        q = self.queries
        out = []
        if not valid_selector(q.selector):
            out.append(f"--selector {q.selector!r} is not a list of matchers (e.g. 'job=\"sglang\"', no braces)")
        if not valid_selector(q.gpu_selector):
            out.append(f"--gpu-selector {q.gpu_selector!r} is not a list of matchers (e.g. 'job=\"dcgm\"')")
        for flag, name in (("--server-label", q.server_label), ("--host-label", q.host_label)):
            if name is not None and not valid_label_name(name):
                out.append(f"{flag} {name!r} is not a Prometheus label name")
        if not self.window_s > 0 or not self.interval_s > 0:
            out.append("--window and --interval must be positive")
        for flag, url in (("--prometheus", self.prometheus), *(("--router", router) for router in self.routers)):
            try:
                if url is not None:
                    checked_url(url, flag)
            except BadUrl as exc:
                out.append(str(exc))
        return out

    def client(self) -> PromClient:
        assert self.prometheus is not None
        return PromClient(self.prometheus, self.auth, timeout_s=min(10.0, max(2.0, self.interval_s)))


def options_from(args: argparse.Namespace) -> FleetOptions:
    queries = FleetQueries(selector=args.selector, server_label=args.server_label, host_label=args.host_label,
                           gpu_selector=args.gpu_selector, window_s=float(args.window))
    return FleetOptions(args.prometheus, queries, float(args.window), float(args.interval), tuple(args.router or ()),
                        PromAuth(args.bearer_token_file, args.basic_auth_file, args.ca_file))


def run_fleet(args: argparse.Namespace) -> int:
    """`fleet rules` or `fleet --once`: exit 0 all well, 1 a server down or alerting, 2 Prometheus unreachable
    or not answering the API (or bad usage)."""
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
    snapshot = asyncio.run(snapshot_once(options))
    if snapshot.error:
        print(f"specmon fleet: {snapshot.error}", file=sys.stderr)
        return EXIT_PROMETHEUS
    for note in (*snapshot.notes, *([snapshot.gpu_note] if snapshot.gpu_note else [])):
        print(f"specmon fleet: {note}", file=sys.stderr)
    if args.json:
        print(strict_json(snapshot.to_json(), indent=2))
    else:
        from specmon.fleet.text import snapshot_lines

        width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None  # piped: nothing cut
        print("\n".join(snapshot_lines(snapshot, width)))
    return EXIT_ALERTING if snapshot.alerting else EXIT_OK


async def snapshot_once(options: FleetOptions, records=None, history: bool = True) -> FleetSnapshot:
    """One FleetSnapshot (its `error` set when Prometheus could not be read); without the 15-minute tok/s
    history when `history` is False (one server's drill-down needs only the rows)."""
    from specmon.fleet.reader import FleetReader
    from specmon.fleet.records import own_presets, own_records
    from specmon.fleet.tracker import FleetTracker

    tracker = FleetTracker(options.queries, options.prometheus or "",
                           own_records() if records is None else records, own_presets())
    try:
        async with options.client() as client:
            reader = FleetReader(client, options.queries, options.window_s, options.routers)
            reader.with_history = history
            tracker.queries = await reader.configure()
            return tracker.update(await reader.read())
    except PromError as exc:
        return tracker.failed(exc, 0.0)
