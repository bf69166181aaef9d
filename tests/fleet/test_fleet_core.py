"""FleetTracker fed with query answers as Prometheus gives them (pure: no Prometheus here), the PromQL's shape,
and the fleet table's text. The same answers from a real Prometheus are in test_fleet_prometheus.py."""

from __future__ import annotations

import math

import pytest

from specmon.fleet.figures import figures
from specmon.fleet.model import FleetSnapshot
from specmon.fleet.promapi import PromError, RangeSeries, Sample, format_duration, host_of, parse_duration
from specmon.fleet.promql import (
    GAUGES_PART,
    LAUNCH_GAUGES,
    LAUNCH_PART,
    NOW_PART,
    FleetQueries,
    selector_problem,
    window_for,
)
from specmon.fleet.text import COLUMNS, columns_for, snapshot_lines, sparkline
from specmon.fleet.tracker import FleetReading, FleetTracker, Record, Worker
from specmon.live import rules

JSON_KEYS = ["server", "host", "role", "state", "restarts", "nodes_up", "preset", "algorithm", "draft_tokens",
             "decode_tok_s", "accept_length", "accept_source", "running", "queued", "kv_used_ratio", "ttft_p99_s",
             "ttft_p99_below_s", "ttft_p99_above_s", "gpu_memory_used_ratio", "gpu_util_min_ratio", "alerts",
             "speculation_pays"]
NOW = 1_800_000_000.0


def up(instance: str, value: float = 1.0, **labels: str) -> Sample:
    return Sample({"__name__": "up", "job": "sglang", "instance": instance, **labels}, value)


def per(server: str, value: float, **labels: str) -> Sample:
    return Sample({"instance": server, **labels}, value)


def reading(ups, columns=None, **kw) -> FleetReading:
    return FleetReading(taken_at=kw.pop("taken_at", NOW), window_s=kw.pop("window_s", 60.0), scrape_s=5.0,
                        up=ups, columns=columns or {}, **kw)


def tracker(**kw) -> FleetTracker:
    return FleetTracker(FleetQueries(), "http://prom:9090", **kw)


def test_rows_have_the_issue_s_json_keys_and_nulls_where_unknown():
    snap = tracker().update(reading([up("a:1")]))
    (row,) = snap.to_json()["servers"]
    assert list(row) == JSON_KEYS
    assert row["server"] == "a:1" and row["host"] == "a" and row["state"] == "idle"
    assert row["decode_tok_s"] is None and row["accept_length"] is None and row["alerts"] == []
    assert list(snap.to_json()) == ["prometheus", "window_s", "servers"]


def test_every_json_figure_says_its_unit_and_every_fraction_is_a_ratio():
    """One unit per kind: fractions (KV, GPU memory, GPU utilization, which DCGM gives in percent) as 0..1 in keys
    ending `_ratio`, times in seconds (`_s`), rates in tokens per second (`_tok_s`); counts need none."""
    from tests.support.fleet_harness import fleet_snapshot

    counts = {"restarts", "nodes_up", "draft_tokens", "running", "queued", "accept_length"}
    rows = fleet_snapshot().to_json()["servers"]
    for row in rows:
        for key, value in row.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                assert key in counts or key.endswith(("_ratio", "_s")), key
                if key.endswith("_ratio"):
                    assert 0 <= value <= 1.5, (key, value)
    assert {row["server"]: row["gpu_util_min_ratio"] for row in rows}["node-a:30000"] == 0.88


def test_down_server_keeps_its_row_with_last_seen_and_sorts_first():
    columns = {"last_up": [per("b:1", NOW - 95)], "running_per_dp": [per("a:1", 2, dp_rank="0")],
               "decode_tok_s": [per("a:1", 120.0)]}
    snap = tracker().update(reading([up("a:1"), up("b:1", 0.0)], columns))
    assert [r.server for r in snap.rows] == ["b:1", "a:1"]
    down = snap.rows[0]
    assert down.state == "down" and down.last_seen_s == pytest.approx(95)
    assert down.alerts[0].kind == "down" and "down, last seen 95 s ago" in down.alerts[0].text
    assert snap.rows[1].state == "serving" and snap.rows[1].running == 2
    assert snap.alerting


