"""specmon.view.state: the header state, live rows, capture and milestones, without a terminal."""

from __future__ import annotations

from pathlib import Path

import pytest

from specmon.launch.presets import load_presets
from specmon.logs.model import Capture, Phase, StartupError, StartupState
from specmon.logs.summary import summarize_stream
from specmon.logs.tracker import StartupTracker
from specmon.serving.poller import ServerStatus
from specmon.serving.spec import SpecSettings
from specmon.view.state import (
    MonitorState,
    ServerView,
    bench_rows,
    failure_notice,
    header_state,
    latest_capture,
    live_rows,
    milestone,
    parse_milestone_specs,
    server_alive,
    spec_rows,
    starting_up,
)

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"


def http(state: str, spec: SpecSettings | None = None) -> ServerStatus:
    return ServerStatus(state, since=0.0, last_error=None, spec=spec, version=None, url="http://h:1", latency_s=0.01)


def spec(draft_tokens: int = 4, algorithm: str | None = "EAGLE3", steps: int = 3) -> SpecSettings:
    return SpecSettings(algorithm, "/models/kimi-k25-eagle3", steps, 1, draft_tokens, 2.5, None, "0.5.16", 1000)


STARTING = StartupState()
CAPTURING = StartupState(
    phases=[Phase("capture_target")], captures=[Capture("target", "running", done=3, total=8)]
)
CAPTURING_DRAFT = StartupState(
    phases=[Phase("capture_draft")],
    captures=[Capture("target", "done", 8, 8), Capture("draft", "running", done=3, total=8, eta_s=12.0,
                                                        label="draft decode")],
)
CAPTURE_GAP = StartupState(phases=[Phase("capture_target")], captures=[Capture("target", "done", 8, 8)])
READY = StartupState(state="ready")
FAILED = StartupState(state="failed", error=StartupError("cuda_oom", "out of memory"))
STOPPED = StartupState(state="stopped")


@pytest.mark.parametrize(
    ("view", "expected"),
    [
        (ServerView(STARTING), "starting"),
        (ServerView(STARTING, http=http("unreachable")), "starting"),
        (ServerView(STARTING, http=http("starting")), "warming up"),
        (ServerView(CAPTURING), "capturing target 3/8"),
        (ServerView(CAPTURING_DRAFT), "capturing draft decode 3/8 · ETA 12.0s"),
        (ServerView(CAPTURE_GAP), "capturing"),
        (ServerView(READY), "ready"),
        (ServerView(READY, http=http("starting")), "warming up"),
        (ServerView(READY, http=http("ready")), "ready"),
        (ServerView(READY, http=http("unreachable")), "unreachable"),
        (ServerView(READY, http=http("unhealthy")), "unhealthy"),
        (ServerView(STARTING, http=http("unreachable"), following_log=False), "unreachable"),
        (ServerView(STARTING, http=http("ready")), "ready"),
        (ServerView(FAILED, http=http("ready")), "failed"),
        (ServerView(STOPPED), "stopped"),
        (ServerView(READY, http=http("ready"), process_exit_code=1), "stopped"),
        (ServerView(CAPTURING, switching_to="eagle3-5"), "switching"),
    ],
)
def test_header_state(view: ServerView, expected: str) -> None:
    assert header_state(view) == expected


@pytest.mark.parametrize(
    ("view", "expected"),
    [
        (ServerView(STARTING, http=http("unreachable")), True),  # the log says it starts: no answer is normal
        (ServerView(CAPTURING), True),
        (ServerView(READY, http=http("starting")), True),  # warming up
        (ServerView(READY, http=http("unreachable"), switching_to="eagle3-5"), True),
        (ServerView(STARTING, http=http("unreachable"), following_log=False), False),  # nothing says it starts
        (ServerView(READY, http=http("unreachable")), False),
        (ServerView(STARTING, http=http("unreachable"), exited=True), False),
        (ServerView(STARTING, process_exit_code=1), False),
        (ServerView(FAILED), False),
    ],
)
def test_starting_up(view: ServerView, expected: bool) -> None:
    """What the Live view calls "starting" (not "unreachable") and the Server pane "HTTP not up yet"."""
    assert starting_up(view) is expected


@pytest.mark.parametrize(
    ("state", "expected"),
    [("ready", "ready"), ("failed", "failed"), ("capturing 2/8", "capture"), ("capturing", "capture"),
     ("starting", None), ("warming up", None), ("unreachable", None)],
)  # fmt: skip
def test_milestone(state: str, expected: str | None) -> None:
    assert milestone(state) == expected


