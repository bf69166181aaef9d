"""What keeps a refresh cheap at 10,000 servers, on a real Prometheus: servers that share their TTFT buckets
have their bounds from one answer of a few samples (not a sample per server and bound), the tok/s history is
read at the sparkline's own resolution, and Prometheus' answers decoded typed give exactly what the general
reading gives."""

from __future__ import annotations

import asyncio
import time

import pytest

from specmon.fleet import promapi
from specmon.fleet.promapi import PromClient
from specmon.fleet.promql import HISTORY_S, HISTORY_STEPS, FleetQueries
from specmon.fleet.reader import FleetReader, answer_s
from tests.support.fleet_series import TTFT_BUCKETS, Shape, backfilled_prometheus

pytestmark = pytest.mark.timeout(300)

SERVERS = 5


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    end = int(time.time()) - 120
    server = backfilled_prometheus(tmp_path_factory.mktemp("read-cost"), [Shape(dcgm="Hostname")] * SERVERS, end)
    server.end = end
    try:
        yield server
    finally:
        server.stop()


class Counting(PromClient):
    """A PromClient that keeps each instant query's expression and how many samples it answered."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.asked: list[tuple[str, int]] = []
        self.ranges: list[list] = []

    async def query(self, expr, at=None):
        answer = await super().query(expr, at)
        self.asked.append((expr, len(answer)))
        return answer

    async def query_range(self, expr, start, end, step):
        answer = await super().query_range(expr, start, end, step)
        self.ranges.append(answer)
        return answer


def read(prom, client_kind=Counting):
    async def once():
        async with client_kind(prom.url) as client:
            reader = FleetReader(client, FleetQueries(), 60, clock=lambda: float(prom.end))
            await reader.configure()
            return client, reader, await reader.read()

    return asyncio.run(once())


def test_servers_sharing_their_ttft_buckets_have_their_bounds_from_one_small_answer(prom):
    client, reader, reading = read(prom)
    finite = [le for le in TTFT_BUCKETS if le != float("inf")]
    assert len(reader.ttft_bounds) == SERVERS
    assert set(reader.ttft_bounds.values()) == {(min(finite), max(finite))}
    per_server = FleetQueries().ttft_bucket_bounds([])
    assert not [expr for expr, _ in client.asked if expr == per_server]  # no sample per server and bound
    (shared,) = [count for expr, count in client.asked if expr == FleetQueries().ttft_shared_bounds()]
    assert shared == len(finite) + 2  # a count per finite bound, +Inf's, and the servers'
    assert len(reading.columns["ttft_p99_s"]) == SERVERS


def test_the_history_is_read_at_the_sparkline_s_resolution(prom):
    client, _, reading = read(prom)
    assert reading.history_read and len(reading.history) == SERVERS
    for series in reading.history:
        assert len(series.points) == HISTORY_STEPS + 1  # both ends of the 15 minutes
        times = [t for t, _ in series.points]
        assert times[-1] - times[0] == HISTORY_S


def test_answers_decoded_typed_are_what_the_general_reading_gives(prom, monkeypatch):
    typed_client, _, typed = read(prom)
    decoded: list[object] = []
    real_typed = promapi._typed
    monkeypatch.setattr(promapi, "_typed", lambda *args: decoded.append(real_typed(*args)))  # always None
    general_client, _, general = read(prom)
    assert decoded and all(answer is not None for answer in decoded)  # each answer had Prometheus' own form
    assert sorted(typed_client.asked) == sorted(general_client.asked)
    assert typed.notes == general.notes
    assert same(typed.up, general.up) and same(typed.history, general.history)
    assert typed.columns.keys() == general.columns.keys()
    for key in typed.columns:
        assert same(typed.columns[key], general.columns[key]), key


def same(first, second) -> bool:
    """The same series, in any order (Prometheus keeps none for an aggregation); NaN is NaN (by repr)."""
    return sorted(map(repr, first)) == sorted(map(repr, second))


@pytest.mark.parametrize(("targets", "seconds"), [(0, 10.0), (1000, 10.0), (2000, 13.0), (10_000, 37.0),
                                                   (1_000_000, 37.0)])
def test_an_answer_may_take_longer_with_the_fleet_s_size_up_to_a_bound(targets, seconds):
    assert answer_s(10.0, targets) == pytest.approx(seconds)


def test_the_answers_bound_is_the_client_s_own_for_a_small_fleet(prom):
    client, reader, reading = read(prom)
    assert client.answer_s == reader.answer_s == 2 * client.timeout_s
    assert not [note for note in reading.notes if "may take up to" in note]


def test_the_cyclic_collector_is_paused_only_while_answers_are_read(prom):
    import gc

    paused: list[bool] = []
    real_number = promapi._number
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(promapi, "_number", lambda value: paused.append(not gc.isenabled()) or real_number(value))
        read(prom)
    assert paused and all(paused) and gc.isenabled()
    gc.disable()
    try:
        read(prom)
        assert not gc.isenabled()  # left as it was
    finally:
        gc.enable()