def test_a_server_gone_from_the_targets_stays_down_then_is_forgotten_after_a_day():
    t = tracker()
    t.update(reading([up("a:1"), up("b:1")], {"last_up": [per("b:1", NOW)]}))
    snap = t.update(reading([up("a:1")], taken_at=NOW + 30))
    gone = next(r for r in snap.rows if r.server == "b:1")
    assert gone.state == "down" and "gone from Prometheus' targets" in gone.alerts[0].text
    assert gone.last_seen_s == pytest.approx(30)
    later = t.update(reading([up("a:1")], taken_at=NOW + 90000))
    assert [r.server for r in later.rows] == ["a:1"]


@pytest.mark.parametrize(("value", "why"), [(math.nan, "NaN"), (math.inf, "infinite"), (-3.0, "negative"),
                                            (5e9, "absurd")])
def test_every_value_is_checked_and_a_skipped_one_is_said(value, why):
    snap = tracker().update(reading([up("a:1")], {"queued": [per("a:1", value)],
                                                  "decode_tok_s": [per("a:1", value * 100)]}))
    row = snap.rows[0]
    assert row.queued is None and row.decode_tok_s is None
    assert any(f"of queued: {why}" in note for note in snap.notes), snap.notes


def test_nan_ttft_of_an_idle_server_is_no_data_not_a_skipped_value():
    snap = tracker().update(reading([up("a:1")], {"ttft_p99_s": [per("a:1", math.nan)]}))
    assert not snap.rows[0].ttft_p99.known and snap.notes == ()


@pytest.mark.parametrize(("p99", "cell", "json"), [
    (0.0995, "<100ms", {"ttft_p99_s": None, "ttft_p99_below_s": 0.1, "ttft_p99_above_s": None}),
    (0.1, "<100ms", {"ttft_p99_s": None, "ttft_p99_below_s": 0.1, "ttft_p99_above_s": None}),
    (0.3818, "382ms", {"ttft_p99_s": 0.3818, "ttft_p99_below_s": None, "ttft_p99_above_s": None}),
    (0.4, ">400ms", {"ttft_p99_s": None, "ttft_p99_below_s": None, "ttft_p99_above_s": 0.4}),
    (math.nan, "—", {"ttft_p99_s": None, "ttft_p99_below_s": None, "ttft_p99_above_s": None}),
])
def test_ttft_p99_in_the_first_or_the_inf_bucket_is_its_bound_in_the_table_and_json(p99, cell, json):
    """histogram_quantile interpolates inside the first bucket (every fast server's p99 would read 99 ms) and
    answers the highest finite bound for +Inf: read with the server's bounds (0.1 and 0.4 here), the fleet says
    only the bound, by the Live view's rule."""
    parts = {"ttft_quantile": [Sample({"instance": "a:1"}, p99)],
             "ttft_first_bound": [Sample({"instance": "a:1"}, 0.1)],
             "ttft_last_bound": [Sample({"instance": "a:1"}, 0.4)]}
    snap = tracker().update(reading([up("a:1")], figures(FleetQueries(), parts)))
    row = snap.to_json()["servers"][0]
    assert {key: row[key] for key in json} == pytest.approx(json)
    ttft = next(column for column in COLUMNS if column.key == "ttft")
    assert ttft.cell(snap.rows[0]) == cell and f" {cell} " in snapshot_lines(snap)[3]


def test_acceptance_from_counters_else_the_gauge_marked_as_such():
    counters = tracker().update(reading([up("a:1")], {"accept_length": [per("a:1", 3.2)],
                                                      "accept_gauge": [per("a:1", 2.0)]})).rows[0]
    assert (counters.accept_length, counters.accept_source) == (3.2, "counters")
    gauge = tracker().update(reading([up("a:1")], {"accept_gauge": [per("a:1", 2.0)]})).rows[0]
    assert (gauge.accept_length, gauge.accept_source) == (2.0, "gauge")
    assert "2.00g" in "\n".join(snapshot_lines(FleetSnapshot("p", 60, (gauge,))))