def test_latest_capture_prefers_the_running_one() -> None:
    first, second = Capture("target", "running", 2, 8), Capture("draft", "done", 8, 8)
    assert latest_capture(StartupState(captures=[first, second])) is first
    assert latest_capture(StartupState(captures=[Capture("target", "done", 8, 8), second])) is second
    assert latest_capture(StartupState()) is None


def test_latest_capture_of_a_real_log_is_its_last_finished_capture() -> None:
    tracker = StartupTracker()
    with (LOGS / "h200-0.5.16-standalone-ready.log").open("rb") as stream:
        summarize_stream(stream, tracker)
    capture = latest_capture(tracker.state)
    assert capture is tracker.state.captures[-1] and capture.status == "done"


def test_spec_rows_show_what_sglang_changed_from_the_preset() -> None:
    preset = load_presets([]).get("eagle3-16")
    rows, notes = spec_rows(spec(draft_tokens=2, steps=15), preset)
    assert ("version", "0.5.16") in rows
    assert any(label == "speculative" and "draft tokens 2" in value for label, value in rows)
    assert ("num draft tokens: 16 asked, 2 effective", "bold yellow") in notes
    rows, notes = spec_rows(spec(draft_tokens=16, steps=15), preset)
    assert not any("asked" in text for text, _ in notes)


def test_spec_rows_without_speculation() -> None:
    assert spec_rows(spec(algorithm=None), None) == ([("version", "0.5.16"), ("speculative", "off")], [])
    assert spec_rows(None, None) == ([], [])


def test_live_rows_while_starting_and_when_gone() -> None:
    rows, notes = live_rows(ServerView(STARTING, http=http("unreachable")))
    assert rows == [("health", "HTTP not up yet (the server is starting)")] and notes == []
    rows, notes = live_rows(ServerView(READY, http=http("unreachable")))
    assert notes and notes[0][0].startswith("Server unreachable at http://h:1") and notes[0][1] == "bold red"
    assert live_rows(ServerView(STARTING))[0] == [("server", "checking…")]
    assert live_rows(ServerView(STARTING, polling=False)) == ([], [])


def test_live_rows_hide_stale_settings_and_show_the_exit_code() -> None:
    rows, _ = live_rows(ServerView(READY, http=http("ready", spec()), spec_stale=True))
    assert not any(label == "speculative" for label, _ in rows)
    _, notes = live_rows(ServerView(READY, http=http("ready", spec()), process_exit_code=137))
    assert ("Server process exited with code 137", "bold red") in notes


def test_monitor_state_runs_the_sanity_check_once_per_server_run() -> None:
    watch = MonitorState()
    assert not watch.sanity_due(0)  # not ready yet
    watch.http_changed(http("ready"))
    assert watch.sanity_due(0) and watch.sanity == ("sanity check: one short generation…", "dim")
    assert not watch.sanity_due(0)
    watch.sanity_checked("sanity check: 64 tokens", ok=True)
    assert watch.sanity == ("sanity check: 64 tokens", "bold green")
    assert watch.sanity_due(1)  # a new run of the server


def test_monitor_state_switch_forgets_the_old_server() -> None:
    presets = load_presets([])
    watch = MonitorState(preset=presets.get("eagle3-10"))
    watch.http_changed(http("ready", spec()))
    watch.begin_switch("eagle3-5")
    assert watch.preset_name == "eagle3-5" and watch.http is None and watch.spec_stale
    assert header_state(watch.view(READY, True, True, None)) == "switching"
    watch.end_switch(presets.get("eagle3-5"))
    assert watch.preset_name == "eagle3-5" and watch.switching_to is None
    watch.http_changed(http("ready"))
    assert not watch.spec_stale
    watch.begin_switch("baseline")
    watch.end_switch(None)  # failed: the preset stays
    assert watch.preset_name == "eagle3-5"


def test_monitor_state_reports_each_wanted_milestone_once() -> None:
    watch = MonitorState()
    assert watch.new_milestone("capturing 1/8", {"ready"}) is None
    assert watch.new_milestone("capturing 1/8", {"capture", "ready"}) == "capture"
    assert watch.new_milestone("capturing 2/8", {"capture", "ready"}) is None
    assert watch.new_milestone("ready", {"capture", "ready"}) == "ready"


def test_server_alive() -> None:
    assert server_alive(True, None)
    assert server_alive(False, http("starting"))
    assert not server_alive(False, http("unreachable"))
    assert not server_alive(False, None)


def test_parse_milestone_specs() -> None:
    assert parse_milestone_specs(["ready:/tmp/r.svg", "capture:m.svg"]) == {"ready": "/tmp/r.svg", "capture": "m.svg"}
    for bad in (["done:/x.svg"], ["ready"], ["ready:"]):
        with pytest.raises(ValueError, match="EVENT:PATH"):
            parse_milestone_specs(bad)


