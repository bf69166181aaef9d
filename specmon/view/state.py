"""What the app shows about the server, worked out from plain state: the header's state, the live rows and
notes of the Server pane, the capture to show and the milestones of headless runs. UI-free (no Textual), so
every rule here is tested without a terminal.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specmon.units import format_seconds

if TYPE_CHECKING:
    from specmon.bench.model import BenchResult
    from specmon.launch.presets import Preset
    from specmon.logs.model import Capture, StartupError, StartupState
    from specmon.serving.poller import ServerStatus
    from specmon.serving.spec import SpecSettings

Row = tuple[str, str]
"""A label and its value."""
Note = tuple[str, str]
"""A line of text and its Rich style."""

MILESTONES = ("capture", "ready", "failed")


@dataclass(frozen=True)
class ServerView:
    """Everything the app knows about the server at one moment, as plain values."""

    startup: StartupState
    """What the log said (the StartupTracker's state)."""
    http: ServerStatus | None = None
    """The poller's latest status; None before its first answer."""
    polling: bool = True
    """Whether the app polls the HTTP API at all."""
    following_log: bool = True
    """Whether a log is followed (without one, HTTP alone says how the server is)."""
    switching_to: str | None = None
    """The preset a switch is under way to."""
    process_exit_code: int | None = None
    """The launched server's exit code once it exited; None while it runs, or when specmon did not launch it."""
    exited: bool = False
    """The followed server's process (specmon knows its pid) is gone: "exited", not "unreachable"."""
    spec_stale: bool = False
    """The poller still reports the previous server's speculative settings (during a switch)."""
    preset: Preset | None = None
    sanity: Note | None = None
    restarts: int = 0
    """Restarts seen since specmon attached (in the log or over HTTP): the timeline shows the latest run."""
    watched_through: str | None = None
    """What the server is read through when not over its own HTTP API (e.g. "Prometheus")."""
    """The last sanity check's one-line summary and style."""


def run_identity(spec: Any) -> tuple[Any, ...]:
    """What only a restart changes in /server_info's settings (not its live figures)."""
    return tuple(getattr(spec, name, None) for name in (
        "algorithm", "draft_model_path", "num_steps", "eagle_topk", "num_draft_tokens", "version",
        "max_total_num_tokens", "model_path"))  # fmt: skip


@dataclass
class MonitorState:
    """What the app knows of the server besides its log: the HTTP status, a switch under way, the sanity check
    and the milestones already reached. Changed only through its methods, on the UI thread."""

    preset: Preset | None = None
    http: ServerStatus | None = None
    switching_to: str | None = None
    target: Preset | None = None
    """The preset a switch under way goes to: the new server is compared with it, never with the old one."""
    spec_stale: bool = False
    sanity: Note | None = None
    sanity_for: int = -1
    """The log generation (one per server run) the sanity check last ran for."""
    milestones_seen: set[str] = field(default_factory=set)
    exited: bool = False
    """The followed server's process is gone (checked by pid and start time when HTTP stops answering)."""
    restarts: int = 0
    """Restarts seen over HTTP: ready, then away (or warming up again), then ready; or other settings."""
    _away_after_ready: bool = False
    failure_notified: tuple[int, Notice] | None = None
    """The log generation and the notice of the last startup-failure notification."""
    watched_through: str | None = None
    """What the server is read through when not over its own HTTP API (e.g. "Prometheus")."""

    def failure_notice(self, generation: int, error: StartupError | None) -> tuple[Notice, bool] | None:
        """The notification to give for a failed startup, and whether it replaces an earlier one of this run.

        None when there is nothing new: one notification per server run, replaced only when the diagnosis
        (the one the error panel shows) changed.
        """
        if error is None:
            return None
        notice = failure_notice(error)
        earlier = self.failure_notified
        if earlier == (generation, notice):
            return None
        self.failure_notified = (generation, notice)
        return notice, earlier is not None and earlier[0] == generation

    def http_changed(self, http: ServerStatus) -> bool:
        """Take the poller's new status; True when it shows that the server restarted (a new run)."""
        previous, self.http = self.http, http
        restarted = False
        if previous is not None and previous.state == "ready" and http.state in ("unreachable", "starting"):
            self._away_after_ready = True
        if http.state == "ready":
            self.spec_stale = False
            before = previous.spec if previous is not None and previous.state == "ready" else None
            changed = before is not None and http.spec is not None and run_identity(before) != run_identity(http.spec)
            restarted = self._away_after_ready or changed
            self._away_after_ready = False
        if restarted and self.switching_to is None:
            self.restarts += 1
            self.sanity, self.sanity_for = None, -1
            return True
        return False

    def begin_switch(self, name: str, preset: Preset | None = None) -> None:
        """A switch to preset ``name`` starts: the old server's HTTP state and settings no longer count, and what
        comes up is compared with ``preset``."""
        self.switching_to = name
        self.exited = False
        self.target = preset
        self.spec_stale = True  # the poller keeps the old server's settings until the new one is ready
        self.sanity = None
        self.http = None

    def end_switch(self, preset: Preset | None) -> None:
        """The switch ended: with the new preset, or None when it failed."""
        self.switching_to = None
        self.target = None
        if preset is not None:
            self.preset = preset

    def server_replaced(self, preset: Preset | None) -> None:
        """Another server took the followed one's place (a restart or a switch made elsewhere), with ``preset``
        when known: the old one's settings and sanity check no longer count."""
        self.exited = False
        if preset is not None:
            self.preset = preset
        self.spec_stale = True
        self.sanity, self.sanity_for = None, -1

    def sanity_due(self, generation: int) -> bool:
        """Whether the sanity check should run now (once per server run, once it is ready); marks it started."""
        if self.http is None or self.http.state != "ready" or self.sanity_for == generation:
            return False
        self.sanity_for = generation
        self.sanity = ("sanity check: one short generation…", "dim")
        return True

    def sanity_checked(self, summary: str, ok: bool) -> None:
        self.sanity = (summary, "bold green" if ok else "bold red")

    def new_milestone(self, header: str, wanted: Collection[str]) -> str | None:
        """The milestone ``header`` reaches for the first time, if it is one of ``wanted``."""
        reached = milestone(header)
        if reached is None or reached in self.milestones_seen or reached not in wanted:
            return None
        self.milestones_seen.add(reached)
        return reached

    @property
    def serving_preset(self) -> Preset | None:
        """The preset to compare the server with: the one a switch goes to, else the running one."""
        return self.target if self.switching_to is not None and self.target is not None else self.preset

    @property
    def preset_name(self) -> str | None:
        """The preset the header names: the one a switch goes to, else the running one."""
        return self.switching_to or (self.preset.name if self.preset is not None else None)

    def view(
        self,
        startup: StartupState,
        polling: bool,
        following_log: bool,
        process_exit_code: int | None,
        log_restarts: int = 0,
    ) -> ServerView:
        """This state with the log's (``log_restarts``: new startups the log began), as a ``ServerView``."""
        return ServerView(
            startup=startup,
            http=self.http,
            polling=polling,
            following_log=following_log,
            switching_to=self.switching_to,
            process_exit_code=process_exit_code,
            exited=self.exited,
            spec_stale=self.spec_stale,
            preset=self.serving_preset,
            sanity=self.sanity,
            restarts=max(log_restarts, self.restarts),  # a restart shows in both when the log is followed
            watched_through=self.watched_through,
        )


Notice = tuple[str, str]
"""A notification's title and message."""


def failure_notice(error: StartupError) -> Notice:
    """The failure notification: the error panel's title and its hint (or the message, without a hint)."""
    return f"Startup failed: {error.kind.replace('_', ' ')}", error.hint or error.message


def latest_capture(state: StartupState) -> Capture | None:
    """The capture to show: the running one, else the most recent."""
    for capture in reversed(state.captures):
        if capture.status == "running":
            return capture
    return state.captures[-1] if state.captures else None


def header_state(view: ServerView) -> str:
    """The header's state: starting, capturing 5/8, warming up, ready, failed, stopped, unreachable, switching."""
    if view.switching_to is not None:
        return "switching"
    state = view.startup
    http = view.http.state if view.http is not None else None
    if state.state in ("failed", "stopped"):
        return state.state
    if view.process_exit_code is not None:
        return "stopped"
    if view.exited:
        return "exited"
    if http == "ready":
        return "ready"
    if http in ("unreachable", "unhealthy") and (state.state == "ready" or not view.following_log):
        return http
    if state.state == "ready":
        return "ready" if http is None else "warming up"
    capture = latest_capture(state)
    if capture is not None and capture.status == "running":
        return capturing_state(capture)
    phase = state.current_phase
    if phase is not None and phase.name.startswith("capture") and phase.status == "running":
        return "capturing"  # between a bar's last frame and the capture's end line
    if http == "starting":
        return "warming up"
    if view.watched_through and http is None:
        return f"via {view.watched_through}"  # no HTTP, no log: the Live view's figures say how it is
    return "starting"


def capturing_state(capture: Capture) -> str:
    """``capturing draft decode 3/8 · ETA 12s``: the graph that is captured, and an ETA once one is known."""
    name = capture.label or capture.graph.replace("_", " ")
    text = f"capturing {name} {capture.done}/{capture.total or '?'}"
    if capture.eta_s is not None:
        text += f" · ETA {format_seconds(capture.eta_s)}"
    return text


def milestone(state: str) -> str | None:
    """The milestone a header state is at: "capture", "ready", "failed" or None."""
    if state in ("failed", "ready"):
        return state
    return "capture" if state.startswith("capturing") else None


def spec_rows(spec: SpecSettings | None, preset: Preset | None) -> tuple[list[Row], list[Note]]:
    """Rows for the effective speculative settings, and notes where SGLang changed what the preset asked."""
    rows: list[Row] = []
    notes: list[Note] = []
    if spec is None:
        return rows, notes
    if spec.version:
        rows.append(("version", spec.version))
    notes.extend((f"/server_info: {absurd}", "bold red") for absurd in spec.absurd)
    if not spec.enabled:
        rows.append(("speculative", "off"))
        return rows, notes
    rows.append(
        (
            "speculative",
            f"{spec.algorithm} · steps {_shown(spec.num_steps)} · topk {_shown(spec.eagle_topk)} · "
            f"draft tokens {_shown(spec.num_draft_tokens)}",
        )
    )
    if spec.avg_spec_accept_length is not None:
        rows.append(("accept length", f"{spec.avg_spec_accept_length:.2f} (server avg)"))
    if preset is not None:
        for diff in spec.requested_vs_effective(preset.argv()):
            label = diff.name.removeprefix("speculative_").replace("_", " ")
            notes.append((f"{label}: {diff.requested} asked, {diff.effective} effective", "bold yellow"))
    return rows, notes


def _shown(setting: int | None) -> str:
    """A setting as shown: "?" when the server did not say (or said what cannot be true: see the notes)."""
    return "?" if setting is None else str(setting)


def starting_up(view: ServerView) -> bool:
    """Whether the server is starting up: its followed log is in a startup, a switch is under way, or its HTTP
    answers "starting" (warming up); never once its process is gone."""
    if view.exited or view.process_exit_code is not None:
        return False
    http_starting = view.http is not None and view.http.state == "starting"
    return (view.following_log and view.startup.state == "starting") or view.switching_to is not None or http_starting


def live_rows(view: ServerView) -> tuple[list[Row], list[Note]]:
    """The Server pane's live rows (health, version, settings) and its notes (alerts, the sanity check)."""
    rows: list[Row] = []
    notes: list[Note] = []
    status = view.http
    if status is None:
        if view.polling:
            rows.append(("server", "checking…"))
    else:
        health = status.state
        starting = starting_up(view)
        if health == "unreachable" and starting:
            rows.append(("health", "HTTP not up yet (the server is starting)"))
        elif health == "unreachable" and view.exited:
            since = time.strftime("%H:%M:%S", time.localtime(status.since))
            notes.append((f"Server process exited (no answer since {since})", "bold red"))
        elif health == "unreachable":
            since = time.strftime("%H:%M:%S", time.localtime(status.since))
            notes.append((f"Server unreachable at {status.url} since {since}", "bold red"))
        elif health == "unhealthy":
            notes.append((f"Server unhealthy: {status.last_error or 'no answer'}", "bold red"))
        if not (health == "unreachable" and starting):
            latency = f" ({status.latency_s * 1000:.0f} ms)" if status.latency_s is not None else ""
            rows.append(("health", f"{health}{latency}"))
        spec_r, spec_n = spec_rows(None if view.spec_stale else status.spec, view.preset)
        rows.extend(spec_r)
        notes.extend(spec_n)
    if view.sanity is not None:
        notes.append(view.sanity)
    if view.process_exit_code is not None:
        notes.append((f"Server process exited with code {view.process_exit_code}", "bold red"))
    if view.restarts:
        times = "once" if view.restarts == 1 else f"{view.restarts} times"
        notes.append((f"Server restarted {times} since attach: showing the latest run", "bold yellow"))
    return rows, notes


def phase_clock_runs(state: StartupState) -> bool:
    """A startup phase is running: its duration counts on each second, with or without a log line."""
    return state.state == "starting" and any(phase.status == "running" for phase in state.phases)


def gpu_sample_interval(bench_running: bool, header_state: str | None, idle_s: float, busy_s: float = 1.0) -> float:
    """How often the app reads its GPUs: every ``busy_s`` while a benchmark runs or the server is not simply ready
    (starting, failing, gone), every ``idle_s`` while it idles (the GPU pane's repaint is the app's costliest)."""
    return idle_s if not bench_running and header_state == "ready" else busy_s


def server_alive(process_running: bool, http: ServerStatus | None) -> bool:
    """Whether the server is known to be alive now: its process runs, or its HTTP answers."""
    return process_running or (http is not None and http.state != "unreachable")


def parse_milestone_specs(specs: Sequence[str]) -> dict[str, str]:
    """``["ready:/tmp/r.svg", ...]`` as ``{"ready": "/tmp/r.svg"}``; ValueError for an unknown event."""
    shots = {}
    for spec in specs:
        event, _, path = spec.partition(":")
        if event not in MILESTONES or not path:
            raise ValueError(f"--screenshot-at wants EVENT:PATH with EVENT one of {', '.join(MILESTONES)}")
        shots[event] = path
    return shots


def bench_rows(results: Sequence[BenchResult]) -> dict[str, tuple[BenchResult, int]]:
    """Per preset, the run its table row shows and how many finished runs it has.

    The latest finished run; a cancelled or failed run shows only while its preset has no finished run, so
    it never hides or spoils an earlier completed one.
    """
    rows: dict[str, tuple[BenchResult, int]] = {}
    for result in results:
        shown, count = rows.get(result.preset, (None, 0))
        if result.status == "finished":
            rows[result.preset] = (result, count + 1)
        elif shown is None or shown.status != "finished":
            rows[result.preset] = (result, count)
    return rows


def bench_outcome(result: BenchResult, among: Sequence[BenchResult] = ()) -> tuple[str, str, str]:
    """The notification when a benchmark run ends: title, message and severity (an error when it shows a
    symptom specmon exists for: acceptance about 1 on a speculative server, slower than its baseline among the
    finished runs `among`)."""
    from specmon.bench.compare import compare_all
    from specmon.bench.report import symptoms

    finished = [r for r in among if r.status == "finished"]
    comparison = compare_all(finished).get(result.run_id) if finished else None

    if result.status == "cancelled":
        return "Benchmark cancelled", f"{result.preset}: cancelled; earlier runs are kept", "warning"
    if result.status != "finished":
        return "Benchmark failed", "; ".join(result.notes) or "the benchmark failed", "error"
    found = symptoms(result, comparison)
    if found:
        return "Benchmark", f"{result.preset}: " + "; ".join(found.values()), "error"
    return "Benchmark", f"Benchmark finished: {result.preset}", "information"
