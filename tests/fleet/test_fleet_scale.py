"""The fleet's cost grows with the fleet, not with its square: one refresh's answers turned into rows
(`FleetTracker.update`) at 500 and 2,000 servers, each server's samples and router worker found by key."""

from __future__ import annotations

import time

from specmon.fleet.promapi import Sample
from specmon.fleet.promql import FleetQueries
from specmon.fleet.tracker import FleetReading, FleetTracker, Worker

NOW = 1_800_000_000.0


def fleet_reading(servers: int) -> FleetReading:
    """Every server up, two DP ranks each, one router worker each, a figure in every per-server column."""
    names = [f"10.0.{i // 250}.{i % 250}:30000" for i in range(servers)]
    up = [Sample({"job": "sglang", "instance": name}, 1.0) for name in names]
    running = [Sample({"instance": name, "dp_rank": str(rank), "engine_type": "unified"}, 3.0)
               for name in names for rank in (0, 1)]
    columns = {column.key: [Sample({"instance": name}, 1.0) for name in names]
               for column in FleetQueries().columns() if not column.per_host and column.key != "running_per_dp"}
    columns["running_per_dp"] = running
    workers = [Worker(f"http://{name}", "decode") for name in names]
    return FleetReading(taken_at=NOW, window_s=60.0, scrape_s=15.0, up=up, columns=columns, workers=workers)


def update_s(servers: int) -> float:
    """The least time of three `update`s of a fresh tracker with the same refresh."""
    reading = fleet_reading(servers)
    best = float("inf")
    for _ in range(3):
        tracker = FleetTracker(FleetQueries(), "http://prom:9090")
        started = time.perf_counter()
        snapshot = tracker.update(reading)
        best = min(best, time.perf_counter() - started)
        assert len(snapshot.rows) == servers
    return best


def test_a_refresh_of_four_times_the_servers_costs_about_four_times_as_much():
    small, large = update_s(500), update_s(2000)
    # linear: ~4×; each row scanning every server's samples (as it did) read 12–16× here
    assert large / small < 8, f"500 servers {small * 1000:.0f} ms, 2,000 {large * 1000:.0f} ms"


def test_a_server_s_role_is_its_first_router_worker_s_in_the_routers_order():
    up = [Sample({"job": "sglang", "instance": "a:1", "server": "s"}, 1.0),
          Sample({"job": "sglang", "instance": "b:1", "server": "s"}, 1.0)]
    running = [Sample({"server": "s", "dp_rank": "1", "engine_type": "unified"}, 2.0),
               Sample({"server": "other", "dp_rank": "0"}, 9.0),
               Sample({"server": "s", "dp_rank": "0"}, 3.0)]
    workers = [Worker("http://c:1", "regular"), Worker("http://b:1/", "prefill"), Worker("http://a:1", "decode"),
               Worker("http://b:1", "decode")]
    reading = FleetReading(taken_at=NOW, window_s=60.0, scrape_s=15.0, up=up,
                           columns={"running_per_dp": running}, workers=workers)
    row = FleetTracker(FleetQueries(server_label="server"), "p").update(reading).rows[0]
    assert (row.role, row.role_source, row.running) == ("prefill", "router", 5.0)


def test_ten_thousand_servers_are_shown_and_more_are_left_out_and_said():
    from specmon.fleet.tracker import MAX_SERVERS

    assert MAX_SERVERS == 10000  # the fleet the rehearsal measures (benchmarks/fleet_scale.py)
    snapshot = FleetTracker(FleetQueries(), "p").update(fleet_reading(MAX_SERVERS + 3))
    assert len(snapshot.rows) == MAX_SERVERS
    assert f"more than {MAX_SERVERS} servers: the rest left out" in snapshot.notes
