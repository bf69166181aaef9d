"""A switch whose new server is stopped (`specmon stop` from another terminal) or dies before the switch ends
says so and fails; it never says "ready" with nothing serving (issue item 12). Real processes and signals."""

from __future__ import annotations

import json
import subprocess

import pytest

from specmon.ports import free_port_pair
from tests.support.oncall import wait_for

pytestmark = pytest.mark.timeout(240)

# The step the stop lands in, and a new preset slow enough there for a `specmon stop` to land in it.
SLOW_IN = {
    "startup": "emulator-warmup-delay = 600",  # never ready while the test runs
    "sanity": "emulator-decode-speed = 0.05",  # its sanity requests decode for minutes
}


def slow_preset(oc, name: str, settings: str) -> None:
    (oc.presets / f"{name}.toml").write_text(
        f'name = "{name}"\nextends = "demo-eagle3-5"\ndemo = true\n'
        f"[server.args]\nemulator-speed = 40\n{settings}\n"
        "[bench]\nrequests = 2\nmax-new-tokens = 64\nwarmup = 0\n"
    )


@pytest.mark.parametrize("step", ["startup", "sanity"])
def test_a_switch_whose_new_server_is_stopped_fails_and_says_so(oc, tmp_path, step):
    slow_preset(oc, "slow", SLOW_IN[step])
    port = free_port_pair()
    first = oc.json("start", "fast-a", "--port", str(port), "--wait")
    err, out = tmp_path / "switch.err", tmp_path / "switch.json"
    with err.open("w") as err_file, out.open("w") as out_file:
        switching = oc.popen("switch", "--presets", str(oc.presets), "slow", "--yes", "--requests", "2", "--json",
                             stdout=out_file, stderr=err_file)
    wait_for(lambda: f"  {step}…" in err.read_text(), 120, f"the switch's {step} step")
    [new] = [r for r in oc.records() if r["id"] != first["id"]]
    stopped = oc.json("stop", new["id"], "--yes")
    assert stopped["stopped"], stopped
    assert switching.wait(120) == 1, err.read_text()[-2000:]
    report = json.loads(out.read_text())
    assert report["state"] == "failed", report
    during = {"startup": "during its startup", "sanity": "during the sanity run"}[step]
    assert report["error"] == (f"the new server (pid {new['pid']}) was stopped (`specmon stop {new['id']}`) "
                               f"{during}; nothing serves at http://127.0.0.1:{port}"), report["error"]
    assert report["steps"][-1] == {**report["steps"][-1], "name": step, "status": "failed"}, report["steps"]
    assert report["sanity"] is None and report["alerts"] == [], report


def test_a_start_wait_whose_server_is_stopped_says_it_was_stopped(oc, tmp_path):
    slow_preset(oc, "slow", SLOW_IN["startup"])
    port = free_port_pair()
    err = tmp_path / "start.err"
    with err.open("w") as err_file:
        starting = oc.popen("start", "--presets", str(oc.presets), "slow", "--port", str(port), "--wait",
                            stdout=subprocess.PIPE, stderr=err_file, text=True)
    [new] = wait_for(lambda: oc.records(), 60, "the start's record")
    wait_for(lambda: "http_server" in err.read_text(), 60, "the server's startup under way")
    assert oc.json("stop", new["id"], "--yes")["stopped"]
    output, _ = starting.communicate(timeout=120)
    assert starting.returncode == 1, output
    assert output.splitlines()[-1].endswith(
        f"the server (pid {new['pid']}) was stopped (`specmon stop {new['id']}`) during its startup; nothing serves "
        f"at http://127.0.0.1:{port}"), output