def test_acceptance_alerts_are_the_live_view_s_rules():
    enough = rules.MIN_TOKENS_FOR_ACCEPT / 60 + 1
    near_one = tracker().update(reading([up("a:1")], {"accept_length": [per("a:1", 1.02)],
                                                      "generation_tok_s": [per("a:1", enough)]})).rows[0]
    assert [a.kind for a in near_one.alerts] == ["accept_low"] and "≈ 1" in near_one.alerts[0].text
    too_few = tracker().update(reading([up("a:1")], {"accept_length": [per("a:1", 1.02)],
                                                     "generation_tok_s": [per("a:1", 1.0)]})).rows[0]
    assert too_few.alerts == ()
    records = {"a:1": Record(preset="eagle3-16", algorithm="EAGLE3", draft_tokens=16, accept_length=5.0)}
    far = tracker(records=records).update(reading([up("a:1")], {"accept_length": [per("a:1", 2.0)],
                                                                "generation_tok_s": [per("a:1", enough)]})).rows[0]
    assert far.alerts[0].kind == "accept_low" and "far below the preset's last benchmark 5.00" in far.alerts[0].text
    assert (far.preset, far.algorithm, far.draft_tokens) == ("eagle3-16", "EAGLE3", 16)


def test_stall_kv_full_dp_imbalance_and_restart():
    columns = {
        "running_per_dp": [per("a:1", 1, dp_rank="0"), per("a:1", 12, dp_rank="1")],
        "decode_tok_s": [per("a:1", 0.0)], "kv_used_ratio": [per("a:1", 0.97)], "queued": [per("a:1", 4)],
        "restarts": [per("a:1", 1)], "stall_samples": [per("a:1", 13)],
    }
    row = tracker().update(reading([up("a:1")], columns)).rows[0]
    assert {a.kind for a in row.alerts} == {"stall", "kv_full", "dp_imbalance", "restart"}
    assert row.state == "stalled" and row.running == 13 and row.restarts == 1


def test_no_stall_is_called_before_prometheus_holds_a_stall_limit_of_samples():
    columns = {"running_per_dp": [per("a:1", 3)], "decode_tok_s": [per("a:1", 0.0)], "stall_samples": [per("a:1", 4)]}
    row = tracker().update(reading([up("a:1")], columns)).rows[0]
    assert row.state == "serving" and row.alerts == ()  # 4 scrapes × 5 s: 20 s seen, not 60


def test_a_window_shorter_than_the_stall_limit_uses_the_stall_window_s_rate():
    queries = FleetQueries(window_s=20)
    assert "stall_decode_tok_s" in {c.key for c in queries.columns()}
    columns = {"running_per_dp": [per("a:1", 3)], "decode_tok_s": [per("a:1", 0.0)],
               "stall_decode_tok_s": [per("a:1", 50.0)]}
    row = FleetTracker(queries, "p").update(reading([up("a:1")], columns, window_s=20)).rows[0]
    assert row.state == "serving" and row.alerts == ()



def test_a_server_sampled_between_requests_is_serving_while_it_generated_in_the_window():
    columns = {"running_per_dp": [per("a:1", 0), per("b:1", 0)], "decode_tok_s": [per("a:1", 448.0), per("b:1", 0.0)]}
    rows = {row.server: row for row in tracker().update(reading([up("a:1"), up("b:1")], columns)).rows}
    assert (rows["a:1"].state, rows["a:1"].running) == ("serving", 0)
    assert rows["b:1"].state == "idle"

def test_multi_node_server_groups_targets_by_the_server_label():
    queries = FleetQueries(server_label="server")
    ups = [up("n0:1", server="big"), up("n1:1", 0.0, server="big")]
    row = FleetTracker(queries, "p").update(reading(ups)).rows[0]
    assert (row.server, row.nodes_up, row.nodes_total, row.state) == ("big", 1, 2, "idle")
    assert row.alerts[0].kind == "down" and row.alerts[0].severity == "warning" and "n1:1" in row.alerts[0].text


def test_role_from_the_router_then_a_target_label_then_engine_type():
    ups = [up("a:1"), up("b:1", role="decode"), up("c:1")]
    columns = {"running_per_dp": [per("a:1", 0, engine_type="unified"), per("c:1", 0, engine_type="prefill")]}
    workers = [Worker("http://a:1", "prefill")]
    rows = {r.server: r for r in tracker().update(reading(ups, columns, workers=workers)).rows}
    assert (rows["a:1"].role, rows["a:1"].role_source) == ("prefill", "router")
    assert (rows["b:1"].role, rows["b:1"].role_source) == ("decode", "label")
    assert (rows["c:1"].role, rows["c:1"].role_source) == ("prefill", "engine_type")


