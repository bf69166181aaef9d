"""The reads that went around specmon's bounds (the Prometheus API client, the router's /workers, the fleet
drill-down's /model_info, the emulator's node link) now go through them: a dripping answer ends at its
deadline, a `gzip, gzip` bomb is refused before it is decoded, and a 256 MiB answer is never read whole."""

from __future__ import annotations

import asyncio
import time
import tracemalloc

import pytest

from specmon.emulator.nodes import LeaderLink
from specmon.fleet.drill import reachable_url
from specmon.fleet.promapi import MAX_ANSWER_BYTES, PromClient, PromError
from specmon.fleet.reader import read_workers
from tests.support.hostile_http import Answer, HostileServer, bomb_answer

MIB = 1 << 20
BOMB = 512 * MIB
HOSTILE = {
    "gzip, gzip bomb": bomb_answer(BOMB, "gzip", "gzip"),
    "256 MiB plain": Answer(b"{", length=256 * MIB, endless=b" " * 65536),
    "endless chunked": Answer(b"{", framing="chunked", endless=b" " * 65536),
    "dripped": Answer(b'{"workers": []}' + b" " * 10_000, drip_s=0.05),
    "head, then silence": Answer(b"{}", hold_s=float("inf")),
}


def bounded(call, limit_mb: float = 60.0, limit_s: float = 8.0):
    tracemalloc.start()
    started = time.monotonic()
    try:
        result = call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    elapsed = time.monotonic() - started
    assert peak < limit_mb * MIB, f"peak {peak / MIB:.0f} MiB"
    assert elapsed < limit_s, f"took {elapsed:.1f} s"
    return result


@pytest.mark.parametrize("name", list(HOSTILE))
def test_the_routers_workers_are_read_within_the_bounds(name):
    with HostileServer({"/workers": HOSTILE[name]}) as router:
        workers, note = bounded(lambda: asyncio.run(read_workers(router.url, timeout_s=1.0)))
    assert workers == [] and note is not None and note.startswith(f"router {router.url}"), note


@pytest.mark.parametrize("name", list(HOSTILE))
def test_prometheus_answers_are_read_within_the_bounds(name):
    async def ask():
        async with PromClient(prometheus.url, timeout_s=1.0) as client:
            with pytest.raises(PromError) as failed:
                await client.query("up")
            return failed.value

    with HostileServer({"/api/v1/query": HOSTILE[name]}) as prometheus:
        error = bounded(lambda: asyncio.run(ask()), limit_mb=2.5 * MAX_ANSWER_BYTES / MIB)  # its limit: 32 MiB
    assert error.kind in ("unreachable", "bad_answer"), error


@pytest.mark.parametrize("name", list(HOSTILE))
def test_the_drill_down_reads_model_info_within_the_bounds(name):
    with HostileServer({"/model_info": HOSTILE[name], "/get_model_info": HOSTILE[name]}) as server:
        target = server.url.removeprefix("http://")
        url, _notes = bounded(lambda: reachable_url([target], timeout_s=1.0))
        assert url is None


@pytest.mark.parametrize("name", list(HOSTILE))
def test_the_emulators_node_link_reads_node_0_within_the_bounds(name):
    with HostileServer({"/_emulator/ranks": HOSTILE[name]}) as server:
        link = LeaderLink("127.0.0.1", server.port, node_rank=1)
        assert bounded(link.fetch) is None
