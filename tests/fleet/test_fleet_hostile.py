"""`specmon fleet --once` against a Prometheus (or something in its place) that answers wrong: each fault is one
line and exit 2 (or a skipped value said), never a traceback; secrets come from files and are never printed."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import time

import pytest

from specmon.cli import main
from specmon.fleet.promapi import PromAuth, PromClient, PromError
from tests.support.fake_prometheus import MATRIX, UP_SAMPLE, FakePrometheus, good, with_now

TOKEN = "s3cret-token-value"


def vector(value: str) -> dict:
    """`up` and one `num_queue_reqs` gauge (the queued column), as the combined query answers them."""
    queue = {"__name__": "sglang:num_queue_reqs", "instance": "10.0.0.1:30000",
             "specmon_column": "gauges"}
    return {"status": "success", "data": {"resultType": "vector", "result": [
        UP_SAMPLE, {"metric": queue, "value": [1, value]}]}}


@pytest.fixture(autouse=True)
def own_state(tmp_path, monkeypatch):
    """specmon's records (its result store) are the test's own, empty."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("SPECMON_STATE_DIR", raising=False)


@pytest.fixture
def fake():
    servers = []

    def serve(script):
        server = FakePrometheus(script)
        servers.append(server)
        return server, server.url

    yield serve
    for server in servers:
        server.stop()


def fleet(url: str, *extra: str) -> list[str]:
    return ["fleet", "--prometheus", url, "--once", "--json", *extra]


def test_the_good_answer_exits_0_so_the_cases_below_can_fail(fake, capsys):
    _, url = fake(lambda path, query, headers: good(path, query))
    assert main(fleet(url)) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["servers"][0]["server"] == "10.0.0.1:30000" and out["window_s"] == 60


def test_piped_text_is_never_cut_to_a_width(fake, capsys, monkeypatch):
    """Piped (not a terminal), `fleet --once` prints every column and every cell whole: a long server name and
    the alert in words, whatever COLUMNS says."""
    long_name = "gpu-node-with-a-long-name.cluster.internal:30000"
    down = {**UP_SAMPLE, "metric": {**UP_SAMPLE["metric"], "instance": long_name}, "value": [1, "0"]}

    def script(path, query, headers):
        if path == "/api/v1/query" and "label_replace(up{" in query:
            return 200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": [down]}}).encode()
        return good(path, query)

    _, url = fake(script)
    monkeypatch.setenv("COLUMNS", "60")
    assert main(["fleet", "--prometheus", url, "--once"]) == 1
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith(long_name))
    assert "…" not in out and row.endswith("down, not up in the last hour: no target answers Prometheus' scrapes")
    assert all(header in out for header in ("TTFT99", "GPU min", "preset · algorithm · draft", "alerts"))


