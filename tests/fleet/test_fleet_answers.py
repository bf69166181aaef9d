"""`specmon fleet --once` against answers a real Prometheus does not give: compatible backends without
status/config (Thanos Query, VictoriaMetrics, Mimir behind its /prometheus prefix), values sent as JSON numbers,
series answered twice, warnings and infos beside the data, bodies nested past any bound, a router's /workers
with values of the wrong type, a scrape interval of years, raw terminal escapes. Each is read, or said in one
line, never a traceback nor a made-up figure. (What a real Prometheus answers: tests/fleet/test_fleet_truth.py.)"""

from __future__ import annotations

import json

import pytest

from specmon.cli import main
from tests.support.fake_prometheus import UP_SAMPLE, FakePrometheus, good, is_combined, vector, with_now
from tests.support.hostile_http import deep_json


@pytest.fixture(autouse=True)
def own_state(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("SPECMON_STATE_DIR", raising=False)


@pytest.fixture
def fake():
    servers = []

    def serve(script):
        server = FakePrometheus(script)
        servers.append(server)
        return server

    yield serve
    for server in servers:
        server.stop()


def run(capsys, url: str, *extra: str) -> tuple[int, dict | None, str]:
    code = main(["fleet", "--prometheus", url, "--once", "--json", *extra])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, json.loads(captured.out) if captured.out else None, captured.err


def answering(combined: dict | None = None, **paths: tuple[int, bytes]):
    """`good`, with the combined query answered `combined` (Prometheus' time added) and paths answered as given
    (by the path's end: a prefix such as Mimir's /prometheus is kept)."""

    def script(path, query, headers):
        for end, answer in paths.items():
            if path.endswith(end):
                return answer
        if combined is not None and is_combined(path, query):
            return 200, json.dumps(with_now(combined)).encode()
        return good(path, query)

    return script


def up(instance: str, value: object = "1", **labels: str) -> dict:
    return {"metric": {**UP_SAMPLE["metric"], "instance": instance, **labels}, "value": [1, value]}


def gauge(name: str, instance: str, value: object, **labels: str) -> dict:
    return {"metric": {"__name__": name, "instance": instance, "specmon_column": "gauges", **labels},
            "value": [1, value]}


# ----- compatible backends (item 8)

THANOS_404 = (404, b"404 page not found\n")
VICTORIA_400 = (400, b'remoteAddr: "127.0.0.1:5000"; requestURI: /api/v1/status/config; unsupported path requested: '
                     b'"/api/v1/status/config"\n')


def counts(count: str) -> tuple[int, bytes]:
    """`max by (job) (count_over_time(up[10m]))`'s answer: `count` samples of the sglang job."""
    return 200, json.dumps(vector({"metric": {"job": "sglang"}, "value": [1, count]})).encode()


@pytest.mark.parametrize("backend", ["thanos", "victoriametrics", "mimir"])
def test_a_backend_without_status_config_is_read_with_the_interval_its_samples_show(fake, capsys, backend):
    """No /api/v1/status/config: the scrape interval is the one `up`'s samples show over 10 minutes (40 samples:
    15 s, a 60 s window), said; no exit 2. Mimir answers only under its /prometheus prefix."""
    refusal = VICTORIA_400 if backend == "victoriametrics" else THANOS_404
    prefix = "/prometheus" if backend == "mimir" else ""

    def script(path, query, headers):
        if not path.startswith(prefix + "/api/"):
            return THANOS_404
        if path.endswith("/status/config"):
            return refusal
        if "count_over_time(up{" in query:
            return counts("40")
        return good(path, query)

    server = fake(script)
    code, snapshot, err = run(capsys, server.url + prefix)
    assert code == 0 and snapshot["servers"][0]["server"] == "10.0.0.1:30000" and snapshot["window_s"] == 60
    assert "no scrape interval from Prometheus" in err and "15 s taken, from its `up` samples" in err
    assert all(path.startswith(prefix + "/api/v1/") for path, _ in server.seen)


def test_a_backend_whose_samples_cannot_tell_the_interval_takes_the_default_and_says_so(fake, capsys):
    server = fake(answering(**{"/api/v1/status/config": THANOS_404}))
    code, snapshot, err = run(capsys, server.url, "--window", "30")
    assert code == 0 and snapshot["window_s"] == 240
    assert "nor from its `up` samples: 60 s taken (Prometheus' default)" in err
    assert "rate window raised from 30 s to 240 s" in err


def test_warnings_and_infos_beside_the_data_are_said(fake, capsys):
    answer = {**vector(UP_SAMPLE), "warnings": ["partial response: store 10.0.0.9 unreachable", "w2", "w3", "w4"],
              "infos": ["PromQL info: metric might not be a counter, name does not end in _total"]}
    server = fake(answering(answer))
    code, snapshot, err = run(capsys, server.url)
    assert code == 0 and snapshot["servers"]
    warned = next(line for line in err.splitlines() if "warns" in line)
    assert "'partial response: store 10.0.0.9 unreachable'; 'w2'; 'w3' (and 1 more)" in warned
    assert "PromQL info: metric might not be a counter" in err


# ----- figures from bad answers (item 9)

def test_values_sent_as_json_numbers_are_read(fake, capsys):
    answer = vector(up("10.0.0.1:30000", 1), up("10.0.0.2:30000", 1.0),
                    gauge("sglang:num_queue_reqs", "10.0.0.1:30000", 3))
    code, snapshot, _ = run(capsys, fake(answering(answer)).url)
    rows = {row["server"]: row for row in snapshot["servers"]}
    assert code == 0 and {row["state"] for row in rows.values()} == {"idle"}
    assert rows["10.0.0.1:30000"]["queued"] == 3 and rows["10.0.0.1:30000"]["nodes_up"] == 1


@pytest.mark.parametrize("value", ["2", "0.5", "-1", "NaN", "+Inf", True, None, [1]])
def test_an_up_that_is_neither_0_nor_1_is_left_out_and_said(fake, capsys, value):
    answer = vector(up("10.0.0.1:30000"), up("10.0.0.2:30000", value))
    code, snapshot, err = run(capsys, fake(answering(answer)).url)
    assert code == 0 and [row["server"] for row in snapshot["servers"]] == ["10.0.0.1:30000"]
    assert "skipped 1 value(s) of up: neither 0 nor 1" in err


def test_series_answered_twice_are_counted_once_or_not_used_when_they_disagree(fake, capsys):
    answer = vector(up("10.0.0.1:30000"), up("10.0.0.1:30000"),
                    up("10.0.0.2:30000", replica="a"), up("10.0.0.2:30000", replica="b"),
                    gauge("sglang:num_queue_reqs", "10.0.0.1:30000", "3"),
                    gauge("sglang:num_queue_reqs", "10.0.0.1:30000", "3"),
                    gauge("sglang:num_queue_reqs", "10.0.0.2:30000", "3"),
                    gauge("sglang:num_queue_reqs", "10.0.0.2:30000", "7"))
    code, snapshot, err = run(capsys, fake(answering(answer)).url)
    rows = {row["server"]: row for row in snapshot["servers"]}
    assert code == 0 and rows["10.0.0.1:30000"]["nodes_up"] == 1 and rows["10.0.0.2:30000"]["nodes_up"] == 1
    assert rows["10.0.0.1:30000"]["queued"] == 3 and rows["10.0.0.2:30000"]["queued"] is None
    assert "answered twice with the same labels and values (counted once)" in err
    assert "answered twice with the same labels, different values (neither used)" in err
    assert "1 target(s) answered twice in up" in err


@pytest.mark.parametrize("interval", ["10y", "2h", "100000000000000000000000s"])
def test_a_scrape_interval_no_live_fleet_has_is_not_used_and_said(fake, capsys, interval):
    config = {"status": "success", "data": {"yaml": f"global:\n  scrape_interval: {interval}\nscrape_configs:\n"
                                                    f"- job_name: sglang\n  scrape_interval: {interval}\n"}}
    code, snapshot, err = run(capsys, fake(answering(**{"/api/v1/status/config": (200, json.dumps(config).encode())})).url)
    assert code == 0 and snapshot["window_s"] == 240  # 4 × Prometheus' default 60 s, not 40 years
    assert f"the global section's scrape interval '{interval}' cannot be a live fleet's" in err


@pytest.mark.parametrize(("value", "why"), [("-5", "negative"), ("99999999999", "absurd"), ("x", "NaN"),
                                            ("2.5", "not a whole number")])
def test_a_draft_tokens_label_that_cannot_be_true_is_not_shown(fake, capsys, value, why):
    answer = vector(up("10.0.0.1:30000", draft_tokens=value))
    code, snapshot, err = run(capsys, fake(answering(answer)).url)
    assert code == 0 and snapshot["servers"][0]["draft_tokens"] is None
    assert f"the label draft_tokens='{value}' of '10.0.0.1:30000' cannot be true ({why}" in err


@pytest.mark.parametrize(("name", "value", "column"), [
    ("sglang:num_queue_reqs", "-3", "queued"), ("sglang:num_queue_reqs", "2.5", "queued"),
    ("sglang:num_running_reqs", "1e300", "running"), ("sglang:token_usage", "-0.5", "kv_used_ratio"),
    ("sglang:num_used_tokens", "-1", "kv_used_ratio"),
])
def test_a_part_that_cannot_be_true_makes_no_figure(fake, capsys, name, value, column):
    """A column computed from several series (DP ranks summed or averaged, used / total) is not computed from
    an absurd one: no figure from the others alone, and the absurd value said."""
    answer = vector(up("10.0.0.1:30000"),
                    gauge(name, "10.0.0.1:30000", value, dp_rank="0"), gauge(name, "10.0.0.1:30000", "4", dp_rank="1"),
                    gauge("sglang:max_total_num_tokens", "10.0.0.1:30000", "100", dp_rank="0"),
                    gauge("sglang:max_total_num_tokens", "10.0.0.1:30000", "100", dp_rank="1"))
    code, snapshot, err = run(capsys, fake(answering(answer)).url)
    assert code == 0 and snapshot["servers"][0][column] is None
    assert f"skipped 1 value(s) of {name}" in err


# ----- bodies past every bound (item 3)

@pytest.mark.parametrize("path", ["/api/v1/query", "/api/v1/status/config", "/api/v1/rules"])
@pytest.mark.parametrize("opener", ["[", "{"])
def test_an_answer_nested_past_the_bound_is_one_line_never_a_recursion_error(fake, capsys, path, opener):
    body = b'{"status": "success", "data": {"result": ' + deep_json(100_000, opener) + b"}}"
    code, snapshot, err = run(capsys, fake(answering(**{path: (200, body)})).url)
    if path == "/api/v1/query":  # nothing can be read: one line, exit 2
        assert code == 2 and snapshot is None and len(err.strip().splitlines()) == 1
        assert "nested deeper than 64 levels" in err
    else:  # the scrape interval and the recording rules can be done without
        assert code == 0 and snapshot["servers"]


def test_a_status_config_yaml_nested_past_the_bound_is_done_without(fake, capsys):
    deep = "global:\n  scrape_interval: " + "[" * 100_000 + "]" * 100_000 + "\n"
    nested = "x:\n" + "".join("  " * i + "- \n" for i in range(1, 3000))
    for text in (deep, nested, "global: {scrape_interval: 15s\n", "a" * (5 * 1024 * 1024)):
        config = {"status": "success", "data": {"yaml": text}}
        code, snapshot, err = run(capsys, fake(answering(**{"/api/v1/status/config":
                                                             (200, json.dumps(config).encode())})).url)
        assert code == 0 and snapshot["servers"] and "no scrape interval from Prometheus" in err


@pytest.mark.parametrize("workers", [
    deep_json(100_000, "{"),
    json.dumps({"workers": [{"url": "http://10.0.0.1:30000", "worker_type": ["decode"]}]}).encode(),
    json.dumps({"workers": [{"url": "http://10.0.0.1:30000", "worker_type": {"a": 1}}]}).encode(),
    b'{"workers": [{"url": "http://10.0.0.1:30000", "worker_type": "decode", "metadata": {"tp_size": 1e999}}]}',
    b'{"workers": [{"url": "http://10.0.0.1:30000", "metadata": {"dp_size": 1' + b"0" * 5000 + b'}}]}',
    json.dumps({"workers": [{"url": "http://10.0.0.1:30000", "metadata": {"tp_size": "inf", "dp_size": [2]}}]}).encode(),
])
def test_a_router_answering_values_of_the_wrong_type_or_nesting_is_no_traceback(fake, capsys, workers):
    router = fake(lambda path, query, headers: (200, workers))
    code, snapshot, err = run(capsys, fake(answering()).url, "--router", router.url)
    assert code == 0 and snapshot["servers"][0]["role"] in (None, "unknown", "decode")


@pytest.mark.parametrize("action", [["rules"], ["dashboard"], ["--once"]])
@pytest.mark.parametrize("flag", [["--window", "inf"], ["--window", "nan"], ["--window", "1e300"],
                                  ["--window", "-1"], ["--interval", "inf"], ["--interval", "0"]])
def test_a_window_or_interval_that_is_no_duration_is_exit_2_with_the_reason(capsys, action, flag):
    code = main(["fleet", *action, "--prometheus", "http://127.0.0.1:9", *flag])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == "" and "Traceback" not in captured.err
    assert f"{flag[0]} " in captured.err and "is not a number of seconds above 0" in captured.err


# ----- terminal escapes (item 14)

def test_raw_terminal_escapes_from_prometheus_are_printed_escaped(fake, capsys):
    error = {"status": "error", "errorType": "bad_data", "error": "parse error \x1b]0;pwned\x07\x1b[2J near \u202e"}
    code, _, err = run(capsys, fake(answering(**{"/api/v1/query": (400, json.dumps(error).encode())})).url)
    assert code == 2 and "\x1b" not in err and "\x07" not in err and "\u202e" not in err
    assert "parse error \\x1b]0;pwned\\x07\\x1b[2J near \\u202e" in err
    answer = {**vector(UP_SAMPLE), "warnings": ["\x1b[31mred\x1b[0m"]}
    code, _, err = run(capsys, fake(answering(answer)).url)
    assert code == 0 and "\x1b" not in err and "\\x1b[31mred" in err


def test_the_combined_answer_without_prometheus_time_is_read_at_this_host_s_and_said(fake, capsys):
    def script(path, query, headers):
        if is_combined(path, query):
            return 200, json.dumps(vector(UP_SAMPLE)).encode()
        return good(path, query)

    code, snapshot, err = run(capsys, fake(script).url)
    assert code == 0 and snapshot["servers"] and "Prometheus did not answer its time" in err


def test_a_fleet_of_two_thousand_targets_may_answer_more_slowly_and_it_is_said(fake, capsys):
    """Prometheus' evaluation grows with the fleet: the bound on an answer's time is raised with the targets `up`
    names (3 s per 1,000 past the first 1,000), and said; a few targets keep the client's own."""
    targets = vector(*(up(f"10.0.{i // 250}.{i % 250}:30000") for i in range(2000)))

    def script(path, query, headers):
        if path.endswith("/api/v1/query") and query == 'up{job="sglang"}':
            return 200, json.dumps(targets).encode()
        return good(path, query)

    code, _, err = run(capsys, fake(script).url)
    assert code == 0 and "Prometheus' answers may take up to 13 s (2000 targets; 10 s up to 1,000)" in err
    code, _, err = run(capsys, fake(answering()).url)
    assert code == 0 and "may take up to" not in err
