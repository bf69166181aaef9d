"""A switch's "before → after" compares the new server with what served before the switch (its last stored
result and its live figures), not with the new preset's own earlier result; a drop beyond the noise is an
alert and exit 1 (issue 22 item 4). Real servers (the emulator) and real benchmarks."""

from __future__ import annotations

import pytest

from specmon.ports import free_port_pair
from tests.support.oncall import Oncall, write_preset

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def oc(tmp_path):
    env = Oncall(tmp_path)
    write_preset(env.presets, "fast-hi", "demo-eagle3-5", "emulator-accept-prob = 0.95")
    write_preset(env.presets, "fast-lo", "demo-eagle3-5", "emulator-accept-prob = 0.05")
    yield env
    env.cleanup()


def bench(oc: Oncall, url: str, preset: str) -> None:
    done = oc.run("bench", "--presets", str(oc.presets), "--url", url, "--preset", preset, "--requests", "3",
                  "--warmup", "1", "--max-new-tokens", "24", "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_switch_to_a_slower_preset_is_compared_with_what_served_before(oc):
    first = oc.json("start", "fast-lo", "--port", str(free_port_pair()), "--wait")
    bench(oc, first["url"], "fast-lo")
    up = oc.json("switch", "fast-hi", "--yes", "--requests", "2")
    assert up["before"]["preset"] == "fast-lo" and up["before"]["run_id"], up["before"]
    assert up["change_pct"]["decode_tok_s"] > 50, up["change_pct"]
    bench(oc, up["url"], "fast-hi")
    # fast-lo's own earlier result is as slow as it will be now: compared with that, nothing changed.
    down = oc.json("switch", "fast-lo", "--yes", "--requests", "2", expect=1)
    assert down["before"]["preset"] == "fast-hi" and down["previous"]["decode_tok_s"] is not None
    # well slower (fast-hi decodes ~3x fast-lo's; a busy host's CPU time per step narrows it to about -30 %)
    assert down["change_pct"]["decode_tok_s"] < -20, down["change_pct"]
    assert any(a.startswith("decode tok/s fell") and "what served before (fast-hi's run" in a
               for a in down["alerts"]), down["alerts"]  # fmt: skip
    assert set(down["before"]["live"]) == {"accept_length", "last_gen_tok_s"}
    text = oc.run("switch", "fast-lo", "--yes", "--requests", "2")
    assert "before (fast-lo, its run" in text.stdout and "decode tok/s" in text.stdout, text.stdout
