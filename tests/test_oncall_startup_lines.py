"""`start --wait`, `switch` and `sweep` say what a starting server is doing: one line per phase and capture
progress, as `log-summary --follow` computes them (issue 22 item 7). A real model takes minutes to start;
silence for that long reads as a hang. Real processes."""

from __future__ import annotations

import re

import pytest

from specmon.ports import free_port_pair
from tests.support.oncall import write_preset

pytestmark = pytest.mark.timeout(240)

PHASE = re.compile(r"^    \d\d:\d\d:\d\d  load_weights +started$", re.M)
CAPTURE = re.compile(r"^    \d\d:\d\d:\d\d  capture target verify +done +\d+/\d+", re.M)


def said_startup(stderr: str) -> bool:
    return bool(PHASE.search(stderr) and CAPTURE.search(stderr))


def test_start_wait_prints_each_phase_and_capture(oc):
    port = free_port_pair()
    for args in ((), ("--json",)):
        done = oc.run("start", "fast-a", "--port", str(port), "--wait", *args)
        assert done.returncode == 0, done.stderr[-2000:]
        assert said_startup(done.stderr), done.stderr
        assert oc.run("stop", "--yes").returncode == 0


def test_switch_and_sweep_print_the_new_servers_startup(oc):
    port = free_port_pair()
    assert oc.run("start", "fast-a", "--port", str(port), "--wait").returncode == 0
    done = oc.run("switch", "fast-b", "--yes", "--requests", "0")
    assert done.returncode == 0 and said_startup(done.stderr), done.stderr
    assert "preflight done" in done.stderr and "stopping…" in done.stderr
    write_preset(oc.presets, "fast-base", "demo-baseline")
    done = oc.run("sweep", "--presets", str(oc.presets), "fast-base", "fast-a", "--requests", "2", "--leave",
                  "none", "--yes")  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(PHASE.findall(done.stderr)) >= 3, done.stderr  # the baseline, fast-a, the baseline again
