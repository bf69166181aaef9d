"""`--emulator-production-traffic`: the emulator's own production-like mix, seen as a server's clients are seen
(records with their own rids, /metrics, Decode batch lines). `specmon traffic` finds each route's τ in the order
of the emulator's known truth (speed_model.class_accept_prob) and both outlier kinds by rid, and a generic
benchmark is flagged as unrepresentative of that mix while one sampled from its records is not."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from specmon.emulator.launch_args import emulator_flag_problem
from specmon.emulator.speed_model import SpecShape, SpeedModel, class_accept_prob
from specmon.traffic.reader import ReadTally, read_records
from tests.emulator.test_emulator import EAGLE3, launch
from tests.support.oncall import wait_for

pytestmark = pytest.mark.timeout(300)
FAST = ["--emulator-speed", "50", "--emulator-decode-speed", "50"]
RECORDS = 400
DRAIN_S = 3.0


def records_in(export: Path) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in export.glob("*.log")) if export.is_dir() else 0


def traffic(*args: str) -> dict:
    run = subprocess.run([sys.executable, "-m", "specmon", "traffic", *args, "--json"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def bench(url: str, state: str, *args: str) -> dict:
    env = {**os.environ, "SPECMON_STATE_DIR": state}
    run = subprocess.run([sys.executable, "-m", "specmon", "bench", "--url", url, "--requests", "20", "--warmup", "1",
                          "--json", *args], capture_output=True, text=True, timeout=240, env=env)
    assert run.returncode in (0, 1), run.stderr
    return json.loads(run.stdout)


@pytest.fixture(scope="module")
def production(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("production")
    export = tmp / "export"
    emu = launch(tmp, *EAGLE3, *FAST, "--enable-metrics", "--export-metrics-to-file", "--export-metrics-to-file-dir",
                 str(export), "--emulator-production-traffic", "40")
    try:
        emu.wait_ready()
        wait_for(lambda: records_in(export) >= RECORDS, timeout=120, what=f"{RECORDS} production records")
        frozen = tmp / "frozen"  # the records so far: the emulator keeps adding to its own
        shutil.copytree(export, frozen)
        yield emu, frozen
    finally:
        emu.stop()


def test_each_route_has_the_emulators_acceptance_and_both_outlier_kinds_are_found(production):
    emu, export = production
    running = wait_for(lambda: next((line for line in httpx.get(emu.url + "/metrics", timeout=10).text.splitlines()
                                     if line.startswith("sglang:num_running_reqs{") and not line.endswith(" 0.0")),
                                    None), timeout=60, what="production requests running in /metrics")
    assert running
    assert "Decode batch" in emu.log()
    records = [r for r in read_records([str(export)], ReadTally()) if r.rid.startswith("prod-")]
    assert len(records) >= RECORDS - 1  # all but the warmup

    result = traffic(str(export), "--by", "custom_labels.route")
    tau = {c["value"]: c["accept_length"] for c in result["classes"] if c["by"] == "custom_labels.route"}
    shape = SpecShape(3, 1, 4)
    truth = {"code": class_accept_prob(0.75, "code"), "chat": 0.75, "summarize": class_accept_prob(0.75, "long")}
    for route, accept_prob in truth.items():
        assert tau[route] == pytest.approx(SpeedModel(shape, accept_prob).expected_accept_length(), abs=0.2), route
    assert tau["code"] > tau["chat"] > tau["summarize"]

    route = {r.rid: r.params["custom_labels"]["route"] for r in records}
    garbled = {rid for rid, name in route.items() if name == "translate"}
    loops = {rid for rid, name in route.items() if name == "list"}
    assert garbled and loops
    nothing = {o["rid"] for o in result["outliers"] if o["kind"] == "nothing_from_draft"}
    at_maximum = {o["rid"] for o in result["outliers"] if o["kind"] == "at_chain_maximum"}
    assert result["outlier_counts"]["nothing_from_draft"] == len(garbled)
    assert nothing <= garbled and len(nothing) == min(20, len(garbled))
    assert loops & at_maximum and result["outlier_counts"]["at_chain_maximum"] >= len(loops)
    assert all(r.histogram[-1] >= r.verify_ct / 2 for r in records if r.rid in loops)


def test_a_generic_benchmark_is_flagged_against_the_mix_and_one_sampled_from_it_is_not(production, tmp_path):
    emu, export = production
    state = str(tmp_path / "state")
    generic = bench(emu.url, state, "--max-new-tokens", "100", "--against-traffic", str(export))
    check = generic["summary"]["production"]
    assert check["beyond_ci"] and "unrepresentative" in generic["summary"]["flags"], check["text"]
    assert check["benchmark_tau"] < check["production_tau"], check  # no code in the built-in prompts
    assert check["benchmark_shares"].get("code", 0) == 0 and check["production_shares"]["code"] > 0.3, check

    sampled = bench(emu.url, state, "--prompts-from-traffic", str(export))
    check = sampled["summary"]["production"]
    assert not check["beyond_ci"] and "unrepresentative" not in sampled["summary"]["flags"], check


def test_production_pauses_while_another_clients_request_runs(production):
    """A benchmark measures its own requests: while one is in the server, no production request starts (those
    already running finish within DRAIN_S here), and production resumes after."""
    emu, frozen = production
    export = frozen.parent / "export"
    body = {"text": "Describe a quiet harbor town.", "sampling_params": {"max_new_tokens": 80000, "ignore_eos": True}}
    started = time.time()
    assert httpx.post(emu.url + "/generate", json=body, timeout=120).status_code == 200
    ended = time.time()
    assert ended - started > DRAIN_S + 2, "the outside request was too short to tell"
    wait_for(lambda: any(r.finished_ts and r.finished_ts > ended for r in read_records([str(export)], ReadTally())
                         if r.rid.startswith("prod-")), timeout=60, what="production to resume")
    beside = [r.rid for r in read_records([str(export)], ReadTally())
              if r.rid.startswith("prod-") and r.finished_ts and started + DRAIN_S < r.finished_ts < ended]
    assert not beside, beside


def test_without_the_flag_the_emulator_sends_nothing_of_its_own(tmp_path):
    export = tmp_path / "export"
    emu = launch(tmp_path, *EAGLE3, *FAST, "--export-metrics-to-file", "--export-metrics-to-file-dir", str(export))
    try:
        emu.wait_ready()
        body = {"text": "Describe a quiet harbor town.", "sampling_params": {"max_new_tokens": 64}}
        assert httpx.post(emu.url + "/generate", json=body, timeout=60).status_code == 200
        wait_for(lambda: records_in(export) >= 2, what="the warmup's and the request's records")
    finally:
        emu.stop()
    assert records_in(export) == 2
    assert not [r for r in read_records([str(export)], ReadTally()) if r.rid.startswith("prod-")]


@pytest.mark.parametrize("value", ["0", "-1", "51", "nan", "inf", "lots"])
def test_a_rate_out_of_bounds_is_refused(value):
    assert emulator_flag_problem("--emulator-production-traffic", value)


async def test_the_apps_benchmark_pane_flags_a_generic_benchmark_against_the_traffic_it_follows(production, tmp_path,
                                                                                                  monkeypatch):
    """`b` in an app whose Traffic tab follows request records checks the run against them before saving it, so the
    Benchmark pane says FLAG unrepresentative, as `bench --against-traffic` does headless."""
    from specmon.bench.results import ResultStore
    from specmon.tui.app import AppConfig, SpecmonApp
    from tests.support.app_harness import screen_text
    from tests.support.app_harness import wait_for as wait_on

    emu, export = production
    monkeypatch.setenv("SPECMON_STATE_DIR", str(tmp_path / "state"))
    app = SpecmonApp(AppConfig(url=emu.url, emulator=True, sanity_check=False, traffic_paths=[str(export)]))
    async with app.run_test(size=(200, 50)) as pilot:
        assert await wait_on(pilot, lambda: app.current_state() == "ready", 60)
        await pilot.press("b")
        assert await wait_on(pilot, lambda: "FLAG unrepresentative" in screen_text(app), 240), screen_text(app)
        assert not app.bench_running
    (run_id,) = ResultStore().run_ids()
    stored = ResultStore().load(run_id)
    assert stored.summary.production is not None and stored.summary.production.beyond_ci
    assert "unrepresentative" in stored.summary.flags
