"""`specmon fleet` against a real Prometheus scraping real fleet members on loopback: emulators under load (an
EAGLE3 server labelled with one of specmon's presets, an unlabelled one whose spec gauges alone say its draft
tokens, a plain one, one restarted, one killed, a DP2×TP2 one reporting from every scheduler), the real SGLang
0.5.16 /metrics capture and a DP2×TP2 capture served as recorded, two DCGM exporter stand-ins replaying NVML
readings recorded on an H200 (one labelling its host `Hostname`, one `hostname` as dcgm-exporter does since
#655), a two-node emulator server named by its --extra-metric-labels, and a real sglang-router (regular and PD
mode) in front of two emulators. Queries run only after every target was scraped at least twice, with load
still running."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from specmon.ports import free_port, free_port_pair
from tests.emulator.test_emulator import EAGLE3, launch
from tests.support.dcgm_exporter import DcgmStandIn, Recording, load_recording, newest_fixture
from tests.support.oncall import wait_for as oncall_wait_for
from tests.support.prometheus import Job, Load, Prometheus, StaticMetrics
from tests.support.tmux import Tmux, needs_tmux

pytestmark = pytest.mark.timeout(300)
FIXTURES = Path(__file__).parents[1] / "fixtures"
SPEED = ["--emulator-speed", "50", "--emulator-decode-speed", "5", "--enable-metrics"]
EAGLE3_5 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/eagle3-8b",
            "--speculative-num-steps", "4", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "5"]
"""The flags of specmon's demo-eagle3-5 preset (5 draft tokens = 4 steps × topk 1 + 1)."""
DP2_TP2 = ["--tp-size", "2", "--dp-size", "2", "--enable-metrics-for-all-schedulers"]
HOSTS = {"gpu-a": ("Hostname", "load"), "gpu-b": ("hostname", "idle")}
"""Each DCGM stand-in: the label it names its host with and the recorded phase it replays."""


STATE: dict[str, Path] = {}
"""The module's own state directory (specmon's records are empty there), set by the `fleet` fixture."""


