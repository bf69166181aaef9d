"""Ctrl+C stops `specmon sweep` after the step under way, as the app's "Cancel the sweep" does: the step is marked
"cancelled", the servers are left as they are (one measuring keeps serving, one starting keeps starting), no other
preset is started, `specmon ps` says "cancelled" with the resume command, and a resume measures the rest; so does
`specmon switch`. A sweep asks before it stops a running server (`--yes` for scripts). Real processes; SIGINT goes
to the CLI's process group, as a terminal sends it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from specmon.ports import free_port_pair
from tests.support.oncall import Oncall, gone, wait_for, write_preset

pytestmark = pytest.mark.timeout(300)


def slow_preset(oc: Oncall, name: str, extends: str, port: int, args: str) -> None:
    """A demo preset with ``args`` as its only emulator speed settings (slow where the test needs a step to last)."""
    (oc.presets / f"{name}.toml").write_text(
        f'name = "{name}"\nextends = "{extends}"\ndemo = true\n[server.args]\nport = {port}\n{args}\n'
        "[bench]\nrequests = 2\nmax-new-tokens = 24\nwarmup = 1\n")


def plan_of(oc: Oncall) -> dict | None:
    plans = sorted((oc.state / "sweeps").glob("*.json")) if (oc.state / "sweeps").is_dir() else []
    return json.loads(plans[-1].read_text()) if plans else None


def alive_servers(oc: Oncall) -> list[dict]:
    return [s for s in oc.json("ps")["servers"] if s["alive"] and s["launched_by_specmon"]]


def ctrl_c(proc: subprocess.Popen) -> tuple[int, str, float, str]:
    """SIGINT to specmon's process group, as a terminal sends it: its exit code, stderr, how long it took to end
    and stdout."""
    sent = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, err, time.monotonic() - sent, out


def test_ctrl_c_while_measuring_cancels_that_step_keeps_its_server_and_resumes(oc: Oncall) -> None:
    port = free_port_pair()
    write_preset(oc.presets, "fast-base", "demo-baseline", f"port = {port}")
    slow_preset(oc, "slow-measure", "demo-eagle3-5", port, "emulator-speed = 40\nemulator-decode-speed = 0.02")
    sweep = oc.popen("sweep", "--presets", str(oc.presets), "fast-base", "slow-measure", stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE, text=True)
    plan = wait_for(lambda: (p := plan_of(oc)) and p["steps"][1]["bench_run_id"] and p, 150,
                    "the sweep measuring its second step")
    assert plan["steps"][1]["state"] == "pending", plan
    code, err, took, out = ctrl_c(sweep)
    assert code == 130, err[-3000:]
    assert f"specmon sweep --resume {plan['run_id']}" in err, err[-3000:]
    assert took < 60, f"it stopped after its step, not after the sweep: {took:.0f} s"
    assert "left serving: slow-measure" in out, out  # what the cancelled step left serving, not "nothing"

    after = plan_of(oc)
    assert [s["state"] for s in after["steps"]] == ["measured", "cancelled", "pending"], after["steps"]
    assert "cancelled" in after["steps"][1]["error"], after["steps"][1]
    serving = alive_servers(oc)
    assert [s["preset"] for s in serving] == ["slow-measure"], "the server measured is left serving, none started"
    (shown,) = oc.json("ps")["sweeps"]
    assert shown["state"] == "cancelled" and shown["done"] == 1 and shown["next"] == "slow-measure", shown
    assert shown["resume"] == f"specmon sweep --resume {plan['run_id']}"
    assert f"sweep cancelled: specmon sweep --resume {plan['run_id']}" in oc.run("ps").stdout

    report = oc.json("sweep", "--presets", str(oc.presets), "--resume", "--yes", timeout=240)
    assert [r["state"] for r in report["presets"]] == ["measured"] * 3, report["presets"]
    assert report["presets"][0]["run_id"] == after["steps"][0]["bench_run_id"], "what was measured is kept"
    assert not report["cancelled"]


def test_ctrl_c_while_a_server_starts_leaves_it_starting_and_starts_nothing_else(oc: Oncall) -> None:
    port = free_port_pair()
    write_preset(oc.presets, "fast-base", "demo-baseline", f"port = {port}")
    slow_preset(oc, "slow-start", "demo-eagle3-5", port, "emulator-speed = 0.05")  # minutes to start
    sweep = oc.popen("sweep", "--presets", str(oc.presets), "fast-base", "slow-start", "--json",
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    starting = wait_for(lambda: [s for s in alive_servers(oc) if s["preset"] == "slow-start"], 150,
                        "the slow preset to be launched")
    code, err, took, _ = ctrl_c(sweep)
    assert code == 130, err[-3000:]
    assert took < 30, f"the wait for ready ended at once, not at ready: {took:.0f} s"
    plan = plan_of(oc)
    assert [s["state"] for s in plan["steps"]] == ["measured", "cancelled", "pending"], plan["steps"]
    assert "left starting" in plan["steps"][1]["error"], plan["steps"][1]
    assert not gone(starting[0]["pid"]), "the starting server is left as it is"
    assert [s["id"] for s in alive_servers(oc)] == [starting[0]["id"]], "no other preset was started"
    assert oc.json("ps")["sweeps"][0]["state"] == "cancelled"


def test_a_sweep_asks_before_it_stops_a_running_server(oc: Oncall) -> None:
    port = free_port_pair()
    write_preset(oc.presets, "fast-base", "demo-baseline", f"port = {port}")
    started = oc.json("start", "fast-a", "--port", str(port), "--wait")
    done = oc.run("sweep", "--presets", str(oc.presets), "fast-base", "fast-a")  # stdin is not a terminal
    assert done.returncode == 2, done.stderr
    assert "give --yes" in done.stderr and started["id"] in done.stderr, done.stderr
    assert [s["id"] for s in alive_servers(oc)] == [started["id"]], "nothing was stopped or started"
    assert plan_of(oc) is None, "nothing was swept"


def test_ctrl_c_during_a_switch_leaves_the_starting_server_as_it_is(oc: Oncall) -> None:
    port = free_port_pair()
    slow_preset(oc, "slow-start", "demo-eagle3-5", port, "emulator-speed = 0.05")  # minutes to start
    oc.json("start", "fast-a", "--port", str(port), "--wait")
    switch = oc.popen("switch", "--presets", str(oc.presets), "slow-start", "--yes", "--json",
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    starting = wait_for(lambda: [s for s in alive_servers(oc) if s["preset"] == "slow-start"], 120,
                        "the slow preset to be launched")
    code, err, took, out = ctrl_c(switch)
    assert code == 130, err[-3000:]
    assert took < 30, f"the wait for ready ended at once, not at ready: {took:.0f} s"
    report = json.loads(out)
    assert report["state"] == "cancelled" and "left starting" in report["error"], report
    assert not gone(starting[0]["pid"]) and [s["id"] for s in alive_servers(oc)] == [starting[0]["id"]]
