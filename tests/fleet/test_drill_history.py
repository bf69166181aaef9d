"""The observed load a drill-down weights a grid sweep's recommendation by: a real Prometheus holding a server's
last half hour (backfilled blocks; TP ranks counted once, DP ranks summed), read by one range query."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from specmon.fleet.drill import PromLiveSampler
from specmon.fleet.promapi import PromClient
from specmon.fleet.promql import FleetQueries
from specmon.live.sampler import LiveMonitor
from specmon.live.tracker import LiveTracker
from specmon.sweep.load_weight import weigh_by_load
from tests.support.fleet_series import SPAN_S, STEP_S, Shape, backfilled_prometheus, instance


def test_a_drill_down_reads_the_server_s_running_count_over_the_last_hour_from_prometheus(tmp_path: Path) -> None:
    end = int(time.time()) - 30
    prom = backfilled_prometheus(tmp_path, [Shape(tp=2, dp=2, running=(3, 5)), Shape(running=(40,))], end)
    try:
        sampler = PromLiveSampler(lambda: PromClient(prom.url, timeout_s=10.0), FleetQueries(), instance(0),
                                  LiveMonitor(LiveTracker()))

        async def read() -> None:
            async with PromClient(prom.url, timeout_s=10.0) as client:
                await sampler.read_once(client)

        asyncio.run(read())
    finally:
        prom.stop()
    assert sampler.running_history is not None
    counts, span = sampler.running_history
    assert set(counts) == {8.0}  # 3 + 5 over the DP ranks, each TP rank once; not the other server's 40
    assert SPAN_S - 4 * STEP_S <= span <= SPAN_S + 300  # Prometheus carries the last sample for its 5-minute lookback
    report = {"concurrency": [4, 8, 16], "cells": [
        {"steps": 3, "topk": 1, "draft_tokens": 4, "concurrency": c, "speedup": s}
        for c, s in ((4, 1.3), (8, 0.9), (16, 0.7))]}
    observed = weigh_by_load(report, counts, span, "Prometheus")
    assert observed is not None and [b["band"] for b in observed["bands"]] == ["5–8"]
    assert observed["winner"]["steps"] == 0  # at 8 running it loses: no speculation wins
    assert observed["text"] == f"weighted by observed load over the last {round(span / 60)} min, from Prometheus"
