"""The last minutes of traffic (issue 35): slot summaries merged give the figures of the records themselves, old
slots leave the window, and the τ distribution holds every token."""

from __future__ import annotations

import random

import pytest

from specmon.traffic.records import RequestRecord
from specmon.traffic.summary import TAU_BIN, TrafficSummary
from specmon.traffic.window import BEFORE_WINDOW, SLOT_S, TrafficWindow


def record(i: int, completion: int, verify: int, ts: float | None, prompt: int = 100, team: str = "a",
           histogram: tuple[int, ...] = ()) -> RequestRecord:
    return RequestRecord(rid=f"r{i}", prompt_tokens=prompt, completion_tokens=completion, verify_ct=verify,
                         finished_ts=ts, histogram=histogram, params={"team": team})


def test_merged_summaries_equal_one_summary_of_all_records():
    rng = random.Random(7)
    records = []
    for i in range(2000):
        verify = rng.randint(1, 300)
        depth = rng.randint(1, 4)
        at_max = rng.randint(0, verify)
        histogram = (verify - at_max,) + (0,) * (depth - 1) + (at_max,)
        records.append(record(i, verify + rng.randint(0, 3 * verify), verify, None, prompt=rng.randint(1, 20000),
                              team=rng.choice("abc"), histogram=histogram))
    whole = TrafficSummary(by="team", buckets=True).feed(records).result()
    parts = [TrafficSummary(by="team", buckets=True).feed(records[i:i + 150]) for i in range(0, 2000, 150)]
    merged = TrafficSummary(by="team", buckets=True)
    for part in parts:
        merged.merge(part)
    result = merged.result()
    assert result["requests"] == whole["requests"] and result["tokens"] == whole["tokens"]
    assert result["accept_length"]["ci"] == pytest.approx(whole["accept_length"]["ci"])
    assert result["tau_distribution"] == whole["tau_distribution"]
    assert [(c["by"], c["value"], c["requests"], c["tokens"]) for c in result["classes"]] == \
        [(c["by"], c["value"], c["requests"], c["tokens"]) for c in whole["classes"]]
    assert result["outliers"] == whole["outliers"] and result["outlier_counts"] == whole["outlier_counts"]
    small = TrafficSummary().feed(records[:40]).result()  # few enough to bootstrap: the same pairs, the same CI
    merged_small = TrafficSummary().feed(records[:20]).merge(TrafficSummary().feed(records[20:40])).result()
    assert merged_small["accept_length"]["ci"] == pytest.approx(small["accept_length"]["ci"])


def test_the_tau_distribution_puts_each_requests_tokens_in_its_bin():
    summary = TrafficSummary().feed([record(0, 10, 10, None), record(1, 30, 10, None), record(2, 1000, 10, None)])
    tokens = summary.result()["tau_distribution"]["tokens"]
    assert tokens[0] == 10 and tokens[int(2.0 / TAU_BIN)] == 30 and tokens[-1] == 1000
    assert sum(tokens) == 1040


def test_the_window_keeps_the_last_minutes_and_lets_older_slots_go():
    now = 1_800_000_000.0
    window = TrafficWindow(window_s=60)
    window.add([record(0, 20, 10, now - 120), record(1, 30, 10, now - 30), record(2, 40, 10, None)], now)
    assert window.left_out == {BEFORE_WINDOW: 1}
    result = window.summary(now).result()
    assert result["requests"] == 2 and result["tokens"] == 70
    later = window.summary(now + 45).result()  # r1 (finished 75 s before) has left; r2 (read at `now`) stays
    assert later["requests"] == 1 and later["tokens"] == 40
    assert window.summary(now + 60 + SLOT_S).result()["requests"] == 0


def test_a_record_stamped_in_the_future_counts_as_read_now():
    now = 1_800_000_000.0
    window = TrafficWindow(window_s=60)
    window.add([record(0, 20, 10, now + 10 * 86400)], now)
    assert window.summary(now).result()["requests"] == 1
    assert window.summary(now + 61 + SLOT_S).result()["requests"] == 0  # it leaves like one read now
