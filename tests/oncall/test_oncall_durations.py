"""Durations in the on-call and sweep texts have one format, `units.format_seconds` (`0.1s`, `1m16s`): a switch's
step times were printed raw (`0.123 s`) beside `12.3 s` and the sweep's `1m05s`."""

from __future__ import annotations

import re
from types import SimpleNamespace

from specmon.oncall.cli import _switch_text
from specmon.oncall.progress import SwitchProgress
from specmon.oncall.stopper import StopResult
from specmon.oncall.switch import SwitchReport
from specmon.sweep.cli import format_report
from specmon.sweep.report import PresetOutcome, build_report
from specmon.units import format_seconds

TIMES = (0.123, 75.43, 3725.0)
SHOWN = ("0.1s", "1m15s", "1h02m05s")
ANY_DURATION = re.compile(r"\d+(?:\.\d+)? ?(?:s|ms)\b|\d+m\d\ds|\d+h\d\dm\d\ds")


def durations(text: str) -> list[str]:
    return ANY_DURATION.findall(text)


def test_format_seconds_is_the_one_format() -> None:
    assert [format_seconds(t) for t in TIMES] == list(SHOWN)


def test_a_switchs_steps_are_shown_in_it() -> None:
    report = SwitchReport(from_="a", to="b", state="ready",
                          steps=[{"name": n, "took_s": t} for n, t in zip(("preflight", "stopping", "startup"), TIMES,
                                                                         strict=True)])
    assert durations(_switch_text(report)) == list(SHOWN)
    progress = SwitchProgress("b")
    for name, took in zip(("preflight", "stopping", "startup"), TIMES, strict=True):
        progress.step(name, "done", took)
    assert durations(progress.notes()[0][0]) == list(SHOWN)


def test_a_stop_is_shown_in_it() -> None:
    server = SimpleNamespace(id="s1", preset="p", argv=[], pid=1, url="http://127.0.0.1:1", port=1)
    result = StopResult(id="s1", stopped=True, signal="SIGTERM", took_s=TIMES[0], gpus_free_s=TIMES[1], port_free=True)
    assert durations(result.text(server)) == list(SHOWN[:2])


def test_a_sweeps_table_is_shown_in_it() -> None:
    report = build_report("s", [PresetOutcome("base", None, "failed", None, startup_s=TIMES[0], measure_s=TIMES[1],
                                              baseline=True)])
    (row,) = [line for line in format_report(report).splitlines() if line.strip().startswith("base")]
    assert durations(row) == list(SHOWN[:2]), row
