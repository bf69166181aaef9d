"""Under --emulator-speed the emulator's log tells its times in wall-clock seconds, like its timestamps: its
progress bars and end lines are scaled, so no phase ends after ready (issue 22 item 15). A real emulator run,
read back by `specmon log-summary --json`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specmon.ports import free_port_pair

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("family", ["new", "legacy"])
def test_no_phase_ends_after_ready_at_ten_times_the_speed(oc, family):
    from tests.support.oncall import write_preset

    write_preset(oc.presets, "speedy", "demo-eagle3-10", f'emulator-log-family = "{family}"')
    started = oc.json("start", "speedy", "--port", str(free_port_pair()), "--wait")
    done = subprocess.run([sys.executable, "-m", "specmon", "log-summary", started["log"], "--json"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    summary = json.loads(done.stdout)
    assert summary["state"] == "ready", summary
    ready = next(p for p in summary["phases"] if p["name"] == "ready")
    late = [(p["name"], p["ended"]) for p in summary["phases"] if p["ended"] and p["ended"] > ready["started"]]
    assert late == [], f"phases ending after ready at {ready['started']}: {late}"
    took = sum(c["elapsed_s"] or 0.0 for c in summary["captures"])
    assert took < summary["ready_after_s"] + 1.0, (took, summary["ready_after_s"])
