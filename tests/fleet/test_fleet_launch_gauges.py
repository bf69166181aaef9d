"""The gauges a server's launch fixes (KV pool, speculative settings) are not asked with every refresh: against a
real Prometheus scraping a target whose exposition changes, a refresh with nothing changed reuses those last
read, a restart has them read again in the same refresh, and a change without a restart shows once
`LAUNCH_EVERY_S` has passed (the most it can be late)."""

from __future__ import annotations

import asyncio
import time

import pytest

from specmon.fleet import reader as reader_module
from specmon.fleet.promapi import PromClient
from specmon.fleet.promql import FleetQueries
from specmon.fleet.reader import FleetReader
from specmon.fleet.tracker import FleetTracker
from tests.support.prometheus import Job, Prometheus, StaticMetrics

pytestmark = pytest.mark.timeout(120)


def exposition(total: int, requests: int, draft: int) -> str:
    rank = '{engine_type="unified",tp_rank="0",pp_rank="0"}'
    return "\n".join([
        f"sglang:num_running_reqs{rank} 3", f"sglang:num_queue_reqs{rank} 0",
        f"sglang:num_used_tokens{rank} 25000", f"sglang:max_total_num_tokens{rank} {total}",
        f"sglang:token_usage{rank} 0.9", f"sglang:spec_accept_length{rank} 2.5",
        f"sglang:spec_num_draft_tokens{rank} {draft}", f"sglang:spec_num_steps{rank} 3",
        f'sglang:num_requests_total{{engine_type="unified",model_name="m"}} {requests}', "",
    ])


def wait_until(prom: Prometheus, expr: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not prom.query(expr):
        assert time.monotonic() < deadline, f"never true: {expr}"
        time.sleep(0.2)


def test_the_launch_s_gauges_are_read_again_on_a_restart_and_at_most_launch_every_s_late(tmp_path, monkeypatch):
    target = StaticMetrics(exposition(total=100000, requests=50, draft=4))
    prom = Prometheus(tmp_path, [Job("sglang", [target.address])])
    monkeypatch.setattr(reader_module, "LAUNCH_EVERY_S", 1e9)
    asked: list[str] = []

    async def refreshes(between) -> list:
        async with PromClient(prom.url) as client:
            query = client.query

            async def counted(expr, at=None):
                asked.append(expr)
                return await query(expr, at=at)

            client.query = counted  # type: ignore[method-assign]
            reader = FleetReader(client, FleetQueries(window_s=4), 4)
            tracker = FleetTracker(await reader.configure(), prom.url)
            rows = []
            for step in between:
                step()
                asked.clear()
                rows.append((tracker.update(await reader.read()).rows[0], list(asked)))
            return rows

    def launch_asked(exprs: list[str]) -> bool:
        return any("spec_num_draft_tokens" in expr for expr in exprs)

    def restart() -> None:  # a new launch: a smaller KV pool, its counters from 0
        target.text = exposition(total=50000, requests=1, draft=4)
        wait_until(prom, f'sglang:max_total_num_tokens{{instance="{target.address}"}} == 50000')
        wait_until(prom, f'resets(sglang:num_requests_total{{instance="{target.address}"}}[15m]) > 0')

    def changed_without_restart() -> None:
        target.text = exposition(total=50000, requests=9, draft=6)
        wait_until(prom, f'sglang:spec_num_draft_tokens{{instance="{target.address}"}} == 6')

    def period_passed() -> None:
        monkeypatch.setattr(reader_module, "LAUNCH_EVERY_S", 0.0)

    try:
        wait_until(prom, f'count_over_time(sglang:num_requests_total{{instance="{target.address}"}}[1m]) >= 3')
        rows = asyncio.run(refreshes([lambda: None, lambda: None, restart, changed_without_restart, period_passed]))
    finally:
        prom.stop()
        target.stop()
    (first, first_asked), (same, same_asked), (restarted, restart_asked), (late, late_asked), (due, due_asked) = rows
    assert first.kv_used_ratio == 0.25 and first.draft_tokens == 4 and launch_asked(first_asked)
    assert first.restarts == 0 and first.state != "restarted"  # no restart: no sample asked, the row's 0
    assert same.kv_used_ratio == 0.25 and same.draft_tokens == 4 and not launch_asked(same_asked)
    assert restarted.restarts == 1 and launch_asked(restart_asked)
    assert restarted.kv_used_ratio == 0.5  # the new launch's pool, in the refresh that sees the restart
    assert late.draft_tokens == 4 and not launch_asked(late_asked)  # no restart: the last read, at most LAUNCH_EVERY_S
    assert due.draft_tokens == 6 and launch_asked(due_asked)
