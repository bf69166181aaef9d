"""SpecmonApp: the Textual app. Sources run on threads and post messages; widgets only render."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from specmon.tui.app_feed import LogFeed, follow_log
from specmon.tui.logs.model import ServerBecameReady, StartupFailed
from specmon.tui.messages import (
    BenchFinished,
    BenchProgressed,
    GpuSampled,
    PresetSwitched,
    SanityChecked,
    ServerStatusChanged,
)
from specmon.tui.screens.main import MainScreen
from specmon.widgets.server_pane import ServerPane, latest_capture
from textual import on, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

TRICKLE_LINES = 50
EXIT_SIGNALS = (signal.SIGINT, signal.SIGTERM)
DARK_THEME = "textual-dark"
LIGHT_THEME = "textual-light"


@dataclass
class AppConfig:
    """What the app monitors and what it may control."""

    url: str
    log_path: str | None = None
    preset: Any = None
    """The running server's preset (``specmon.tui.presets.Preset``), when known."""
    presets: dict[str, Any] = field(default_factory=dict)
    """Presets offered for switching (only used with a supervisor)."""
    supervisor: Any = None
    """A ``ServerSupervisor`` when specmon launched the server; None when attached."""
    emulator: bool = False
    poll: bool = True
    """Poll the server's HTTP API (off for fixture-fed snapshot apps)."""
    gpu_source: Any = None
    """A GPU sampler source (``NvmlSource``, ``DemoGpuSource``), or None for no GPU sampling."""
    api_key: str | None = None
    max_lines: int = 10_000
    flush_hz: float = 10.0
    poll_interval_s: float = 1.0
    trickle_s: float = 2.0
    """Once the server is ready, fewer than ``TRICKLE_LINES`` new lines wait up to this long (see flush_feed)."""
    gpu_idle_refresh_s: float = 3.0
    """How often the GPU pane repaints while the server is ready and no benchmark runs (sampling stays 1 s)."""
    sanity_check: bool = True
    exit_after_s: float | None = None
    """Headless runs: exit (code 0) after this many seconds, saving ``screenshot_path`` first."""
    screenshot_path: str | None = None
    screenshots_at: dict[str, str] = field(default_factory=dict)
    """Headless runs: an SVG screenshot the first time the server reaches a milestone ("capture": a graph
    capture is running, "ready": ready and answering, "failed"), event name to path."""
    exit_on: frozenset[str] = frozenset()
    """Headless runs: exit once these milestones are reached and their screenshots saved ("ready" exits 0,
    "failed" exits 1)."""


MILESTONE_SETTLE_S = 1.5
"""A milestone's screenshot waits this long, so the screen shows what came with it (health, settings)."""