@pytest.mark.parametrize(
    ("statuses", "restarts"),
    [
        (["ready", "ready", "ready"], 0),  # live figures change; not a restart
        (["ready", "unreachable", "starting", "ready"], 1),  # went away and came back
        (["starting", "ready"], 0),  # the first run getting ready
        (["ready", "starting", "ready", "unreachable", "ready"], 2),
        (["ready", ("ready", 9)], 1),  # other settings in /server_info: another server
    ],
)
def test_monitor_state_sees_a_restart_over_http(statuses, restarts) -> None:
    watch = MonitorState()
    seen = 0
    for item in statuses:
        state, draft = item if isinstance(item, tuple) else (item, 4)
        seen += watch.http_changed(http(state, spec(draft) if state == "ready" else None))
    assert seen == restarts == watch.restarts


def test_a_restart_seen_over_http_makes_the_sanity_check_due_again() -> None:
    watch = MonitorState()
    watch.http_changed(http("ready", spec()))
    assert watch.sanity_due(0)
    watch.http_changed(http("unreachable"))
    assert watch.http_changed(http("ready", spec())) and watch.sanity is None
    assert watch.sanity_due(0)


def test_a_restart_is_noted_in_the_server_pane() -> None:
    watch = MonitorState()
    assert not any("restarted" in text for text, _ in live_rows(watch.view(READY, True, True, None))[1])
    _, notes = live_rows(watch.view(READY, True, True, None, log_restarts=1))
    assert ("Server restarted once since attach: showing the latest run", "bold yellow") in notes
    watch.http_changed(http("ready", spec()))
    watch.http_changed(http("unreachable"))
    watch.http_changed(http("ready", spec()))
    _, notes = live_rows(watch.view(READY, True, True, None, log_restarts=1))
    assert sum("restarted once" in text for text, _ in notes) == 1  # the same restart, seen twice


OOM = StartupError("cuda_oom", "CUDA out of memory", hint="lower --mem-fraction-static")
OOM_REFINED = StartupError("cuda_oom", "CUDA out of memory", hint="lower --mem-fraction-static (now 0.85)")


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ([(0, None)], [None]),
        ([(0, OOM)], [(("Startup failed: cuda oom", "lower --mem-fraction-static"), False)]),
        ([(0, OOM), (0, OOM), (0, OOM)], [(("Startup failed: cuda oom", "lower --mem-fraction-static"), False),
                                          None, None]),
        ([(0, OOM), (0, OOM_REFINED)], [(failure_notice(OOM), False), (failure_notice(OOM_REFINED), True)]),
        ([(0, OOM), (1, OOM)], [(failure_notice(OOM), False), (failure_notice(OOM), False)]),
        ([(0, StartupError("killed", "the server was killed"))],
         [(("Startup failed: killed", "the server was killed"), False)]),
    ],
)
def test_a_failed_startup_gives_one_notification_with_the_panels_diagnosis(steps, expected):
    watch = MonitorState()
    assert [watch.failure_notice(generation, error) for generation, error in steps] == expected


def _run(run_id: str, preset: str, status: str):
    from specmon.bench.model import BenchResult

    return BenchResult(run_id=run_id, preset=preset, url="u", started_at=0.0, status=status)


@pytest.mark.parametrize(
    ("runs", "expected"),
    [
        ([("1", "base", "finished")], {"base": ("1", 1)}),
        ([("1", "base", "finished"), ("2", "base", "cancelled")], {"base": ("1", 1)}),
        ([("1", "base", "finished"), ("2", "base", "failed"), ("3", "base", "finished")], {"base": ("3", 2)}),
        ([("1", "e5", "cancelled")], {"e5": ("1", 0)}),
        ([("1", "e5", "failed"), ("2", "e5", "cancelled")], {"e5": ("2", 0)}),
        ([("1", "base", "finished"), ("2", "e5", "cancelled")], {"base": ("1", 1), "e5": ("2", 0)}),
    ],
)
def test_bench_rows_never_let_a_cancelled_run_hide_a_finished_one(runs, expected):
    rows = bench_rows([_run(*run) for run in runs])
    assert {preset: (result.run_id, count) for preset, (result, count) in rows.items()} == expected


def test_a_flag_the_preset_leaves_out_is_not_asked() -> None:
    plain = SpecSettings(None, None, None, None, None, None, None, "0.5.16", 1000)
    assert plain.requested_vs_effective({"speculative-algorithm": False, "speculative-num-steps": None}) == []
    eagle = spec(draft_tokens=4)
    (diff,) = eagle.requested_vs_effective({"speculative-num-draft-tokens": 16, "speculative-eagle-topk": False})
    assert (diff.requested, diff.effective) == (16, 4)