def test_dcgm_series_belong_to_a_server_by_hostname_or_host_and_absence_is_said():
    ups = [up("gpuhost:30000"), up("other:30000")]
    columns = {"gpu_memory_used_ratio": [Sample({"Hostname": "gpuhost", "instance": "x:9400"}, 0.8)],
               "gpu_util_min": [Sample({"Hostname": "dcgm-pod", "instance": "other:9400"}, 12.0)]}
    snap = tracker().update(reading(ups, columns))
    rows = {r.server: r for r in snap.rows}
    assert rows["gpuhost:30000"].gpu_memory_used_ratio == 0.8 and rows["gpuhost:30000"].gpu_util_min_ratio is None
    assert rows["other:30000"].gpu_util_min_ratio == 0.12 and snap.gpu_note is None
    bare = tracker().update(reading(ups))
    assert "no DCGM series" in bare.gpu_note and bare.rows[0].gpu_memory_used_ratio is None


def test_prometheus_failing_keeps_the_last_snapshot_stale_with_one_line():
    t = tracker()
    t.update(reading([up("a:1")], {"decode_tok_s": [per("a:1", 10.0)]}))
    failed = t.failed(PromError("unauthorized", "Prometheus at http://prom:9090 answered HTTP 401"), NOW + 5)
    assert failed.stale and failed.error_kind == "unauthorized" and failed.rows[0].decode_tok_s == 10.0
    first = tracker().failed(PromError("unreachable", "did not answer"), NOW)
    assert not first.stale and first.rows == ()


def test_history_is_checked_and_drawn_as_a_sparkline():
    history = [RangeSeries({"instance": "a:1"}, ((1, 0.0), (2, 50.0), (3, math.nan), (4, 100.0)))]
    row = tracker().update(reading([up("a:1")], history=history)).rows[0]
    assert row.history == (0.0, 50.0, None, 100.0)
    assert sparkline(row.history, 4, span=4) == "▁▅ █"
    assert sparkline([float(v) for v in range(12)], 6) == "▁▃▄▅▇█"  # 15 minutes in 6 cells, 2 points each
    assert sparkline([10.0, 20.0], 6) == "█"  # 2.5 minutes of history: one cell of 2.5 minutes


def test_window_is_four_scrape_intervals_at_least_and_durations_read_back():
    assert window_for(10, 15) == 60 and window_for(120, 15) == 120
    assert parse_duration("1m30s") == 90 and parse_duration("500ms") == 0.5 and parse_duration("x") is None
    assert format_duration(90) == "90s" and format_duration(120) == "2m" and format_duration(3600) == "1h"
    assert host_of("10.0.0.1:30000") == "10.0.0.1" and host_of("http://[::1]:9090/x") == "::1"


def test_selectors_are_checked():
    assert selector_problem('job="sglang",env=~"prod.*"') is None and selector_problem("") is None
    assert selector_problem('job="sglang"} or vector(1) {') and selector_problem('job="x')


def test_dp_dedup_is_max_by_dp_rank_then_sum_and_every_query_spans_all_servers():
    queries = FleetQueries(selector='job="s"', server_label="server")
    running = queries.dedup("sglang:num_running_reqs")
    assert running == 'sum by (server) (max by (server, dp_rank) (sglang:num_running_reqs{job="s"}))'
    for column in queries.columns():
        assert "server=" not in column.expr and "instance=" not in column.expr  # one query for every server


def test_columns_drop_right_to_left_and_fit():
    narrow = columns_for(78)
    assert [c.key for c in narrow][:4] == ["server", "state", "alert", "tok_s"]
    assert sum(c.width for c in narrow) + len(narrow) - 1 <= 78
    wide = columns_for(198, gap=2)
    assert len(wide) > len(narrow) and wide[-1].key == "message" and wide[-1].width >= 24
    assert "alert" not in {c.key for c in wide}  # the alerts in words replace their kind
    assert sum(c.width for c in wide) + 2 * (len(wide) - 1) <= 198


