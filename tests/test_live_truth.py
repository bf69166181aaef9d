"""What the Live view and the Server pane say is what the server serves now: a switch compares the new server
with the preset it goes to (issue 22 item 8), runs are labelled with what they serve (item 2), traffic that
stopped is not shown as current and a dead process reads as exited (item 3), and percentiles inside one
histogram bucket are a bound, not a figure (item 14)."""

from __future__ import annotations

from specmon.launch.presets import load_presets
from specmon.logs.model import StartupState
from specmon.serving.client import SpecSettings
from specmon.serving.poller import ServerStatus
from specmon.view.state import MonitorState, live_rows

READY = StartupState(state="ready")


def http(state: str, spec: SpecSettings | None = None) -> ServerStatus:
    return ServerStatus(state, since=0.0, last_error=None, spec=spec, version=None, url="http://h:1", latency_s=0.01)


def eagle(steps: int, draft_tokens: int) -> SpecSettings:
    return SpecSettings("EAGLE3", "/models/kimi-k25-eagle3", steps, 1, draft_tokens, 2.5, None, "0.5.16", 1000)


def asked_vs_effective(watch: MonitorState) -> list[str]:
    _, notes = live_rows(watch.view(READY, True, True, None))
    return [text for text, _ in notes if "asked" in text]


def test_during_a_switch_the_new_server_is_compared_with_the_preset_it_goes_to() -> None:
    presets = load_presets([])
    watch = MonitorState(preset=presets.get("eagle3-10"))
    watch.http_changed(http("ready", eagle(9, 10)))
    assert asked_vs_effective(watch) == []
    watch.begin_switch("eagle3-16", presets.get("eagle3-16"))
    watch.http_changed(http("ready", eagle(15, 16)))  # the new server is up; the switch's sanity run goes on
    assert asked_vs_effective(watch) == [], "eagle3-16's server is not eagle3-10's"
    assert watch.serving_preset.name == "eagle3-16"
    watch.end_switch(None)  # it failed after all: the running preset is compared again
    assert watch.serving_preset.name == "eagle3-10"
