"""The emulator as a fleet member, as real child processes on loopback: its /metrics against the real SGLang
0.5.16 captures, one series per TP/DP rank as SGLang's own reporting rules give them (with and without
`--enable-metrics-for-all-schedulers`, with DP attention), `--extra-metric-labels`, `engine_type`, the
`spec_num_*` gauges, and a two-node launch whose node 1 serves scheduler-only /metrics."""

from __future__ import annotations

import contextlib
import functools
import json
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specmon.emulator.metrics import CONSTANT_GAUGES, EMULATED_VERSION, EXPORTED, STATS_GAUGES
from specmon.ports import free_port, free_port_pair
from specmon.sglang.metric_names import EXPECTED_IN
from specmon.sglang.metrics import load_shipped_metrics
from tests.emulator.test_emulator import EAGLE3, FAST, Emulator, launch
from tests.preflight.test_metric_names import expected_in
from tests.support.oncall import wait_for as oncall_wait_for

pytestmark = pytest.mark.timeout(90)

FIXTURES = Path(__file__).parents[1] / "fixtures"
CAPTURES = [FIXTURES / "api" / "h200-0.5.16-metrics-eagle3.txt", FIXTURES / "api" / "h200-0.5.16-metrics-plain.txt",
            FIXTURES / "real-sglang-0.5.16" / "eagle3" / "metrics.txt"]
RANK_LABELS = {"tp_rank", "pp_rank", "moe_ep_rank", "dp_rank"}


def scrape(url: str) -> list:
    return list(text_string_to_metric_families(httpx.get(url + "/metrics", timeout=10).text))


def samples(families: list, name: str, **match: str) -> list:
    """The samples called `name` whose labels include `match`."""
    return [s for f in families for s in f.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in match.items())]


def shape(families: list) -> dict[str, tuple[str, set[frozenset[str]]]]:
    """Each family's type and the label-name sets of its samples (bucket bounds and ranks apart)."""
    return {f.name: (f.type, {frozenset(s.labels) for s in f.samples}) for f in families}