@pytest.mark.parametrize(("name", "answer", "said"), [
    ("401", (401, b"Unauthorized"), "answered HTTP 401 (check the credentials)"),
    ("html", (200, b"<html>login</html>"), "with no API answer (is it Prometheus?)"),
    ("json list", (200, b"[1, 2]"), "with no API answer"),
    ("not utf-8", (200, b'{"status": "\xff"}'), "with no API answer"),
    ("api error", (400, json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"}).encode()),
     "parse error"),
    ("no data", (200, json.dumps({"status": "success", "data": []}).encode()), "answered no data object"),
    ("matrix for instant", (200, json.dumps(MATRIX).encode()), "not a vector"),
])
def test_a_bad_prometheus_is_one_line_and_exit_2(fake, capsys, name, answer, said):
    def script(path, query, headers):
        return answer if path == "/api/v1/query" else good(path, query)

    _, url = fake(script)
    assert main(fleet(url)) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and said in captured.err and "Traceback" not in captured.err
    assert len(captured.err.strip().splitlines()) == 1


def test_nothing_listening_is_unreachable_exit_2(capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert main(fleet(f"http://127.0.0.1:{port}")) == 2
    assert "did not answer (ConnectError)" in capsys.readouterr().err


async def test_a_hanging_prometheus_times_out_and_an_oversized_answer_is_refused(fake):
    _, hang_url = fake(lambda path, query, headers: (0, b""))
    started = time.monotonic()
    async with PromClient(hang_url, timeout_s=0.5) as client:
        with pytest.raises(PromError) as failure:
            await client.query("up")
    assert failure.value.kind == "unreachable" and time.monotonic() - started < 3
    _, big_url = fake(lambda path, query, headers: (200, b'{"status": "success", "data": {"x": "' + b"a" * 5000
                                                    + b'"}}'))
    async with PromClient(big_url, max_bytes=1000) as client:
        with pytest.raises(PromError, match="over 1000 bytes"):
            await client.query("up")


@pytest.mark.parametrize(("value", "why"), [("NaN", "NaN"), ("+Inf", "infinite"), ("-5", "negative"),
                                            ("1e300", "absurd"), ("not a number", "NaN")])
def test_hostile_values_are_skipped_and_said(fake, capsys, value, why):
    def script(path, query, headers):
        if path == "/api/v1/query" and "label_replace(up{" in query:
            return 200, json.dumps(with_now(vector(value))).encode()
        return good(path, query)

    _, url = fake(script)
    assert main(fleet(url)) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["servers"][0]["queued"] is None
    said = "skipped 1 value(s) of queued" if why == "NaN" else "skipped 1 value(s) of sglang:num_queue_reqs (queued)"
    assert f"{said}: {why}" in captured.err and captured.err.count("skipped") == 1


def test_bearer_token_and_basic_auth_come_from_files_and_are_never_printed(fake, capsys, tmp_path):
    def script(path, query, headers):
        auth = headers.get("Authorization", "")
        if auth not in (f"Bearer {TOKEN}", "Basic " + base64.b64encode(b"alice:" + TOKEN.encode()).decode()):
            return 401, b"no"
        return good(path, query)

    server, url = fake(script)
    assert main(fleet(url)) == 2
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    assert main(fleet(url, "--bearer-token-file", str(token_file))) == 0
    basic_file = tmp_path / "basic"
    basic_file.write_text(f"alice:{TOKEN}\n")
    assert main(fleet(url, "--basic-auth-file", str(basic_file))) == 0
    assert main(fleet(url, "--bearer-token-file", str(tmp_path / "missing"))) == 2
    captured = capsys.readouterr()
    assert TOKEN not in captured.out + captured.err
    assert "could not be read" in captured.err
    assert all(path.startswith("/api/v1/") for path, _ in server.seen)  # read-only API GETs only


def test_a_loopback_prometheus_is_asked_for_uncompressed_answers(fake, capsys):
    """Compressing costs Prometheus CPU and saves nothing on loopback; elsewhere httpx's default (gzip) stays."""
    server, url = fake(lambda path, query, headers: good(path, query))
    assert main(fleet(url)) == 0
    assert {headers.get("Accept-Encoding") for _, headers in server.seen} == {"identity"}


def test_bad_usage_is_exit_2_with_the_reason(capsys):
    assert main(["fleet", "--once"]) == 2
    assert main(["fleet", "--prometheus", "http://x", "--selector", 'job="a"} or up{', "--once"]) == 2
    assert main(["fleet", "--prometheus", "http://x", "--server-label", "bad-label", "--once"]) == 2
    err = capsys.readouterr().err
    assert "give --prometheus URL" in err and "not a list of matchers" in err and "not a Prometheus label" in err


def test_scrape_interval_raises_the_window_and_is_read_per_job(fake):
    _, url = fake(lambda path, query, headers: good(path, query))

    async def configure():
        from specmon.fleet.promql import FleetQueries
        from specmon.fleet.reader import FleetReader

        async with PromClient(url, PromAuth()) as client:
            reader = FleetReader(client, FleetQueries(window_s=20), 20)
            queries = await reader.configure()
            return queries, reader.notes

    queries, notes = asyncio.run(configure())
    assert queries.window_s == 40 and "raised from 20 s to 40 s (4 × the scrape interval 10 s)" in notes[0]


def test_the_poller_refreshes_when_asked_and_stops_while_it_sleeps(fake):
    """`r` (refresh now) is answered at once, not at the next 60 s interval, and quitting does not wait for it."""
    import queue

    from specmon.cli import build_parser
    from specmon.fleet.cli import options_from
    from specmon.fleet.poller import FleetPoller

    server, url = fake(lambda path, query, headers: good(path, query))
    options = options_from(build_parser().parse_args(["fleet", "--prometheus", url, "--interval", "60"]))
    snapshots: queue.Queue = queue.Queue()
    poller = FleetPoller(options, snapshots.put)
    poller.start()
    try:
        assert snapshots.get(timeout=20).rows, "the first refresh"
        asked = len(server.seen)
        poller.refresh_now()
        assert snapshots.get(timeout=20).rows and len(server.seen) > asked
        poller.refresh_now()
        assert snapshots.get(timeout=20).rows
    finally:
        poller.stop(timeout=10)
    assert not poller._runner.thread.is_alive()
