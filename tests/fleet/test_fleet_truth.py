"""What a real Prometheus answers, and what `specmon fleet` makes of it: never a figure that cannot be true,
never data dropped without a word, never a request to what nobody named.

One Prometheus scrapes, every second, real SGLang 0.5.16 /metrics captures as servers named in every way a
label allows (spaces, quotes, backslashes, regex characters, Unicode; two names alike for 1,100 characters), a
server reporting 20,000 DP ranks and one 200, a DCGM exporter whose one GPU reads negative free memory, and
targets whose `instance` label carries a path or a user; it evaluates `specmon fleet rules` under a series limit
its rules exceed (so they fail). `fleet` runs as a command, one of them on a clock an hour ahead."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from specmon.cli import build_parser
from specmon.fleet.cli import options_from, snapshot_once
from specmon.fleet.drill import reachable_url
from specmon.ports import free_port
from tests.support.hostile_http import HostileServer, routes_of
from tests.support.oncall import wait_for
from tests.support.prometheus import Job, Prometheus, StaticMetrics

pytestmark = pytest.mark.timeout(300)
CAPTURE = (Path(__file__).parents[1] / "fixtures/real-sglang-0.5.16/eagle3/metrics.txt").read_text()
NAMES = ["a b", 'q"uote', "back\\slash", "dot.star*+?()[]{}|^$", "é☃ ünï", "tab\there", "repl\ufffdaced"]
LONG = "s" * 1100
QUEUED_RECORD = "instance:sglang_num_queue_reqs:sum"


def ranks_metrics(ranks: int) -> str:
    lines = ["# TYPE sglang:num_running_reqs gauge"]
    lines += [f'sglang:num_running_reqs{{dp_rank="{i}",engine_type="unified",tp_rank="0"}} {i % 50}'
              for i in range(ranks)]
    return "\n".join(lines) + "\n"


DCGM = "".join(f'{name}{{gpu="0",UUID="GPU-0",Hostname="127.0.0.1",modelName="NVIDIA H200"}} {value}\n'
               for name, value in (("DCGM_FI_DEV_FB_USED", 120000), ("DCGM_FI_DEV_FB_FREE", -120),
                                   ("DCGM_FI_DEV_GPU_UTIL", 90)))


def limited_rules(tmp: Path) -> Path:
    """`specmon fleet rules` with its recording group limited to 1 series per rule: with two servers, the
    rules that give a series per server fail (health "err"), as under a real limit."""
    text = subprocess.run([sys.executable, "-m", "specmon", "fleet", "rules"], check=True, capture_output=True,
                          text=True).stdout
    rules = yaml.safe_load(text)
    rules["groups"][0]["limit"] = 1
    path = tmp / "rules.yml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False, width=1000))
    return path


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("truth")
    static: list[StaticMetrics] = []

    def serve(text: str) -> str:
        static.append(StaticMetrics(text))
        return static[-1].address

    drill_target = HostileServer(routes_of()).start()
    named = HostileServer(routes_of()).start()
    prometheus = None
    try:
        jobs = [Job("sglang", [serve(CAPTURE), serve(CAPTURE)]),
                Job("ranks", [serve(ranks_metrics(20_000)), serve(ranks_metrics(200))]),
                Job("dcgm", [serve(DCGM)])]
        targets = [serve(CAPTURE) for _ in NAMES]
        labels = {t: {"server": name} for t, name in zip(targets, NAMES, strict=True)}
        down = [f"127.0.0.1:{free_port()}" for _ in NAMES]  # nothing listens: down, their instance asked by name
        labels |= {t: {"server": f"{name} down", "instance": name} for t, name in zip(down, NAMES, strict=True)}
        jobs.append(Job("weird", targets + down, labels=labels))
        targets = [serve(CAPTURE), serve(CAPTURE)]
        jobs.append(Job("longnames", targets, labels={t: {"server": LONG + end} for t, end in zip(targets, "AB", strict=True)}))
        port, other = drill_target.port, named.port
        hostile = {f"127.0.0.1:{port}": {"instance": f"127.0.0.1:{port}/health_generate?x=", "server": "path"},
                   f"localhost:{port}": {"instance": f"x@127.0.0.1:{other}", "server": "user"}}
        jobs.append(Job("drill", list(hostile), labels=hostile))
        prometheus = Prometheus(tmp, jobs, rule_files=[limited_rules(tmp)])
        prometheus.wait_scraped("up", sum(len(job.targets) for job in jobs), minimum=2)
        wait_for(lambda: _rule_health(prometheus, QUEUED_RECORD) == "err", timeout=60, what="the limit to fail a rule")
        yield prometheus, drill_target, named
    finally:
        if prometheus is not None:
            prometheus.stop()
        for server in (drill_target, named):
            server.stop()
        for item in static:
            item.stop()


def _rule_health(prom: Prometheus, record: str) -> str | None:
    groups = httpx.get(prom.url + "/api/v1/rules", timeout=10).json()["data"]["groups"]
    return next((rule.get("health") for group in groups for rule in group["rules"] if rule.get("name") == record), None)


def fleet(prom: Prometheus, *extra: str, python: tuple[str, ...] = ("-m", "specmon"), env=None) -> tuple[int, dict, str]:
    done = subprocess.run([sys.executable, *python, "fleet", "--prometheus", prom.url, "--window", "4", "--once",
                           "--json", *extra], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "XDG_STATE_HOME": "/nonexistent-specmon-state", **(env or {})})
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


def rows(snapshot: dict) -> dict[str, dict]:
    return {row["server"]: row for row in snapshot["servers"]}


def test_this_host_s_clock_an_hour_ahead_still_reads_the_fleet_and_says_the_skew(prom):
    prometheus, _, _ = prom
    ahead = ("-c", "import sys, time; real = time.time; time.time = lambda: real() + 3600; "
                   "from specmon.cli import main; sys.exit(main(sys.argv[1:]))")
    code, snapshot, err = fleet(prometheus, "--selector", 'job="sglang"', python=ahead)
    assert len(snapshot["servers"]) == 2 and {row["state"] for row in snapshot["servers"]} == {"idle"}
    assert "this host's clock is 60 min ahead of Prometheus'" in err


def test_a_selector_that_matches_nothing_is_said_with_the_jobs_there_are(prom):
    prometheus, _, _ = prom
    code, snapshot, err = fleet(prometheus, "--selector", 'job="sglang-prod"')
    assert code == 0 and snapshot["servers"] == []
    said = next(line for line in err.splitlines() if "no target matches" in line)
    assert 'up{job="sglang-prod"}' in said and "'sglang'" in said and "'dcgm'" in said


def test_recording_rules_prometheus_reports_failing_are_not_used_and_said(prom):
    prometheus, _, _ = prom
    code, snapshot, err = fleet(prometheus, "--selector", 'job="sglang"')
    assert f"the recording rule {QUEUED_RECORD} fails in Prometheus" in err and "exceeded limit" in err
    assert [row["queued"] for row in snapshot["servers"]] == [0, 0]  # computed inline from the capture's gauges


def test_a_negative_free_memory_reading_gives_no_gpu_figure(prom):
    """Inline (another GPU selector: no recording rule applies) the framebuffer part is checked; by record (the
    rule gives one series, within the limit) the ratio itself is: over 1 is absurd either way."""
    prometheus, _, _ = prom
    _, snapshot, err = fleet(prometheus, "--selector", 'job="sglang"', "--gpu-selector", 'job="dcgm",gpu="0"')
    assert [row["gpu_memory_used_ratio"] for row in snapshot["servers"]] == [None, None]
    assert "skipped 1 value(s) of DCGM_FI_DEV_FB_FREE (gpu_memory_used_ratio): negative" in err
    _, snapshot, err = fleet(prometheus, "--selector", 'job="sglang"')
    assert [row["gpu_memory_used_ratio"] for row in snapshot["servers"]] == [None, None]
    assert "skipped 1 value(s) of gpu_memory_used_ratio: absurd (over 1)" in err
    assert all(row["gpu_util_min_ratio"] == 0.9 for row in snapshot["servers"])


def test_twenty_thousand_dp_ranks_give_one_line_not_a_page_of_alert(prom):
    prometheus, _, _ = prom
    _, snapshot, err = fleet(prometheus, "--selector", 'job="ranks"')
    by_ranks = sorted(snapshot["servers"], key=lambda row: row["running"] or 0)
    many, two_hundred = by_ranks
    assert many["running"] is None and "20,000 dp_rank values, more than 256: its running requests not used" in err
    assert two_hundred["running"] == sum(i % 50 for i in range(200))
    (imbalance,) = [a["message"] for a in two_hundred["alerts"] if a["kind"] == "dp_imbalance"]
    assert imbalance.endswith("(of 200 ranks)") and len(imbalance) < 200
    assert all(len(a["message"]) < 300 for row in snapshot["servers"] for a in row["alerts"])


def test_servers_and_targets_named_with_any_characters_are_read_whole(prom):
    """Names with spaces, quotes, backslashes, tabs, regex characters and U+FFFD (which Prometheus' lexer takes
    for an invalid byte when it is not escaped) go into the follow-up queries (when the targets that are down
    were last up, asked by their `instance`) as PromQL strings and RE2 literals Prometheus accepts."""
    prometheus, _, _ = prom
    code, snapshot, err = fleet(prometheus, "--selector", 'job="weird"', "--server-label", "server")
    by_name = rows(snapshot)
    assert code == 1 and sorted(by_name) == sorted([*NAMES, *(f"{name} down" for name in NAMES)])
    for name in NAMES:
        assert by_name[name]["state"] == "idle" and by_name[name]["draft_tokens"] == 4
        assert by_name[f"{name} down"]["state"] == "down"


def test_two_servers_alike_for_1100_characters_are_never_merged(prom):
    prometheus, _, _ = prom
    _, snapshot, err = fleet(prometheus, "--selector", 'job="longnames"', "--server-label", "server")
    assert snapshot["servers"] == [] and "series left out of Prometheus' answers: a label over 1024 characters" in err


def test_the_drill_down_asks_only_host_and_port_and_never_the_host_after_a_user(prom):
    """A target's `instance` label with a path (SGLang's /health_generate generates) or a user (`x@host`, which
    would send the request to the host after `@`): Enter's "does it answer from here?" asks `GET /model_info`
    of the label's host and port only, and never the other host."""
    prometheus, drill_target, named = prom
    args = build_parser().parse_args(["fleet", "--prometheus", prometheus.url, "--selector", 'job="drill"',
                                      "--server-label", "server", "--window", "4"])
    snapshot = asyncio.run(snapshot_once(options_from(args), records={}, history=False))
    by_name = {row.server: row for row in snapshot.rows}
    assert set(by_name) == {"path", "user"}
    asked_before = len(drill_target.requests)
    url, notes = reachable_url(by_name["path"].targets)
    assert url == f"http://127.0.0.1:{drill_target.port}" and notes == []
    assert [r.path for r in drill_target.requests[asked_before:] if r.path != "/metrics"] == ["/model_info"]
    url, notes = reachable_url(by_name["user"].targets)
    assert url is None and len(notes) == 1 and notes[0].startswith(f"target '***@127.0.0.1:{named.port}' holds a "
                                                                  "user:password@"), notes
    assert notes[0].endswith(": not contacted"), notes
    assert [r.path for r in named.requests] == []
