"""A notification leaves nothing painted behind once it has expired (issue 22 item 13: a "Benchmark finished"
toast stayed over the speedup column for minutes). What the terminal shows is read back from a real tmux."""

from __future__ import annotations

import sys
import time

import pytest

from tests.support.oncall import Oncall
from tests.support.tmux import Tmux, needs_tmux

pytestmark = [pytest.mark.timeout(180), needs_tmux]


def test_an_expired_benchmark_toast_is_not_left_on_the_terminal(tmp_path):
    oc = Oncall(tmp_path)
    env = {k: v for k, v in oc.env.items() if k in ("SPECMON_STATE_DIR", "XDG_STATE_HOME")}
    term = Tmux([sys.executable, "-m", "specmon", "demo", "--presets", str(oc.presets), "--preset", "fast-a"],
                (80, 24), env)
    try:
        term.wait_for(lambda s: "ready" in s, 60)
        term.send("3")
        term.wait_for(lambda s: "press b to benchmark" in s, 30)
        term.send("b")
        term.wait_for(lambda s: "Benchmark finished" in s, 60)
        shown = time.monotonic()
        term.wait_for(lambda s: "Benchmark finished" not in s, 15)  # a toast lasts 5 s
        assert time.monotonic() - shown < 10
    finally:
        term.kill()
        oc.cleanup()