def test_between_history_reads_each_refresh_adds_its_point_one_per_step():
    t = tracker()
    step = FleetQueries().history_step(5.0)
    first = [RangeSeries({"instance": "a:1"}, ((NOW - 2 * step, 10.0), (NOW - step, 20.0)))]
    t.update(reading([up("a:1")], {"decode_tok_s": [per("a:1", 25.0)]}, history=first))
    row = t.update(reading([up("a:1")], {"decode_tok_s": [per("a:1", 30.0)]}, history_read=False)).rows[0]
    assert row.history == (10.0, 20.0, 30.0)
    same_step = t.update(reading([up("a:1")], {"decode_tok_s": [per("a:1", 99.0)]}, taken_at=NOW + step / 2,
                                 history_read=False)).rows[0]
    assert same_step.history == (10.0, 20.0, 30.0)


def test_a_refresh_reads_each_metric_once_in_a_few_tagged_requests():
    queries = FleetQueries()
    combined = queries.combined(2)
    text = " or ".join(combined)
    parts = queries.parts()
    assert len(combined) == 2 and text.count("label_replace(") == len(parts)
    for metric in ("up{", "sglang:realtime_tokens_total", "sglang:generation_tokens_total",
                   "sglang:spec_verify_calls_total", "sglang:num_running_reqs", "sglang:num_queue_reqs",
                   "sglang:num_used_tokens", "sglang:max_total_num_tokens", "sglang:token_usage",
                   "sglang:spec_accept_length", "sglang:spec_num_draft_tokens", "sglang:spec_num_steps",
                   "sglang:time_to_first_token_seconds_bucket", "sglang:num_requests_total", "DCGM_FI_DEV_FB_",
                   "DCGM_FI_DEV_GPU_UTIL"):
        assert text.count(metric) == 1, metric
    assert "count_over_time" not in text  # the stall's samples: asked only for servers that look stalled
    keys = {part.key for part in parts}
    gauges = " ".join(part.expr for part in parts if part.key in (GAUGES_PART, LAUNCH_PART))
    for column in queries.columns():
        if not column.inline_only:
            assert column.key in keys or all(read in keys or read in gauges for read in column.reads), column.key
    launch = queries.launch_part()
    assert launch is not None and all(name in launch.expr for name in LAUNCH_GAUGES)
    without = " or ".join(queries.combined(2, launch=False))
    assert launch.key not in without and all(name not in without for name in LAUNCH_GAUGES)
    assert without.count("label_replace(") == len(parts) - 1


def test_recorded_columns_are_read_by_record_name_and_need_no_pass_of_their_own():
    everything = FleetQueries()
    recorded = FleetQueries(recorded=frozenset(c.key for c in everything.columns() if not c.inline_only))
    assert {part.key for part in recorded.parts()} == {"up", NOW_PART} | recorded.recorded
    records = {column.record for column in everything.columns()} | {everything.up(), "vector(time())"}
    assert all(part.expr.removeprefix("(").removesuffix(") > 0") in records for part in recorded.parts())
    assert next(part.expr for part in recorded.parts() if part.key == "restarts").endswith(") > 0")  # 0: none asked
    some = FleetQueries(recorded=frozenset({"queued", "decode_tok_s"}))
    gauges = next(part.expr for part in some.parts() if part.key == GAUGES_PART)
    assert "num_queue_reqs" not in gauges and "num_running_reqs" in gauges
    assert "realtime_tok_s" not in {part.key for part in some.parts()}


