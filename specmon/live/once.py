"""`specmon monitor --once`: one LiveSnapshot for scripts, from /metrics over a window (or the log's recent
`Decode batch` lines when the server has no /metrics), plus /server_info."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from specmon.live.attach import plan_attach, read_range
from specmon.live.model import LiveSnapshot
from specmon.live.paying import CurveFinder, with_speculation_pays
from specmon.live.scrape import read_metrics, read_server_info
from specmon.live.tracker import LiveTracker


def baseline_accept(preset: str | None, results_dir: str | None = None) -> float | None:
    """The acceptance length of the preset's last finished benchmark (specmon's result store), if any."""
    if not preset:
        return None
    from specmon.bench.report import last_finished_accept
    from specmon.bench.results import ResultStore

    try:
        runs = ResultStore(results_dir).load_all()
    except OSError:
        return None
    return last_finished_accept(runs, preset)


def feed_log_tail(tracker: LiveTracker, path: str) -> None:
    """The recent lines of ``path`` (its last MiB, after its last startup) into ``tracker``; never raises."""
    try:
        plan = plan_attach(path)
        data = read_range(path, plan.tail_start, plan.size)
    except (OSError, ValueError):
        return
    for line in data.decode("utf-8", "replace").splitlines():
        tracker.feed_line(line)


async def collect(
    url: str,
    window_s: float = 10.0,
    *,
    log_path: str | None = None,
    api_key: str | None = None,
    preset: str | None = None,
    asked: Mapping[str, Any] | Sequence[str] | None = None,
    baseline: float | None = None,
    interval_s: float = 1.0,
    clock: Callable[[], float] = time.time,
    curves: CurveFinder | None = None,
) -> LiveSnapshot:
    """Scrape ``url`` every ``interval_s`` for ``window_s`` seconds and return the snapshot over that window
    (with the serving configuration's measured curve read at its running count, given ``curves``)."""
    from specmon.http.client import HttpClient
    from specmon.http.headers import auth_headers
    from specmon.urls import base_url

    tracker = LiveTracker(preset=preset, asked=asked, baseline_accept=baseline)
    async with HttpClient(base_url(url), headers=auth_headers(api_key), connect_timeout_s=5.0) as http:
        info_reading = await read_server_info(http)
        if info_reading.info is not None:
            tracker.set_server_info(info_reading.info)
        elif info_reading.error is not None:
            tracker.server_info_unreadable(info_reading.error)
        started = time.monotonic()
        while True:
            reading = await read_metrics(http, clock())
            if reading.unreachable:
                tracker.set_reachable(False)
                break
            if reading.absent:
                tracker.metrics_unavailable()
                break
            if reading.scrape is not None:
                tracker.add_scrape(reading.scrape)
            remaining = window_s - (time.monotonic() - started)
            if remaining <= 0.01:
                break
            await asyncio.sleep(min(interval_s, remaining))
    if log_path:
        feed_log_tail(tracker, log_path)
    snapshot = tracker.snapshot(window_s, now=clock())
    return with_speculation_pays(snapshot, tracker.spec, curves, clock()) if curves is not None else snapshot


def describe(snapshot: LiveSnapshot) -> str:
    """The snapshot as a few lines of text (without --json), its control characters shown as escapes."""
    from specmon.live.text import snapshot_lines
    from specmon.text import printable

    return printable("\n".join(snapshot_lines(snapshot)), newlines=True)
