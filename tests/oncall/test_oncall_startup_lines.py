"""`start --wait`, `switch` and `sweep` say what a starting server is doing: one line per phase and capture
progress, as `log-summary --follow` computes them (issue 22 item 7). A real model takes minutes to start;
silence for that long reads as a hang. Real processes."""

from __future__ import annotations

import json
import re

import pytest

from specmon.ports import free_port_pair
from tests.support.oncall import write_preset

pytestmark = pytest.mark.timeout(240)

PHASE = re.compile(r"^    \d\d:\d\d:\d\d  load_weights +started$", re.M)
CAPTURE = re.compile(r"^    \d\d:\d\d:\d\d  capture target verify +done +\d+/\d+", re.M)


def said_startup(stderr: str) -> bool:
    return bool(PHASE.search(stderr) and CAPTURE.search(stderr))


READY_TIME = re.compile(r"ready after", re.I)


def test_start_wait_prints_each_phase_and_capture_and_one_time_to_ready(oc):
    port = free_port_pair()
    for args in ((), ("--json",)):
        done = oc.run("start", "fast-a", "--port", str(port), "--wait", *args)
        assert done.returncode == 0, done.stderr[-2000:]
        assert said_startup(done.stderr), done.stderr
        # One figure per fact: the time to ready measured from the launch (the JSON's ready_after_s), not also
        # the log's own "READY after" (first log line to ready line) beside it.
        said = READY_TIME.findall(done.stdout + done.stderr)
        if args:
            assert said == [] and json.loads(done.stdout)["ready_after_s"] > 0, done.stderr
        else:
            assert said == ["ready after"] and re.search(r"^ready after \d+\.\ds$", done.stdout, re.M), done.stdout
        assert oc.run("stop", "--yes").returncode == 0


def test_switch_and_sweep_print_the_new_servers_startup(oc):
    port = free_port_pair()
    assert oc.run("start", "fast-a", "--port", str(port), "--wait").returncode == 0
    done = oc.run("switch", "fast-b", "--yes", "--requests", "0")
    assert done.returncode == 0 and said_startup(done.stderr), done.stderr
    assert not READY_TIME.search(done.stderr), done.stderr  # its startup step's time is the one
    assert "preflight done" in done.stderr and "stopping…" in done.stderr
    write_preset(oc.presets, "fast-base", "demo-baseline")
    done = oc.run("sweep", "--presets", str(oc.presets), "fast-base", "fast-a", "--requests", "2", "--leave",
                  "none", "--yes")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(PHASE.findall(done.stderr)) >= 3, done.stderr  # the baseline, fast-a, the baseline again
    assert "READY after" not in done.stderr, done.stderr  # each "PRESET: ready after X s" is the one