def specmon(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_STATE_HOME": str(STATE.get("dir", "/nonexistent-specmon-state"))}
    return subprocess.run([sys.executable, "-m", "specmon", *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


def fleet_json(prom: Prometheus, *extra: str) -> tuple[int, dict, str]:
    done = specmon("fleet", "--prometheus", prom.url, "--window", "4", "--once", "--json", *extra)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


wait_for = functools.partial(oncall_wait_for, timeout=60.0)  # Prometheus scrapes every second: a minute at most


def dcgm_stand_ins() -> dict[str, tuple[DcgmStandIn, Recording]]:
    recording = load_recording(newest_fixture())
    stand_ins = {}
    for host, (label, phase) in HOSTS.items():
        replayed = recording.phase(phase)
        stand_in = DcgmStandIn(("127.0.0.1", 0), replayed, hostname=host, hostname_label=label)
        stand_in.start()
        stand_ins[host] = (stand_in, replayed)
    return stand_ins


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fleet")
    STATE["dir"] = tmp / "state"
    servers = {
        "eagle3-5": launch(tmp, *EAGLE3_5, *SPEED, name="eagle3-5.log"),
        "eagle3-4": launch(tmp, *EAGLE3, *SPEED, name="eagle3-4.log"),
        "plain": launch(tmp, *SPEED, name="plain.log"),
        "restarted": launch(tmp, *EAGLE3, *SPEED, name="restarted.log"),
        "killed": launch(tmp, *SPEED, name="killed.log"),
        "dp2tp2-emulated": launch(tmp, *EAGLE3, *SPEED, *DP2_TP2, name="dp2tp2.log"),
    }
    static = {"real": StaticMetrics((FIXTURES / "real-sglang-0.5.16/eagle3/metrics.txt").read_text()),
              "dp2tp2": StaticMetrics((FIXTURES / "live/metrics-dp2-tp2.txt").read_text())}
    dcgm = dcgm_stand_ins()
    loads: list[Load] = []
    prom = None
    try:
        for server in servers.values():
            server.wait_ready(60)
        address = {name: f"127.0.0.1:{s.port}" for name, s in servers.items()}
        address.update({name: s.address for name, s in static.items()})
        # as `specmon ps --prometheus-sd` labels a server specmon launched; `node` names the GPU host
        labels = {target: {"node": "gpu-b" if name in ("plain", "dp2tp2-emulated") else "gpu-a"}
                  for name, target in address.items()}
        labels[address["eagle3-5"]]["preset"] = "demo-eagle3-5"
        prom = Prometheus(tmp, [Job("sglang", list(address.values()), labels=labels),
                                Job("dcgm", [f"127.0.0.1:{s.server_address[1]}" for s, _ in dcgm.values()])])
        # load for as long as the module's tests may take on a busy machine (stopped at teardown)
        loads.append(Load([servers[name].url for name in ("eagle3-5", "eagle3-4", "plain", "restarted")],
                          deadline_s=1800))
        loads.append(Load([servers["dp2tp2-emulated"].url], streams=4, deadline_s=1800))
        prom.wait_scraped('up{job="sglang"}', len(address), minimum=2)
        prom.wait_scraped('sglang:num_requests_total{job="sglang"}', len(address) - 1, minimum=2)

        restarted = servers["restarted"]
        restarted.stop()
        servers["restarted"] = launch(tmp, *EAGLE3, *SPEED, port=restarted.port, name="restarted-2.log")
        servers["restarted"].wait_ready(60)
        servers["killed"].proc.send_signal(signal.SIGKILL)
        servers["killed"].proc.wait()
        wait_for(lambda: prom.query(f'resets(sglang:num_requests_total{{instance="{address["restarted"]}"}}[5m]) > 0'),
                 what="Prometheus to see the restart")
        wait_for(lambda: prom.query(f'up{{instance="{address["killed"]}"}} == 0'), what="the kill to be scraped")
        prom.wait_scraped('up{job="dcgm"}', len(dcgm), minimum=2)
        speculative = f'instance=~"{address["eagle3-5"]}|{address["eagle3-4"]}"'
        wait_for(lambda: len(prom.query(f"count by (instance) (sglang:spec_num_draft_tokens{{{speculative}}} > 0)")) == 2,
                 what="the spec gauges, set at the first decode report")
        settled = time.time()
        wait_for(lambda: prom.query(f'min(timestamp(up{{job="sglang"}})) > {settled + 2}'),
                 what="two more scrapes of every target after the restart")
        yield prom, servers, address, dcgm
    finally:
        for load in loads:
            load.stop()
        if prom is not None:
            prom.stop()
        for server in servers.values():
            server.stop()
        for item in static.values():
            item.stop()
        for stand_in, _ in dcgm.values():
            stand_in.shutdown()
            stand_in.server_close()


def rows_by_name(snapshot: dict, address: dict) -> dict[str, dict]:
    names = {v: k for k, v in address.items()}
    return {names[row["server"]]: row for row in snapshot["servers"] if row["server"] in names}


def steady_fleet_json(prom: Prometheus, address: dict, *extra: str,
                      running: str | None = None) -> tuple[int, dict, str]:
    """`fleet_json` at a moment when every running server's last scrape answered: on a busy host one past its
    1 s timeout reads as down (as it would in Grafana) until the next scrape, a second later. With `running`, also
    one whose last scrape of that server caught a request running (its load's streams may all be between requests
    at a scrape)."""

    def read():
        code, snapshot, err = fleet_json(prom, *extra)
        rows = rows_by_name(snapshot, address)
        down = [name for name, row in rows.items() if row["state"] == "down" and name != "killed"]
        caught = running is None or (rows.get(running) or {}).get("running")
        return not down and caught and (code, snapshot, err)

    return wait_for(read, what="a read with every running server's last scrape answered")


def test_fleet_once_json_reads_every_server_from_the_real_prometheus(fleet):
    prom, servers, address, dcgm = fleet
    code, snapshot, err = steady_fleet_json(prom, address, running="eagle3-5")
    rows = rows_by_name(snapshot, address)
    assert set(rows) == set(address) and snapshot["window_s"] == 4.0
    assert code == 1  # one server down, and the DP2×TP2 capture is unbalanced

    eagle3 = rows["eagle3-5"]
    assert eagle3["state"] == "serving" and eagle3["decode_tok_s"] > 0 and eagle3["running"] >= 1
    assert eagle3["accept_source"] == "counters" and 1.5 < eagle3["accept_length"] < 5.5
    assert eagle3["role"] == "unified" and eagle3["nodes_up"] == 1
    # TTFT p99: a value between two finite bounds, else the bound of the first (0-100 ms) or the +Inf bucket
    ttft = [eagle3[key] for key in ("ttft_p99_s", "ttft_p99_below_s", "ttft_p99_above_s")]
    assert sum(value is not None for value in ttft) == 1 and (ttft[0] is None or ttft[0] > 0.1), ttft
    # preset · algorithm · draft tokens: the target's preset label, that preset's algorithm, the server's gauge
    assert (eagle3["preset"], eagle3["algorithm"], eagle3["draft_tokens"]) == ("demo-eagle3-5", "EAGLE3", 5)
    # no label at all: its sglang:spec_num_draft_tokens gauge alone says 4 draft tokens
    assert (rows["eagle3-4"]["preset"], rows["eagle3-4"]["draft_tokens"]) == (None, 4)

    plain = rows["plain"]
    assert plain["state"] == "serving" and plain["accept_length"] is None and plain["alerts"] == []
    assert plain["draft_tokens"] is None

    assert rows["restarted"]["restarts"] >= 1 and rows["restarted"]["state"] == "restarted"
    assert {a["kind"] for a in rows["restarted"]["alerts"]} == {"restart"}

    killed = rows["killed"]
    assert killed["state"] == "down" and killed["nodes_up"] == 0 and killed["decode_tok_s"] is None
    assert killed["alerts"][0]["kind"] == "down" and "last seen" in killed["alerts"][0]["message"]
    worst = [any(a["kind"] in ("down", "stall", "accept_low") for a in row["alerts"]) for row in snapshot["servers"]]
    assert worst == sorted(worst, reverse=True)  # sorted by alert first

    # the recorded real 0.5.16 capture: draft tokens from sglang:spec_num_draft_tokens, acceptance from the gauge
    real = rows["real"]
    assert real["draft_tokens"] == 4 and real["state"] == "idle" and real["accept_source"] in (None, "gauge")

    # the DP2×TP2 capture: TP duplicates counted once, DP ranks summed (a plain sum would say 28 and 6)
    dp = rows["dp2tp2"]
    assert dp["running"] == 14 and dp["queued"] == 3 and dp["kv_used_ratio"] == pytest.approx(0.3)
    assert "dp_imbalance" in {a["kind"] for a in dp["alerts"]}


def test_a_dp2_tp2_emulator_counts_each_tp_replica_once_and_sums_the_dp_ranks(fleet):
    """The fleet's figures at one instant equal what the raw per-rank series say at that instant: each DP rank's
    TP rank 0, added up (its TP rank 1 repeats the same values, so a plain sum would double them)."""
    from specmon.fleet.promapi import PromClient
    from specmon.fleet.promql import FleetQueries
    from specmon.fleet.reader import FleetReader
    from specmon.fleet.tracker import FleetTracker

    prom, servers, address, dcgm = fleet
    target = address["dp2tp2-emulated"]

    async def read(at: float):
        async with PromClient(prom.url) as client:
            reader = FleetReader(client, FleetQueries(window_s=4), 4, clock=lambda: at)
            queries = await reader.configure()
            return FleetTracker(queries, prom.url).update(await reader.read())

    def instant_with_requests_running():
        at = time.time() - 1.0  # an instant whose scrape is in; its four streams may all be between requests then
        row = next(r for r in asyncio.run(read(at)).rows if r.server == target)
        return (at, row) if row.running and row.accept_source == "counters" else None  # its scrapes answered

    at, row = wait_for(instant_with_requests_running, what="an instant with requests running on the DP2xTP2 server")
    for name, figure, combine in (("num_running_reqs", row.running, sum), ("num_queue_reqs", row.queued, sum)):
        ranks = {(s["metric"]["dp_rank"], s["metric"]["tp_rank"]): float(s["value"][1])
                 for s in prom.query(f'sglang:{name}{{instance="{target}"}}', at=at)}
        assert len(ranks) == 4 and {dp for dp, _ in ranks} == {"0", "1"}
        tp0 = {dp: value for (dp, tp), value in ranks.items() if tp == "0"}
        assert all(value == tp0[dp] for (dp, _), value in ranks.items())  # TP rank 1 is a replica
        assert figure == combine(tp0.values()), name
    assert row.running and row.running <= 4  # four streams: at most four requests run at once
    assert row.draft_tokens == 4 and row.accept_source == "counters"


def test_dcgm_stand_ins_by_hostname_or_hostname_and_their_absence_is_said(fleet):
    """Each server gets the recorded H200 readings of its own host's DCGM exporter: `gpu-a`'s names its host
    `Hostname` and replays the readings under load, `gpu-b`'s names it `hostname` (dcgm-exporter#655) and
    replays the idle ones."""
    prom, servers, address, dcgm = fleet
    _, snapshot, err = fleet_json(prom, "--host-label", "node")
    rows = rows_by_name(snapshot, address)
    def memory(host: str) -> set[float]:
        return {round(used / (used + reading[0]["DCGM_FI_DEV_FB_FREE"]), 4) for reading in dcgm[host][1].readings
                if (used := reading[0]["DCGM_FI_DEV_FB_USED"]) is not None}

    assert min(memory("gpu-a")) > max(memory("gpu-b"))  # 20 GiB held under load, none idle: hosts cannot mix
    for name, host in (("eagle3-5", "gpu-a"), ("plain", "gpu-b"), ("dp2tp2-emulated", "gpu-b")):
        utilization = {round(reading[0]["DCGM_FI_DEV_GPU_UTIL"] / 100, 4) for reading in dcgm[host][1].readings
                       if reading[0]["DCGM_FI_DEV_GPU_UTIL"] is not None}  # DCGM's percent: the JSON's ratio
        assert rows[name]["host"] == host
        assert rows[name]["gpu_memory_used_ratio"] in memory(host), (name, memory(host))
        assert rows[name]["gpu_util_min_ratio"] in utilization, (name, utilization)
    _, bare, err = fleet_json(prom, "--gpu-selector", 'job="no-such-dcgm"')
    assert rows_by_name(bare, address)["eagle3-5"]["gpu_memory_used_ratio"] is None
    assert 'no DCGM series match {job="no-such-dcgm"}' in err


def test_text_output_and_the_window_raised_to_four_scrapes(fleet):
    prom, servers, address, dcgm = fleet
    done = specmon("fleet", "--prometheus", prom.url, "--window", "1", "--once")
    assert done.returncode == 1, done.stderr
    assert "rate window raised from 1 s to 4 s (4 × the scrape interval 1 s)" in done.stderr
    assert address["eagle3-5"] in done.stdout and "down" in done.stdout


def test_the_rules_file_loaded_into_prometheus_records_what_fleet_computes(fleet, tmp_path):
    """The recording rules evaluated by Prometheus itself agree with the same expressions evaluated inline."""
    prom, servers, address, dcgm = fleet
    rules = specmon("fleet", "rules", "--window", "4").stdout
    (tmp_path / "rules.yml").write_text(rules)
    second = Prometheus(tmp_path, [Job("sglang", [address["dp2tp2"], address["real"]])],
                        rule_files=[tmp_path / "rules.yml"])
    try:
        second.wait_scraped("instance:sglang_num_running_reqs:sum", 2, minimum=2)
        running = {r["metric"]["instance"]: float(r["value"][1])
                   for r in second.query("instance:sglang_num_running_reqs:sum")}
        assert running == {address["dp2tp2"]: 14.0, address["real"]: 0.0}
        draft = second.query("instance:sglang_spec_num_draft_tokens:max")
        assert [float(r["value"][1]) for r in draft] == [4.0]
        code, snapshot, err = fleet_json(second)  # the rules are found and read by record name
        assert "columns read from the recording rules Prometheus evaluates" in err
        rows = {row["server"]: row for row in snapshot["servers"]}
        assert rows[address["dp2tp2"]]["running"] == 14 and rows[address["real"]]["draft_tokens"] == 4
    finally:
        second.stop()


def test_a_two_node_server_named_by_its_extra_metric_labels_shows_its_nodes_up(tmp_path):
    """`--nnodes 2`: two targets (node 1 serves scheduler metrics only), one server. Its name is on the metrics
    only (SGLang's --extra-metric-labels), not on Prometheus' targets: 2/2 nodes up, then 1/2 once node 1 is
    killed, as a fresh `fleet --once` sees it (node 1's name then comes from its last hour of samples)."""
    common = [*SPEED, "--tp-size", "4", "--nnodes", "2", "--dist-init-addr", f"127.0.0.1:{free_port()}",
              "--extra-metric-labels", json.dumps({"model_server": "llama-2node"})]
    nodes = [launch(tmp_path, *EAGLE3, *common, "--node-rank", "0", name="node0.log")]
    prom = load = None
    try:
        nodes.append(launch(tmp_path, *EAGLE3, *common, "--node-rank", "1", name="node1.log"))
        for node in nodes:
            node.wait_ready(60)
        targets = [f"127.0.0.1:{node.port}" for node in nodes]
        prom = Prometheus(tmp_path, [Job("multinode", targets)])
        load = Load([nodes[0].url])
        prom.wait_scraped('up{job="multinode"}', 2, minimum=2)
        prom.wait_scraped('sglang:num_requests_total{job="multinode"}', 1, minimum=2)
        args = ("--selector", 'job="multinode"', "--server-label", "model_server")

        def read(nodes_up: int):  # on a busy host a scrape past its 1 s timeout reads as down until the next one
            code, fleet, err = fleet_json(prom, *args)
            rows = fleet["servers"]
            return len(rows) == 1 and rows[0]["nodes_up"] == nodes_up and (code, rows[0], err)

        def text_shows(nodes: str) -> bool:
            return f" {nodes} " in specmon("fleet", "--prometheus", prom.url, "--window", "4", *args, "--once").stdout

        code, row, err = wait_for(lambda: read(2), what="a read with both nodes up")
        assert (row["server"], row["alerts"], code) == ("llama-2node", [], 0), err
        assert row["decode_tok_s"] > 0 and row["draft_tokens"] == 4
        wait_for(lambda: text_shows("2/2"), what="the table to show 2/2 nodes")

        nodes[1].proc.send_signal(signal.SIGKILL)
        nodes[1].proc.wait()
        wait_for(lambda: prom.query(f'up{{instance="{targets[1]}"}} == 0'), what="the killed node to be scraped")
        code, row, err = wait_for(lambda: read(1), what="a read with node 0 up and node 1 down")
        assert (row["server"], code) == ("llama-2node", 1), err
        (down,) = [alert for alert in row["alerts"] if alert["kind"] == "down"]
        assert "1 of 2 nodes down" in down["message"] and targets[1] in down["message"]
        wait_for(lambda: text_shows("1/2"), what="the table to show 1/2 nodes")
    finally:
        if load is not None:
            load.stop()
        if prom is not None:
            prom.stop()
        for node in nodes:
            node.stop()


@pytest.fixture(scope="module")
def routers(fleet):
    pytest.importorskip("sglang_router", reason="sglang-router is in the test extra (pip install '.[test]')")
    prom, servers, address, dcgm = fleet
    started = []
    urls = {}
    for mode, args in (("regular", ["--worker-urls", servers["eagle3-5"].url, servers["plain"].url]),
                       ("pd", ["--pd-disaggregation", "--prefill", servers["plain"].url, "--decode",
                               servers["eagle3-5"].url])):
        port = free_port()
        log = open(STATE["dir"].parent / f"router-{mode}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen([sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
                                 "--port", str(port), "--prometheus-host", "127.0.0.1",
                                 "--prometheus-port", str(free_port()), *args], stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        started.append((proc, log))
        urls[mode] = f"http://127.0.0.1:{port}"

        def listed(url=urls[mode]):
            with contextlib.suppress(httpx.HTTPError, ValueError):
                return len(httpx.get(url + "/workers", timeout=2).json().get("workers", [])) == 2
            return False

        wait_for(listed, what=f"the {mode} router's /workers")
    try:
        yield urls
    finally:
        for proc, log in started:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


def test_roles_come_from_a_real_sglang_router_regular_and_pd(fleet, routers):
    prom, servers, address, dcgm = fleet
    _, regular, _ = steady_fleet_json(prom, address, "--router", routers["regular"])
    rows = rows_by_name(regular, address)
    assert rows["eagle3-5"]["role"] == "regular" and rows["plain"]["role"] == "regular"
    assert rows["real"]["role"] == "unified"  # not behind the router: engine_type
    _, pd, _ = steady_fleet_json(prom, address, "--router", routers["pd"])
    rows = rows_by_name(pd, address)
    assert rows["plain"]["role"] == "prefill" and rows["eagle3-5"]["role"] == "decode"
    _, gone, err = steady_fleet_json(prom, address, "--router", f"http://127.0.0.1:{free_port_pair()}")
    assert "did not answer" in err and rows_by_name(gone, address)["eagle3-5"]["role"] == "unified"


def test_the_repository_s_dashboard_is_the_generated_one():
    from specmon.fleet.dashboard import dashboard_json

    committed = (Path(__file__).parents[2] / "dashboards" / "specmon-fleet.json").read_text()
    assert committed == dashboard_json(), "regenerate: python -m specmon fleet dashboard > dashboards/specmon-fleet.json"


def test_every_dashboard_query_answers_from_prometheus_with_the_rules_loaded(fleet, tmp_path):
    """The dashboard reads the recording rules, per server: each panel's query returns series, one per server
    where it is per server (never one merged curve)."""
    from specmon.fleet.dashboard import dashboard, panel_queries
    from specmon.textfile import Textfile, bench_samples

    prom, servers, address, dcgm = fleet
    Textfile(tmp_path / "textfile").update(set_=bench_samples(
        servers["eagle3-5"].url, "demo-eagle3-5", {"decode_tok_s": {"median": 400.0},
                                                  "accept_length": {"token_weighted": 2.6}}, 1.0))
    textfile = StaticMetrics((tmp_path / "textfile" / "specmon.prom").read_text())
    (tmp_path / "rules.yml").write_text(specmon("fleet", "rules").stdout)
    labels = {address["eagle3-5"]: {"preset": "demo-eagle3-5"}, address["plain"]: {"preset": "demo-plain"}}
    dcgm = next(r["metric"]["instance"] for r in prom.query('up{job="dcgm"}'))
    second = Prometheus(tmp_path, [Job("sglang", [address["eagle3-5"], address["plain"], address["real"]], labels=labels),
                                   Job("dcgm", [dcgm]), Job("node", [textfile.address])],
                        rule_files=[tmp_path / "rules.yml"])
    try:
        second.wait_scraped('up{job="sglang"}', 3, minimum=2)
        queries = [(title, expr.replace("$server", ".*")) for title, expr in panel_queries(dashboard())]

        every_server = {address["eagle3-5"], address["plain"], address["real"]}

        def answered():  # each server's rate needs two of its scrapes: the servers' series come one by one
            # a panel answers when one of its queries does (TTFT's bound series have data only for a p99 there)
            answering = {title for title, expr in queries if second.query(expr)}
            empty = [title for title, _ in queries if title not in answering and "alerts" not in title]
            decoding = {r["metric"]["instance"] for r in second.query(queries[0][1])}
            return (not empty and decoding == every_server) or print("waiting for", empty, every_server - decoding)

        wait_for(answered, timeout=90, what="every panel to have data, decode from every server (rules every 1 s)")
        decode = second.query(queries[0][1])
        assert {r["metric"]["instance"] for r in decode} == every_server, "no server's series went away"
        per_preset = second.query(next(expr for title, expr in queries if "by preset" in title))
        assert {r["metric"]["preset"] for r in per_preset} == {"demo-eagle3-5", "demo-plain"}
    finally:
        second.stop()
        textfile.stop()


def test_a_server_s_samples_in_prometheus_read_as_its_own_metrics(fleet):
    """The drill-down's input: one instant query of a server's sglang:* samples, as exposition text, parses to
    the same figures as the server's own /metrics text (the real 0.5.16 capture, served as recorded)."""
    import asyncio

    from specmon.fleet.drill import samples_text
    from specmon.fleet.promapi import PromClient
    from specmon.fleet.promql import FleetQueries
    from specmon.serving.prom import parse_scrape

    prom, servers, address, dcgm = fleet

    async def read():
        async with PromClient(prom.url) as client:
            return await client.query(FleetQueries().server_samples(address["real"]))

    via_prometheus = parse_scrape(samples_text(asyncio.run(read())), 0.0)
    direct = parse_scrape((FIXTURES / "real-sglang-0.5.16/eagle3/metrics.txt").read_text(), 0.0)
    assert via_prometheus.error is None and via_prometheus.counters == direct.counters
    assert via_prometheus.gauges == direct.gauges and via_prometheus.histograms == direct.histograms


async def test_drill_down_through_prometheus_shows_the_live_view_and_dcgm_gpus(fleet, capsys):
    """A server that does not answer from here (a recorded capture: no SGLang API) opens fed from Prometheus:
    the app `fleet --server NAME` runs, watched until it shows what Prometheus and DCGM say."""
    from specmon.cli import build_parser
    from specmon.fleet.cli import options_from
    from specmon.tui.app import SpecmonApp
    from specmon.tui.cli import fleet_server_config
    from tests.support.app_harness import screen_text
    from tests.support.app_harness import wait_for as app_wait_for

    prom, servers, address, dcgm = fleet
    # --interval 10: each answer may take 10 s (the client's timeout follows the interval) on a loaded machine
    args = build_parser().parse_args(["fleet", "--prometheus", prom.url, "--window", "4", "--interval", "10",
                                      "--server", address["dp2tp2"]])
    config = await asyncio.to_thread(fleet_server_config, args, options_from(args))
    assert "does not answer from here: reading it through Prometheus" in capsys.readouterr().err
    app = SpecmonApp(config)
    async with app.run_test(size=(200, 50)) as pilot:
        def shown() -> str:
            return screen_text(app)

        assert await app_wait_for(pilot, lambda: "DP ranks unbalanced" in shown() and "via Prometheus" in shown()
                                  and "DCGM via Prometheus: no process table" in shown(), 60), shown()
        assert "Prometheus (its sglang:* samples)" in shown()
    done = specmon("fleet", "--prometheus", prom.url, "--server", "nowhere:1", "--headless", "--duration", "1")
    assert done.returncode == 2 and "no server 'nowhere:1' in Prometheus" in done.stderr


async def test_a_down_server_s_drill_down_says_at_once_what_its_row_says(fleet, capsys):
    """Opening a server that is down: each slow step is said as it begins, and its screen (at 80x24, on its
    Live view, a server read through Prometheus has no log) shows no less than its fleet row: down since when,
    its preset · algorithm · draft, nodes up, host."""
    from specmon.cli import build_parser
    from specmon.fleet.cli import options_from
    from specmon.tui.app import SpecmonApp
    from specmon.tui.cli import fleet_server_config
    from tests.support.app_harness import screen_text
    from tests.support.app_harness import wait_for as app_wait_for

    prom, servers, address, dcgm = fleet
    args = build_parser().parse_args(["fleet", "--prometheus", prom.url, "--window", "4", "--interval", "10",
                                      "--server", address["killed"]])
    config = await asyncio.to_thread(fleet_server_config, args, options_from(args))
    said = capsys.readouterr().err.splitlines()
    assert [line.split(": ", 2)[-1] for line in said[:2]] == [
        "reading its row from Prometheus…", "asking its address whether it answers from here…"], said
    app = SpecmonApp(config)
    async with app.run_test(size=(80, 24)) as pilot:
        def shown() -> str:
            return screen_text(app)

        assert await app_wait_for(pilot, lambda: "down, last seen" in shown() and "fleet row:" in shown(), 60), \
            shown()
        assert app.main.active_pane == "live" and "nodes 0/1 · 127.0.0.1" in shown(), shown()


async def test_fleet_app_against_the_real_prometheus(fleet):
    from specmon.cli import build_parser
    from specmon.fleet.cli import options_from
    from specmon.tui.cli import fleet_argv
    from specmon.tui.fleet import FleetApp
    from tests.support.app_harness import screen_text
    from tests.support.app_harness import wait_for as app_wait_for

    prom, servers, address, dcgm = fleet
    args = build_parser().parse_args(["fleet", "--prometheus", prom.url, "--window", "4", "--interval", "1"])
    app = FleetApp(options_from(args), fleet_argv(args))
    async with app.run_test(size=(200, 50)) as pilot:
        def shown() -> str:
            return screen_text(app)

        assert await app_wait_for(pilot, lambda: address["eagle3-5"] in shown() and "serving" in shown()
                                  and "down" in shown(), 60), shown()


@needs_tmux
@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
def test_enter_then_q_in_a_server_s_screen_returns_to_the_fleet_in_a_real_terminal(fleet, size):
    """In a real terminal: Enter opens a server's screen (one answering from here, one read through Prometheus),
    q there returns to the fleet, which still takes keys; q then ends it with 0, no traceback printed."""
    prom, servers, address, dcgm = fleet
    env = {"XDG_STATE_HOME": str(STATE["dir"]), "TERM": "xterm-256color"}
    term = Tmux([sys.executable, "-m", "specmon", "fleet", "--prometheus", prom.url, "--window", "4",
                 "--interval", "10"], size, env)
    try:
        for name, opened in (("eagle3-5", f"http://{address['eagle3-5']}"), ("real", "via Prometheus")):
            fleet_screen = term.wait_for(lambda s, n=name: address[n] in s and "servers ·" in s, what="the fleet")
            rows = [line for line in fleet_screen.splitlines() if line.split()[:1] and "127.0.0.1:" in line.split()[0]]
            index = next(i for i, line in enumerate(rows) if address[name] in line)
            term.send("Home", *["Down"] * index, "Enter")
            term.wait_for(lambda s, n=name, o=opened: address[n] in s and o in s and "servers ·" not in s,
                          what=f"{name}'s screen")
            term.send("q")
            term.wait_for(lambda s: "servers ·" in s, what="the fleet again")
        term.send("r")  # the fleet still reads keys
        term.send("q")
        assert term.exit_code() == 0
        assert "Traceback" not in term.screen()
    finally:
        term.kill()