def test_columns_computed_from_parts_follow_promql_s_rules_for_nan_and_missing_series():
    def gauge(name: str, server: str, value: float, **labels: str) -> Sample:
        return Sample({"__name__": f"sglang:{name}", "instance": server, "engine_type": "unified", **labels}, value)

    def framebuffer(name: str, host: str, value: float) -> Sample:
        return Sample({"__name__": f"DCGM_FI_DEV_FB_{name}", "Hostname": host, "instance": f"{host}:9400"}, value)

    parts = {
        GAUGES_PART: [
            gauge("num_used_tokens", "a:1", 30, dp_rank="0"), gauge("num_used_tokens", "a:1", 10, dp_rank="1"),
            gauge("max_total_num_tokens", "a:1", 100, dp_rank="0"),
            gauge("max_total_num_tokens", "a:1", 100, dp_rank="1"),
            gauge("token_usage", "b:1", 0.5),  # no token counts: token_usage
            gauge("num_used_tokens", "c:1", 5), gauge("max_total_num_tokens", "c:1", 0), gauge("token_usage", "c:1", 0.7),
            gauge("spec_num_draft_tokens", "a:1", math.nan, dp_rank="0"),
            gauge("spec_num_draft_tokens", "a:1", 4, dp_rank="1"),
            gauge("num_queue_reqs", "a:1", 2, dp_rank="0"), gauge("num_queue_reqs", "a:1", 3, dp_rank="1"),
        ],
        "realtime_tok_s": [per("a:1", 280.0)],
        "generation_tok_s": [per("a:1", 300.0), per("b:1", 50.0)],
        "verify_per_s": [per("a:1", 100.0), per("b:1", 0.0)],
        "dcgm_framebuffer": [framebuffer("USED", "x", 60), framebuffer("FREE", "x", 20), framebuffer("USED", "y", 9)],
    }
    out = figures(FleetQueries(), parts)

    def by_server(key: str) -> dict[str, float]:
        return {s.labels["instance"]: s.value for s in out[key]}

    assert by_server("kv_used_ratio") == {"a:1": 0.2, "b:1": 0.5, "c:1": 0.7}  # sums over DP, else token_usage
    assert by_server("queued") == {"a:1": 5}
    assert by_server("decode_tok_s") == {"a:1": 280.0, "b:1": 50.0}  # realtime, else the generation counter
    assert by_server("accept_length") == {"a:1": 3.0}  # no verify calls: no acceptance from the counters
    assert by_server("draft_tokens") == {"a:1": 4}  # PromQL's max keeps a number over a NaN
    assert [(s.labels["Hostname"], s.value) for s in out["gpu_memory_used_ratio"]] == [("x", 0.75)]  # y: no FREE


def test_a_target_labelled_with_one_of_specmon_s_presets_gets_its_algorithm_and_the_gauge_s_draft_tokens():
    presets = {"demo-eagle3-5": Record(preset="demo-eagle3-5", algorithm="EAGLE3", draft_tokens=5)}
    ups = [up("a:1", preset="demo-eagle3-5"), up("b:1", preset="demo-eagle3-5"), up("c:1", preset="custom")]
    rows = {r.server: r for r in tracker(presets=presets).update(
        reading(ups, {"draft_tokens": [per("b:1", 8.0)]})).rows}
    assert (rows["a:1"].algorithm, rows["a:1"].draft_tokens) == ("EAGLE3", 5)
    assert rows["b:1"].draft_tokens == 8  # what the server reports it runs wins
    assert (rows["c:1"].preset, rows["c:1"].algorithm, rows["c:1"].draft_tokens) == ("custom", None, None)


@pytest.mark.parametrize(("instance", "url"), [
    ("10.0.0.1:30000", "http://10.0.0.1:30000"),
    ("node-a.cluster.local:30000", "http://node-a.cluster.local:30000"),
    ("[fe80::1]:30000", "http://[fe80::1]:30000"),
    ("10.0.0.1:30000/health_generate", "http://10.0.0.1:30000"),
    ("10.0.0.1:30000/health_generate?x=#", "http://10.0.0.1:30000"),
    ("10.0.0.1:30000?/generate", "http://10.0.0.1:30000"),
    ("10.0.0.1:30000#frag", "http://10.0.0.1:30000"),
    ("http://10.0.0.1:30000/metrics", "http://10.0.0.1:30000"),
    ("x@10.0.0.2:80", None), ("user:pw@10.0.0.2:80/", None), ("10.0.0.1:30000@evil:80", None),
    ("10.0.0.1", None), ("10.0.0.1:0", None), ("10.0.0.1:99999", None), ("10.0.0.1:３０", None),
    ("a b:30000", None), ("10.0.0.1:30000\\@evil:1", None), ("", None), ("[::1:30000", None),
])
def test_a_target_s_url_is_its_host_and_port_only(instance, url):
    from specmon.fleet.drill import target_url

    found, why = target_url(instance)
    assert found == url and (why is None) == (url is not None)
    if why:
        assert "not contacted" in why


def test_at_most_eight_targets_are_asked_whether_they_answer():
    from specmon.fleet.drill import MAX_TARGETS_TRIED, reachable_url

    url, notes = reachable_url([f"x{i}@127.0.0.1:1" for i in range(20_000)], timeout_s=0.2)
    assert url is None and notes[0] == f"20000 targets: the first {MAX_TARGETS_TRIED} asked"
    assert len(notes) == 1 + MAX_TARGETS_TRIED