def spec_rows(spec, preset) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Rows for the effective speculative settings, and notes where SGLang changed what the preset asked."""
    rows: list[tuple[str, str]] = []
    notes: list[tuple[str, str]] = []
    if spec is None:
        return rows, notes
    if spec.version:
        rows.append(("version", spec.version))
    if not spec.enabled:
        rows.append(("speculative", "off"))
        return rows, notes
    rows.append(
        (
            "speculative",
            f"{spec.algorithm} · steps {spec.num_steps} · topk {spec.eagle_topk} · draft tokens {spec.num_draft_tokens}",
        )
    )
    if spec.avg_spec_accept_length is not None:
        rows.append(("accept length", f"{spec.avg_spec_accept_length:.2f} (server avg)"))
    if preset is not None:
        for diff in spec.requested_vs_effective(preset.argv()):
            label = diff.name.removeprefix("speculative_").replace("_", " ")
            notes.append((f"{label}: {diff.requested} asked, {diff.effective} effective", "bold yellow"))
    return rows, notes


class SpecmonApp(App[int]):
    """Monitors one SGLang server: its startup log, HTTP state, GPUs and benchmarks."""

    CSS_PATH = "app.tcss"
    TITLE = "specmon"
    PANES = Binding.Group("Pane", compact=True)
    SEARCH = Binding.Group("Search", compact=True)
    BINDINGS = [
        Binding("1", "show_pane('server')", "Server", id="pane-server", group=PANES),
        Binding("2", "show_pane('gpus')", "GPUs", id="pane-gpus", group=PANES),
        Binding("3", "show_pane('bench')", "Bench", id="pane-bench", group=PANES),
        Binding("slash", "search", "Search", id="search", group=SEARCH),
        Binding("n", "search_next", "Next match", id="search-next", group=SEARCH),
        Binding("N", "search_previous", "Previous match", id="search-previous", group=SEARCH),
        Binding("f", "follow_tail", "Follow", id="follow-tail"),
        Binding("p", "pick_preset", "Preset", id="pick-preset"),
        Binding("b", "run_bench", "Bench", id="run-bench"),
        Binding("t", "toggle_theme", "Theme", id="toggle-theme"),
        Binding("f8", "screenshot", "Shot", id="screenshot", key_display="F8"),
        Binding("q", "quit", "Quit", id="quit"),
    ]

    ACTION_HELP = {
        "show_pane('server')": ("Show the Server pane", "The startup log, timeline and server state"),
        "show_pane('gpus')": ("Show the GPUs pane", "Per-GPU memory, utilisation and processes"),
        "show_pane('bench')": ("Show the Benchmark pane", "Decode tok/s and acceptance length per preset"),
        "search": ("Search the log", "Find text in the server log (n / N: next / previous)"),
        "search_next": ("Next match", "Jump to the next match of the log search (n)"),
        "search_previous": ("Previous match", "Jump to the previous match of the log search (N)"),
        "follow_tail": ("Follow the log tail", "Jump to the end of the log and keep following it"),
        "pick_preset": ("Switch preset…", "Restart the server with another preset"),
        "run_bench": ("Run the benchmark", "Benchmark the running server with its preset's settings"),
        "toggle_theme": ("Toggle light/dark theme", "Switch between the light and dark themes"),
        "screenshot": ("Save an SVG screenshot", "Write the screen to an SVG file in the current directory"),
    }

    def __init__(self, config: AppConfig) -> None:
        super().__init__()
        self.config = config
        self.feed = LogFeed(max_pending=config.max_lines)
        self.server_status: Any = None
        self.bench_running = False
        self.bench_results: list[Any] = []
        self.sanity_note: tuple[str, str] | None = None
        self.switching_to: str | None = None
        self.preset = config.preset
        self.log_path = config.log_path
        self._follow_stop: threading.Event | None = None
        self._poller: Any = None
        self._gpu_sampler: Any = None
        self._bench: Any = None
        self._shown_generation = self.feed.generation
        self._sanity_requested_for = -1
        self._last_header: tuple | None = None
        self._main_screen: MainScreen | None = None
        self._started = False
        self._milestones_seen: set[str] = set()
        self._gpu_shown_at = 0.0
        self._rendered_once = False
        self._spec_stale = False
        self._log_written_at = 0.0
        self._server_pane: ServerPane | None = None
        self.theme = DARK_THEME

    # ----- lifecycle

    def get_default_screen(self) -> Screen:
        self._main_screen = MainScreen(max_lines=self.config.max_lines, id="main")
        return self._main_screen

    def start_sources(self) -> None:
        """Start following, polling and sampling; called once the main screen is composed."""
        if self._started:
            return
        self._started = True
        self.set_interval(1 / self.config.flush_hz, self.flush_feed)
        self.set_interval(1.0, self._tick_running_phase)
        if self.log_path:
            self._start_following(self.log_path)
        if self.config.poll:
            self._start_poller()
        if self.config.gpu_source is not None:
            self._start_gpu_sampler()
        self.flush_feed(force=True)
        if self.config.exit_after_s is not None:
            self.set_timer(self.config.exit_after_s, self._finish_headless)

    def _finish_headless(self) -> None:
        self.flush_feed()
        if self.config.screenshot_path:
            self._save_svg(self.config.screenshot_path)
        self.exit(0)

    def _save_svg(self, path: str) -> None:
        path = os.path.abspath(path)
        self.save_screenshot(filename=os.path.basename(path), path=os.path.dirname(path))

    @staticmethod
    def _milestone(state: str) -> str | None:
        """The milestone a header state is at: "capture", "ready", "failed" or None."""
        if state in ("failed", "ready"):
            return state
        return "capture" if state.startswith("capturing") else None

    def _check_milestones(self, state: str) -> None:
        milestone = self._milestone(state)
        wanted = milestone in self.config.screenshots_at or milestone in self.config.exit_on
        if milestone is None or milestone in self._milestones_seen or not wanted:
            return
        self._milestones_seen.add(milestone)
        self.set_timer(MILESTONE_SETTLE_S, lambda: self._reach_milestone(milestone))

    def _reach_milestone(self, milestone: str) -> None:
        self.flush_feed(force=True)
        path = self.config.screenshots_at.get(milestone)
        if path:
            self._save_svg(path)
        if milestone in self.config.exit_on:
            self.exit(1 if milestone == "failed" else 0)

    def on_load(self) -> None:
        # SIGINT (kill -INT; Ctrl+C where the terminal sends it) and SIGTERM end the app as q does, even
        # mid-mount, where a KeyboardInterrupt raised inside a handler would end it as a crash (exit code 1).
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not on the main thread, or no signals
            loop = asyncio.get_running_loop()
            for signum in EXIT_SIGNALS:
                loop.add_signal_handler(signum, self.exit, None, 128 + signum)

    def on_unmount(self) -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop = asyncio.get_running_loop()
            for signum in EXIT_SIGNALS:
                loop.remove_signal_handler(signum)
        self._stop_sources()

    def _stop_sources(self) -> None:
        if self._follow_stop is not None:
            self._follow_stop.set()
        for source in (self._poller, self._gpu_sampler):
            if source is not None:
                with contextlib.suppress(Exception):  # stopping must never keep the app from exiting
                    source.stop()
        if self._bench is not None:
            self._bench.cancel()

    def _start_following(self, path: str) -> None:
        if self._follow_stop is not None:
            self._follow_stop.set()
        self._follow_stop = threading.Event()
        self._follow(path, self._follow_stop)

    @work(thread=True, group="log", description="follow the server log")
    def _follow(self, path: str, stop: threading.Event) -> None:
        follow_log(path, self.feed, stop)

    def _start_poller(self) -> None:
        from specmon.tui.serving.poller import ServerPoller

        self._poller = ServerPoller(
            self.config.url,
            lambda status: self.post_message(ServerStatusChanged(status)),
            interval_s=self.config.poll_interval_s,
            api_key=self.config.api_key,
            health_timeout_s=1.5,
        )
        self._poller.start()

    def _start_gpu_sampler(self) -> None:
        from specmon.tui.gpu.sampler import GpuSampler

        self._gpu_sampler = GpuSampler(
            self.config.gpu_source, interval_s=1.0, on_sample=lambda s: self.post_message(GpuSampled(s))
        )
        self._gpu_sampler.start()

    # ----- rendering

    @property
    def main(self) -> MainScreen:
        return self._main_screen

    def _ui_ready(self) -> bool:
        """The main screen is composed and still attached (not before start, not during teardown)."""
        if self._server_pane is None and self._started and self._main_screen is not None:
            panes = self._main_screen.query(ServerPane)
            self._server_pane = panes.first() if panes else None
        return self._server_pane is not None and self._server_pane.is_attached

    def flush_feed(self, force: bool = False) -> None:
        """Move pending log lines into the log pane (one batch) and re-render the server state."""
        if not self._ui_ready():
            return
        if not self._rendered_once:
            self._rendered_once = force = True
        if not force and self._defer_trickle():
            return
        batch = self.feed.take()
        pane = self.main.server_pane
        if batch.generation != self._shown_generation:
            pane.log_view.clear()
            self._shown_generation = batch.generation
            force = True
        if not batch.changed and not force:
            return
        if batch.lines:
            pane.log_view.write_classified(batch.lines, batch.kinds)
            self._log_written_at = time.monotonic()
        for event in batch.events:
            if isinstance(event, StartupFailed):
                self.notify(event.error.hint or event.error.message, title="Startup failed", severity="error")
            elif isinstance(event, ServerBecameReady):
                self._maybe_sanity_check()
        self.render_state()

    def _defer_trickle(self) -> bool:
        """Once ready, a few lines (health checks, access lines) wait up to ``trickle_s`` to be written together.

        Each write repaints the whole log pane; bursts and startup lines are written at once.
        """
        if self.feed.generation != self._shown_generation or self.feed.pending >= TRICKLE_LINES:
            return False
        if time.monotonic() - self._log_written_at >= self.config.trickle_s:
            return False
        with self.feed.lock:  # the follower thread may be feeding the tracker
            return self.feed.state.state == "ready"

    def render_state(self) -> None:
        """Re-render the header and the Server pane from the current state."""
        if not self._ui_ready():
            return
        with self.feed.lock:
            state = self.feed.state
            rows, notes = self._live_rows()
            self.main.server_pane.show(state, rows, notes, bool(self.log_path), self._running_extra_s())
            header = (self.config.url, self._preset_name(), self.current_state(), self.config.emulator)
        if header != self._last_header:
            self._last_header = header
            self.main.header.show(*header)
        self._check_milestones(header[2])

    def _running_extra_s(self) -> float:
        """Whole seconds a running phase went on past the log's newest timestamp (a prefill capture prints only
        \\r frames for a minute): until now while the server is alive (its process runs or its HTTP answers),
        else until the log last grew, so an old log replayed never counts on."""
        supervisor = self.config.supervisor
        status = self.server_status
        alive = (supervisor is not None and supervisor.is_running) or (
            status is not None and status.state != "unreachable"
        )
        return float(int(self.feed.unstamped_s(time.monotonic() if alive else None)))

    def _tick_running_phase(self) -> None:
        """Once a second during startup, let the running phase's duration count on when the log brings no line."""
        with self.feed.lock:
            state = self.feed.state
            running = state.state == "starting" and any(phase.status == "running" for phase in state.phases)
        if running:
            self.render_state()

    def _preset_name(self) -> str | None:
        return self.switching_to or (self.preset.name if self.preset is not None else None)

    def _live_rows(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        rows: list[tuple[str, str]] = []
        notes: list[tuple[str, str]] = []
        status = self.server_status
        if status is None:
            if self.config.poll:
                rows.append(("server", "checking…"))
        else:
            health = status.state
            starting_up = bool(self.log_path) and self.feed.state.state == "starting"
            if health == "unreachable" and starting_up:
                rows.append(("health", "HTTP not up yet (the server is starting)"))
            elif health == "unreachable":
                since = time.strftime("%H:%M:%S", time.localtime(status.since))
                notes.append((f"Server unreachable at {status.url} since {since}", "bold red"))
            elif health == "unhealthy":
                notes.append((f"Server unhealthy: {status.last_error or 'no answer'}", "bold red"))
            if not (health == "unreachable" and starting_up):
                latency = f" ({status.latency_s * 1000:.0f} ms)" if status.latency_s is not None else ""
                rows.append(("health", f"{health}{latency}"))
            spec_r, spec_n = spec_rows(None if self._spec_stale else status.spec, self.preset)
            rows.extend(spec_r)
            notes.extend(spec_n)
        if self.sanity_note is not None:
            notes.append(self.sanity_note)
        if self.config.supervisor is not None and self.config.supervisor.returncode is not None:
            notes.append((f"Server process exited with code {self.config.supervisor.returncode}", "bold red"))
        return rows, notes

    def current_state(self) -> str:
        """The header's state: starting, capturing 5/8, ready, failed, stopped, unreachable, switching."""
        if self.switching_to is not None:
            return "switching"
        state = self.feed.state
        http = self.server_status.state if self.server_status is not None else None
        if state.state == "failed":
            return "failed"
        if state.state == "stopped":
            return "stopped"
        supervisor = self.config.supervisor
        if supervisor is not None and supervisor.returncode is not None:
            return "stopped"
        if http == "ready":
            return "ready"
        if http in ("unreachable", "unhealthy") and (state.state == "ready" or not self.log_path):
            return http
        if state.state == "ready":
            return "ready" if http is None else "warming up"
        capture = latest_capture(state)
        if capture is not None and capture.status == "running":
            return f"capturing {capture.done}/{capture.total or '?'}"
        phase = state.current_phase
        if phase is not None and phase.name.startswith("capture") and phase.status == "running":
            return "capturing"  # between a bar's last frame and the capture's end line
        if http == "starting":
            return "warming up"
        return "starting"

    # ----- messages from sources

    @on(ServerStatusChanged)
    def _server_status_changed(self, message: ServerStatusChanged) -> None:
        self.server_status = message.status
        if message.status.state == "ready":
            self._spec_stale = False
            self._maybe_sanity_check()
        self.render_state()

    @on(GpuSampled)
    def _gpu_sampled(self, message: GpuSampled) -> None:
        # Idle (ready, no benchmark), the GPU pane repaints less often: it is the app's costliest update.
        now = time.monotonic()
        shown_state = self._last_header[2] if self._last_header is not None else None
        idle = not self.bench_running and shown_state == "ready"
        if idle and now - self._gpu_shown_at < self.config.gpu_idle_refresh_s:
            return
        self._gpu_shown_at = now
        self.main.show_gpus(message.snapshot)

    @on(BenchProgressed)
    def _bench_progressed(self, message: BenchProgressed) -> None:
        self.main.show_bench_progress(message.progress)

    @on(BenchFinished)
    def _bench_finished(self, message: BenchFinished) -> None:
        self.bench_running = False
        self._bench = None
        if message.result is not None:
            self.bench_results.append(message.result)
            self.main.show_bench_results(list(self.bench_results))
        if message.error:
            self.notify(message.error, title="Benchmark failed", severity="error")
        else:
            self.notify(f"Benchmark finished: {message.result.preset}", title="Benchmark")

    @on(SanityChecked)
    def _sanity_checked(self, message: SanityChecked) -> None:
        self.sanity_note = (message.summary, "bold green" if message.ok else "bold red")
        self.render_state()

    @on(PresetSwitched)
    def _preset_switched(self, message: PresetSwitched) -> None:
        self.switching_to = None
        if message.error:
            self.notify(message.error, title="Preset switch failed", severity="error")
        else:
            self.preset = self.config.presets.get(message.preset_name, self.preset)
            self.notify(f"Switched to {message.preset_name}", title="Preset")
            if message.log_path:
                self.log_path = message.log_path
                self._start_following(message.log_path)
        self.render_state()

    # ----- sanity check after ready (only when specmon launched the server)

    def _maybe_sanity_check(self) -> None:
        if not self.config.sanity_check or self.config.supervisor is None:
            return
        if self.server_status is None or self.server_status.state != "ready":
            return
        if self._sanity_requested_for == self.feed.generation:
            return
        self._sanity_requested_for = self.feed.generation
        self.sanity_note = ("sanity check: one short generation…", "dim")
        self._sanity_check()

    @work(exclusive=True, group="sanity", exit_on_error=False)
    async def _sanity_check(self) -> None:
        from specmon.tui.serving.client import SGLangClient, SGLangError

        try:
            async with SGLangClient(self.config.url, api_key=self.config.api_key, timeout=30.0) as client:
                result = await client.generate("The capital of France is", max_new_tokens=32)
        except SGLangError as exc:
            self.post_message(SanityChecked(f"sanity check failed: {exc}", ok=False))
            return
        parts = [f"sanity check: {result.completion_tokens} tokens"]
        if result.tokens_per_s is not None:
            parts.append(f"{result.tokens_per_s:.1f} tok/s")
        if result.accept_length is not None:
            parts.append(f"accept length {result.accept_length:.2f}")
        self.post_message(SanityChecked(" · ".join(parts), ok=result.completion_tokens > 0))

    # ----- actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "pick_preset":
            return self.config.supervisor is not None and bool(self.config.presets)
        return True

    def action_show_pane(self, pane: str) -> None:
        self.main.show_pane(pane)

    def action_search(self) -> None:
        self.main.show_pane("server")
        self.main.server_pane.open_search()

    def action_search_next(self) -> None:
        self._search(forward=True)

    def action_search_previous(self) -> None:
        self._search(forward=False)

    def _search(self, forward: bool) -> None:
        log = self.main.server_pane.log_view
        if not log.search_query:
            self.action_search()
            return
        if log.search(log.search_query, forward=forward) is None:
            self.notify(f"No match for {log.search_query!r}", severity="warning")

    def action_follow_tail(self) -> None:
        self.main.server_pane.log_view.follow_tail()

    def action_toggle_theme(self) -> None:
        self.theme = LIGHT_THEME if self.theme == DARK_THEME else DARK_THEME

    def action_screenshot(self) -> None:
        path = self.save_screenshot()
        self.notify(f"Saved {path}", title="Screenshot")

    def action_pick_preset(self) -> None:
        if self.config.supervisor is None or not self.config.presets:
            self.notify("Preset switching needs a server specmon launched (specmon demo)", severity="warning")
            return
        from specmon.tui.screens.preset_picker import PresetPicker

        current = self.preset.name if self.preset is not None else None
        self.push_screen(PresetPicker(self.config.presets, current), self._preset_picked)

    def _preset_picked(self, name: str | None) -> None:
        if name:
            self.switch_preset(name)

    def switch_preset(self, name: str) -> None:
        """Restart the supervised server with preset ``name``; the log pane and tracker start over."""
        preset = self.config.presets.get(name)
        if preset is None or self.config.supervisor is None:
            return
        self.switching_to = name
        self._spec_stale = True  # the poller keeps the old server's settings until the new one is ready
        self.sanity_note = None
        self.server_status = None
        if self._follow_stop is not None:
            self._follow_stop.set()
        self.feed.reset()
        self.render_state()
        self._restart(preset)

    @work(thread=True, exclusive=True, group="supervisor", exit_on_error=False)
    def _restart(self, preset) -> None:
        supervisor = self.config.supervisor
        try:
            supervisor.restart_with(preset)
        except Exception as exc:  # reported in the UI; the old server is gone either way
            self.post_message(PresetSwitched(preset.name, None, error=str(exc)))
            return
        log_path = getattr(supervisor, "log_path", None)
        self.post_message(PresetSwitched(preset.name, str(log_path) if log_path else None))

    def action_run_bench(self) -> None:
        if self.bench_running:
            self.notify("A benchmark is already running", severity="warning")
            return
        from specmon.tui.bench.run import BenchRun

        preset = self.preset
        settings = getattr(preset, "bench", None)
        self.main.show_pane("bench")
        self.bench_running = True
        self._bench = BenchRun(
            self.config.url,
            preset.name if preset is not None else None,
            settings,
            api_key=self.config.api_key,
            on_update=lambda progress: self.post_message(BenchProgressed(progress)),
            gpu_sampler=self._gpu_sampler,
        )
        self._bench.start()
        self._wait_bench(self._bench)

    @work(thread=True, group="bench", exit_on_error=False)
    def _wait_bench(self, bench) -> None:
        error = None
        bench.wait()
        result = bench.result
        if result.status == "failed":
            error = "; ".join(result.notes) or "the benchmark failed"
        self.post_message(BenchFinished(result, error=error))

    # ----- command palette

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for binding in self.BINDINGS:
            action = binding.action
            if action not in self.ACTION_HELP or action == "pick_preset" and not self.check_action(action, ()):
                continue
            title, help_text = self.ACTION_HELP[action]
            yield SystemCommand(title, help_text, lambda a=action: self.run_action(a))
        if self.check_action("pick_preset", ()):
            for name, preset in self.config.presets.items():
                yield SystemCommand(
                    f"Switch preset: {name}",
                    getattr(preset, "description", "") or "Restart the server with this preset",
                    lambda n=name: self.switch_preset(n),
                )