def generate(url: str, text: str, tokens: int = 64) -> dict:
    body = {"text": text, "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True}}
    response = httpx.post(url + "/generate", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


wait_for = functools.partial(oncall_wait_for, timeout=20.0)


@contextlib.contextmanager
def running(tmp_path: Path, *flags: str, name: str = "server.log", port: int | None = None, ready: bool = True):
    emulator = launch(tmp_path, *FAST, "--enable-metrics", *flags, name=name, port=port)
    try:
        if ready:
            emulator.wait_ready()
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture(scope="module")
def eagle3_after_traffic(tmp_path_factory):
    """An EAGLE3 emulator's /metrics after two requests sharing a prefix (so the prefix cache hits)."""
    with running(tmp_path_factory.mktemp("eagle3"), *EAGLE3) as emulator:
        generate(emulator.url, "The capital city of France is a city with a long history")
        generate(emulator.url, "The capital city of France is the largest city in the country")
        wait_for(lambda: samples(scrape(emulator.url), "sglang:spec_num_draft_tokens"), what="a decode stats report")
        yield scrape(emulator.url)


# --- the families of the real captures --------------------------------------------------------------


def test_the_exposition_says_it_is_emulated(tmp_path):
    with running(tmp_path) as emulator:
        text = httpx.get(emulator.url + "/metrics", timeout=5).text
    assert text.startswith("# specmon SGLang 0.5.16 emulator: emulated metrics")


def test_every_family_of_the_real_captures_with_its_type_and_label_names(eagle3_after_traffic):
    emulated = shape(eagle3_after_traffic)
    for capture in CAPTURES:
        for name, (kind, label_sets) in shape(list(text_string_to_metric_families(capture.read_text()))).items():
            assert name in emulated, f"{name} ({capture.name}) is missing"
            assert emulated[name][0] == kind, name
            assert emulated[name][1] == label_sets, (name, emulated[name][1], label_sets)


def test_help_texts_and_buckets_are_sglangs(eagle3_after_traffic):
    real = {f.name: f for f in text_string_to_metric_families(CAPTURES[0].read_text())}
    for family in eagle3_after_traffic:
        if family.name not in real:
            continue
        assert family.documentation == real[family.name].documentation, family.name
        if family.type == "histogram":
            bounds = {s.labels["le"] for s in family.samples if s.name.endswith("_bucket")}
            real_bounds = {s.labels["le"] for s in real[family.name].samples if s.name.endswith("_bucket")}
            assert bounds == real_bounds, family.name


def test_the_exposition_has_exactly_the_families_the_emulator_claims_all_of_its_versions(eagle3_after_traffic):
    """After traffic every family of `EXPORTED` has samples, and nothing else shows (a name added to the
    rendering but not to the claim, or claimed but never rendered, fails); each is a 0.5.16 name."""
    shown = {f.name + ("_total" if f.type == "counter" else "") for f in eagle3_after_traffic}
    assert sorted(shown - EXPORTED) == []
    assert sorted(EXPORTED - shown) == []
    table = load_shipped_metrics(EMULATED_VERSION).families
    assert sorted(name for name in EXPORTED if name not in table) == []
    assert sorted(name for name in EXPORTED if not expected_in(EXPECTED_IN[name], EMULATED_VERSION)) == []


def test_spec_gauges_carry_the_launchs_steps_and_draft_tokens(eagle3_after_traffic, tmp_path):
    assert [s.value for s in samples(eagle3_after_traffic, "sglang:spec_num_steps")] == [3.0]
    assert [s.value for s in samples(eagle3_after_traffic, "sglang:spec_num_draft_tokens")] == [4.0]
    assert samples(eagle3_after_traffic, "sglang:cached_tokens_total", cache_source="device")[0].value > 0
    assert samples(eagle3_after_traffic, "sglang:spec_verify_calls_total")[0].value > 0
    with running(tmp_path) as plain:  # no speculation: the gauges are there, at 0, as in the plain capture
        generate(plain.url, "plain")
        families = wait_for(lambda: (f := scrape(plain.url)) and samples(f, "sglang:spec_num_steps") and f,
                            what="a stats report")
    assert [s.value for s in samples(families, "sglang:spec_num_draft_tokens")] == [0.0]
    assert not samples(families, "sglang:spec_verify_calls_total")  # counted only when there are verify calls


# --- ranks --------------------------------------------------------------------------------------------


def ranks_of(families: list, name: str) -> dict[tuple[str | None, str], float]:
    return {(s.labels.get("dp_rank"), s.labels["tp_rank"]): s.value for s in samples(families, name)}


def test_tp_ranks_without_all_schedulers_repeat_only_the_constants(tmp_path):
    with running(tmp_path, "--tp-size", "2") as emulator:
        generate(emulator.url, "two ranks")
        families = scrape(emulator.url)
    for name in CONSTANT_GAUGES:
        assert set(ranks_of(families, name)) == {(None, "0"), (None, "1")}, name
    for name in [n for n in STATS_GAUGES if n != "sglang:fwd_occupancy"] + ["sglang:realtime_tokens_total"]:
        assert {tp for _dp, tp in ranks_of(families, name)} == {"0"}, name
    assert not any("dp_rank" in s.labels for f in families for s in f.samples)


def test_all_schedulers_report_identical_tp_replicas(tmp_path):
    with running(tmp_path, "--tp-size", "2", "--enable-metrics-for-all-schedulers") as emulator:
        generate(emulator.url, "replicas", tokens=96)
        families = scrape(emulator.url)
    for name in ("sglang:num_running_reqs", "sglang:gen_throughput", "sglang:token_usage",
                 "sglang:realtime_tokens_total"):
        by_rank = ranks_of(families, name)
        assert set(by_rank) == {(None, "0"), (None, "1")}, name
        assert by_rank[(None, "0")] == by_rank[(None, "1")], name


def test_dp_without_attention_runs_each_tp_group_per_dp_rank(tmp_path):
    with running(tmp_path, "--tp-size", "2", "--dp-size", "2") as emulator:
        for i in range(4):
            generate(emulator.url, f"request {i}", tokens=48)
        families = scrape(emulator.url)
    assert set(ranks_of(families, "sglang:max_total_num_tokens")) == {("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")}
    decode = {(s.labels["dp_rank"], s.labels["tp_rank"]): s.value
              for s in samples(families, "sglang:realtime_tokens_total", mode="decode")}
    assert set(decode) == {("0", "0"), ("1", "0")}  # TP rank 0 of each DP rank reports
    generated = samples(families, "sglang:generation_tokens_total")[0].value
    requests = samples(families, "sglang:num_requests_total")[0].value  # the warmup's too
    assert sum(decode.values()) == generated - requests  # every token but each request's first (its prefill's)
    assert decode[("0", "0")] > 0 and decode[("1", "0")] > 0  # round robin: both DP ranks served


def test_dp_attention_ranks_belong_to_their_attention_group(tmp_path):
    with running(tmp_path, "--tp-size", "4", "--dp-size", "2", "--enable-dp-attention") as emulator:
        generate(emulator.url, "attention dp")
        families = scrape(emulator.url)
        gpus = httpx.get(emulator.gpu_url, timeout=5).json()["gpus"]
    assert len(gpus) == 4  # DP attention shares the TP ranks' GPUs
    constants = ranks_of(families, "sglang:max_total_num_tokens")
    assert set(constants) == {("0", "0"), ("0", "1"), ("1", "2"), ("1", "3")}
    assert set(ranks_of(families, "sglang:num_running_reqs")) <= {("0", "0"), ("1", "2")}


def test_extra_labels_go_where_sglang_puts_them_and_engine_type_follows_the_mode(tmp_path):
    labels = json.dumps({"cluster": "west", "replica": "r1"})
    with running(tmp_path, "--extra-metric-labels", labels, "--disaggregation-mode", "decode",
                 "--served-model-name", "llama") as emulator:
        generate(emulator.url, "labelled")
        families = scrape(emulator.url)
    for name in ("sglang:num_running_reqs", "sglang:max_total_num_tokens", "sglang:generation_tokens_total",
                 "sglang:time_to_first_token_seconds_count"):
        found = samples(families, name)
        assert found and all(s.labels["cluster"] == "west" and s.labels["replica"] == "r1" for s in found), name
        assert all(s.labels["engine_type"] == "decode" and s.labels["model_name"] == "llama" for s in found), name
    for name in ("sglang:http_requests_total", "sglang:process_cpu_seconds_total"):
        assert all("cluster" not in s.labels for s in samples(families, name)), name


def test_extra_labels_that_are_not_json_fail_like_sglangs_parser():
    done = subprocess.run([sys.executable, "-m", "specmon.emulator", "--model-path", "/m",
                           "--extra-metric-labels", "{cluster: west}"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert "argument --extra-metric-labels: invalid loads value: '{cluster: west}'" in done.stderr


@pytest.mark.parametrize(("labels", "message"), [
    ('["west"]', "must be a JSON object"),
    ('{"bad-name": "x"}', "'bad-name' is not a Prometheus label name"),
    ('{"__reserved": "x"}', "is not a Prometheus label name"),
    ('{"cluster": {"a": 1}}', "the value of 'cluster' is not a string"),
])
def test_extra_labels_prometheus_cannot_take_end_the_launch_with_the_reason(labels, message):
    done = subprocess.run([sys.executable, "-m", "specmon.emulator", "--model-path", "/m", "--enable-metrics",
                           "--port", str(free_port_pair()), "--extra-metric-labels", labels],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and message in done.stderr and "Traceback" not in done.stderr


# --- two nodes ----------------------------------------------------------------------------------------


def test_two_nodes_node1_serves_scheduler_only_metrics_and_ends_with_node0(tmp_path):
    rendezvous = f"127.0.0.1:{free_port()}"
    common = ["--tp-size", "4", "--nnodes", "2", "--dist-init-addr", rendezvous,
              "--enable-metrics-for-all-schedulers"]
    node0 = launch(tmp_path, *FAST, "--enable-metrics", *common, "--node-rank", "0", name="node0.log")
    node1: Emulator | None = None
    try:
        wait_for(lambda: "Init torch distributed begin." in node0.log(), what="node 0 at its rendezvous")
        assert "Load weight begin" not in node0.log()  # it waits for node 1, as torch's rendezvous does
        node1 = launch(tmp_path, *FAST, "--enable-metrics", *common, "--node-rank", "1", name="node1.log")
        node0.wait_ready()
        node1.wait_ready()
        assert httpx.get(node1.url + "/ping", timeout=5).status_code == 200
        assert httpx.post(node1.url + "/generate", json={"text": "x"}, timeout=5).status_code == 404
        generate(node0.url, "served by both nodes", tokens=96)

        def mirrored():
            mine = ranks_of(scrape(node1.url), "sglang:realtime_tokens_total")
            return mine.get((None, "2")) == ranks_of(scrape(node0.url), "sglang:realtime_tokens_total")[(None, "0")]

        wait_for(mirrored, what="node 1's ranks to report what the DP group did")
        families1 = scrape(node1.url)
        assert {tp for _dp, tp in ranks_of(families1, "sglang:max_total_num_tokens")} == {"2", "3"}
        assert {tp for _dp, tp in ranks_of(scrape(node0.url), "sglang:max_total_num_tokens")} == {"0", "1"}
        roles = {load_shipped_metrics("0.5.16").families[f.name + ("_total" if f.type == "counter" else "")].role
                 for f in families1}
        assert roles == {"scheduler"}
        log1 = node1.log()
        assert "Dummy health check server started in background thread at 127.0.0.1:" in log1
        assert re.search(r"\[[\d\- :]+ TP2\] Load weight begin", log1) and " TP0]" not in log1
        assert "Capturing batches" not in log1 and "max_total_num_tokens=" not in log1  # TP rank 0 prints those
        node0.proc.send_signal(signal.SIGKILL)
        assert node1.proc.wait(30) == 1
        assert "terminated with 1" in node1.log()
    finally:
        node0.stop()
        if node1 is not None:
            node1.stop()


def test_a_node_without_dist_init_addr_is_refused(tmp_path):
    done = subprocess.run([sys.executable, "-m", "specmon.emulator", "--model-path", "/m", "--tp-size", "2",
                           "--nnodes", "2", "--node-rank", "1", "--port", str(free_port_pair())],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "a multi-node launch needs --dist-init-addr HOST:PORT" in done.stderr


def test_concurrent_scrapes_and_traffic_never_break_the_exposition(tmp_path):
    with running(tmp_path, "--tp-size", "2", "--dp-size", "2", "--enable-metrics-for-all-schedulers") as emulator:
        errors: list[BaseException] = []

        def load(i: int) -> None:
            try:
                generate(emulator.url, f"parallel {i}", tokens=80)
            except BaseException as error:  # noqa: BLE001 - reported by the assertion below
                errors.append(error)

        threads = [threading.Thread(target=load, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            assert scrape(emulator.url)
        for thread in threads:
            thread.join()
    assert not errors


@pytest.mark.parametrize(("status", "body", "readable"), [
    (200, b'{"nnodes": 2, "groups": {"0": {}}}', True),
    (200, b"not json", False),
    (200, b'{"nnodes": 2}', False),
    (200, b'{"groups": [1, 2]}', False),
    (500, b'{"groups": {}}', False),
    (200, b'{"groups": {"0": "' + b"x" * (5 * 1024 * 1024) + b'"}}', False),
])
def test_a_node_reads_only_a_sane_answer_from_node_0(status, body, readable):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from specmon.emulator.nodes import LeaderLink

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(status)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        answer = LeaderLink("127.0.0.1", server.server_address[1], node_rank=1).fetch()
    finally:
        server.shutdown()
        server.server_close()
    assert (answer is not None) == readable
