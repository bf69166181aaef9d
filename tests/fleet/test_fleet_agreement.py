"""Inline and recorded answers agree: the same Prometheus (series of every shape a fleet has: DP×TP duplicates,
SGLang versions without realtime tokens or verify calls, KV from token_usage only, a plain server, a restart, a
stall, TTFT buckets of a server's own, DCGM's `Hostname` and `hostname`) with `specmon fleet rules`' recording rules backfilled at the same
instants, read once with every column computed inline from its parts (`specmon.fleet.figures`) and once by
record name (Prometheus evaluating each column's whole expression)."""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import replace

import pytest

from specmon.fleet.promapi import PromClient
from specmon.fleet.promql import FleetQueries
from specmon.fleet.reader import FleetReader
from specmon.fleet.tracker import FleetTracker
from tests.support.fleet_series import STEP_S, Shape, backfilled_prometheus, instance

pytestmark = pytest.mark.timeout(300)

SHAPES = {
    "tp2": Shape(dcgm="Hostname"),
    "dp2": Shape(dp=2, running=(20, 3), dcgm="hostname"),
    "before-0.5.9": Shape(realtime=False, verify=False),
    "token-usage": Shape(kv_tokens=False),
    "plain": Shape(speculative=False),
    "restarted": Shape(restart_at=0.9),
    "stalled": Shape(stalled_s=120),
    "fast-ttft": Shape(ttft="fast"),
    "slow-ttft": Shape(ttft="slow"),
    "own-ttft-buckets": Shape(ttft_buckets=(0.25, 0.5, 1.0, 2.0)),
}


@pytest.fixture(scope="module")
def readings(tmp_path_factory):
    end = int(time.time()) - 120
    # A backfilled rule writes no staleness marker where its answer stops (the stalled server's acceptance): a
    # lookback of one interval keeps such an old sample out, as the marker would in a live Prometheus.
    prom = backfilled_prometheus(tmp_path_factory.mktemp("agreement"), list(SHAPES.values()), end, rules=True,
                                 lookback=f"{STEP_S}s")
    # the last instant the recording rules were evaluated at (the group's own offset within each interval)
    record = FleetQueries().columns()[0].record
    at = max(t for series in prom.query(f"{record}[{2 * STEP_S}s]", at=end) for t, _ in series["values"])

    async def read(inline: bool):
        async with PromClient(prom.url) as client:
            reader = FleetReader(client, FleetQueries(), 60, clock=lambda: float(at))
            queries = await reader.configure()
            if inline:
                reader.queries = replace(queries, recorded=frozenset())
            reading = await reader.read()
            return reader.queries, reading, FleetTracker(reader.queries, prom.url).update(reading)

    try:
        yield {"inline": asyncio.run(read(True)), "recorded": asyncio.run(read(False))}
    finally:
        prom.stop()


def _values(samples) -> dict[frozenset, float]:
    return {frozenset(sample.labels.items()): sample.value for sample in samples}


def test_every_column_is_read_by_record_name_once_the_rules_are_loaded(readings):
    queries, _, _ = readings["recorded"]
    assert queries.recorded == {c.key for c in queries.columns() if not c.inline_only}
    assert readings["inline"][0].recorded == frozenset()


def test_inline_and_recorded_answers_agree_column_by_column(readings):
    _, inline, _ = readings["inline"]
    _, recorded, _ = readings["recorded"]
    assert inline.columns.keys() == recorded.columns.keys()
    for key in inline.columns:
        mine, theirs = _values(inline.columns[key]), _values(recorded.columns[key])
        assert mine.keys() == theirs.keys(), key
        for labels, value in mine.items():
            if math.isnan(value):
                assert math.isnan(theirs[labels]), (key, labels)
            else:
                assert value == pytest.approx(theirs[labels], rel=1e-12), (key, labels)


def test_the_snapshots_are_the_same_and_show_each_shape(readings):
    inline, recorded = readings["inline"][2], readings["recorded"][2]
    assert inline.to_json() == recorded.to_json()
    rows = {row.server: row for row in inline.rows}
    by_shape = {name: rows[instance(i)] for i, name in enumerate(SHAPES)}
    assert by_shape["tp2"].accept_source == "counters" and by_shape["tp2"].running == 24  # TP ranks counted once
    assert by_shape["tp2"].gpu_memory_used_ratio is not None
    dp2 = by_shape["dp2"]
    assert dp2.running == 23 and dp2.queued == 4 and "dp_imbalance" in {a.kind for a in dp2.alerts}
    assert dp2.gpu_memory_used_ratio is not None  # DCGM's newer `hostname` label
    old = by_shape["before-0.5.9"]
    assert old.accept_source == "gauge" and old.decode_tok_s and old.decode_tok_s > 0
    assert by_shape["token-usage"].kv_used_ratio == pytest.approx(0.4)
    assert by_shape["tp2"].kv_used_ratio == pytest.approx(0.4)
    assert by_shape["plain"].accept_length is None and by_shape["plain"].draft_tokens is None
    # its spec gauges say 0: no speculative figure at all, in the records the dashboard draws either
    plain = instance(list(SHAPES).index("plain"))
    for key in ("accept_length", "accept_gauge", "draft_tokens", "num_steps"):
        for reading in (readings["inline"][1], readings["recorded"][1]):
            assert not [s for s in reading.columns[key] if s.labels.get("instance") == plain], key
    assert by_shape["restarted"].state == "restarted"
    # TTFT p99 by the Live view's rule, in PromQL (recorded) as in Python (inline): a bound, never a made-up figure
    from specmon.live.quantiles import Quantile

    assert by_shape["tp2"].ttft_p99.value is not None and by_shape["tp2"].ttft_p99.value > 0.1
    assert by_shape["fast-ttft"].ttft_p99 == Quantile(below=pytest.approx(0.1))
    assert by_shape["slow-ttft"].ttft_p99 == Quantile(above=400.0)
    # a server with buckets of its own (the fleet's do not all share them): its p99, past its highest finite bound
    # (2 s), is that bound, not a figure read against the others' (400 s)
    assert by_shape["own-ttft-buckets"].ttft_p99 == Quantile(above=2.0)
    assert by_shape["stalled"].state == "stalled" and by_shape["stalled"].decode_tok_s == 0



def test_the_history_is_read_from_the_decode_record_once_it_is_recorded(readings):
    inline_queries, inline, _ = readings["inline"]
    recorded_queries, recorded, _ = readings["recorded"]
    assert recorded_queries.history(STEP_S) == recorded_queries.columns()[0].record != inline_queries.history(STEP_S)
    assert {s.labels["instance"] for s in recorded.history} == {s.labels["instance"] for s in inline.history}
