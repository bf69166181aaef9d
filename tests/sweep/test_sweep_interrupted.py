"""A sweep an SSH drop interrupts is shown where on-call looks next: `specmon ps` (text and JSON) and
attaching (`specmon monitor`), with how far it got, what it would have left serving and how to resume it
(issue 22 item 6). A real sweep, hung up mid-way."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from specmon.ports import free_port_pair
from tests.support.oncall import Oncall, wait_for, write_preset

pytestmark = pytest.mark.timeout(240)


def plan_of(oc: Oncall) -> dict | None:
    plans = sorted((oc.state / "sweeps").glob("*.json")) if (oc.state / "sweeps").is_dir() else []
    return json.loads(plans[-1].read_text()) if plans else None


def test_a_sweep_cut_by_a_hangup_is_shown_by_ps_and_on_attach(oc):
    write_preset(oc.presets, "fast-base", "demo-baseline")
    (oc.presets / "slow-b.toml").write_text(  # starts for minutes: the hang-up lands while it starts
        'name = "slow-b"\nextends = "demo-eagle3-5"\ndemo = true\n[server.args]\nemulator-speed = 0.05\n')
    oc.json("start", "fast-a", "--port", str(free_port_pair()), "--wait")  # the sweep switches this server
    sweep = oc.popen("sweep", "--presets", str(oc.presets), "fast-base", "fast-a", "slow-b", "--requests", "2", "--yes",
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    plan = wait_for(lambda: (p := plan_of(oc)) and p["steps"][1]["state"] != "pending" and p, 120,
                    "the sweep's second step")  # fmt: skip
    assert [s["state"] for s in plan["steps"]] == ["measured", "measured", "pending", "pending"], plan
    running = oc.json("ps")["sweeps"]
    assert [(s["run_id"], s["state"]) for s in running] == [(plan["run_id"], "running")], running
    os.killpg(sweep.pid, signal.SIGHUP)  # the SSH session drops: its process group hangs up
    sweep.wait(timeout=30)

    (shown,) = oc.json("ps")["sweeps"]
    assert shown["state"] == "interrupted" and shown["run_id"] == plan["run_id"], shown
    assert shown["done"] == 2 and shown["next"] == "slow-b" and shown["total"] == 4
    assert shown["resume"] == f"specmon sweep --resume {plan['run_id']}"
    assert shown["would_leave"].endswith("(recommended so far)"), shown
    text = oc.run("ps").stdout
    assert f"sweep interrupted: specmon sweep --resume {plan['run_id']} · 2 of 4 steps done" in text, text

    attach = oc.run("monitor", "--headless", "--duration", "1", timeout=60)
    assert f"sweep interrupted: specmon sweep --resume {plan['run_id']}" in attach.stderr, attach.stderr[-2000:]



def test_attaching_with_no_server_left_still_says_the_interrupted_sweep(oc):
    """A sweep cut between stopping one server and starting the next leaves nothing to attach to: the sweep is
    the reason, so it is said before the error."""
    from specmon.sweep.plan import SweepPlan, SweepStep, SweepStore

    dead = subprocess.Popen(["true"])
    dead.wait()
    plan = SweepPlan("20261202-0000-dead", [SweepStep("base", True, None, state="measured"),
                                            SweepStep("b", False, 5)], runner_pid=dead.pid, runner_started=1.0)
    SweepStore(oc.state / "sweeps").save(plan)
    # a server id nothing answers to: other servers on this machine (other tests') must not be attached
    attach = oc.run("monitor", "--server", "gone-0", "--headless", "--duration", "1", timeout=60)
    assert attach.returncode == 2, attach.stderr
    assert "no running server 'gone-0'" in attach.stderr, attach.stderr
    assert ("sweep interrupted: specmon sweep --resume 20261202-0000-dead · 1 of 2 steps done, next b"
            in attach.stderr), attach.stderr

async def test_the_app_says_the_interrupted_sweep_when_it_starts():
    from tests.support.app_harness import READY_LOG, fixture_app
    from tests.support.app_harness import wait_for as app_wait_for

    notice = "sweep 20261202-0101-ab12 was interrupted: 2 of 4 steps done; resume: specmon sweep --resume x"
    app = fixture_app(READY_LOG, notices=[notice])
    async with app.run_test(size=(200, 50)) as pilot:
        assert await app_wait_for(pilot, lambda: any(n.message == notice for n in app._notifications))
        assert "was interrupted" in str(app.screen.query_one("#bench-progress").render())
