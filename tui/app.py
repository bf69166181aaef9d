"""SpecmonApp: wires sources (threads that post messages) to the main screen. What to show is worked out by
the UI-free core (``specmon.view.state``, ``specmon.view.log_feed``); the widgets only render it."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import App, SystemCommand
from textual.screen import Screen

from specmon.logs.model import ServerBecameReady, StartupFailed
from specmon.oncall import progress
from specmon.tui import keys, live, messages, shots, traffic
from specmon.tui.cadence import FlushCadence
from specmon.tui.config import AppConfig
from specmon.tui.oncall import OncallWiring
from specmon.tui.patches.driver import QuietTerminal
from specmon.tui.patches.toasts import RepaintedToasts
from specmon.tui.screens import quit_dialog
from specmon.tui.screens.main import MainScreen
from specmon.tui.sources import AppSources
from specmon.view import state as status
from specmon.view.log_feed import LogFeed

if TYPE_CHECKING:
    from specmon.bench.model import BenchResult
    from specmon.bench.run import BenchRun

DARK_THEME = "textual-dark"
LIGHT_THEME = "textual-light"
FAILURE_NOTICE_S = 20.0
"""How long the startup-failure notification stays (Esc dismisses it at once)."""
READ_ONLY_BENCH_NOTE = "Read-only view: no benchmarks here (run `specmon bench --url URL` in a terminal)."
MILESTONE_SETTLE_S = 1.5
"""A milestone's screenshot waits this long, so the screen shows what came with it (health, settings)."""


class SpecmonApp(QuietTerminal, RepaintedToasts, App[int]):
    """Monitors one SGLang server: its startup log, HTTP state, GPUs and benchmarks."""

    CSS_PATH = "app.tcss"
    TITLE = "specmon"
    BINDINGS = [*keys.BINDINGS]  # a list of Textual's BindingType, as App declares it
    ACTION_HELP = keys.ACTION_HELP

    def __init__(self, config: AppConfig) -> None:
        super().__init__()
        self.config = config
        self.feed = LogFeed(max_pending=config.max_lines)
        self.server_state = status.MonitorState(preset=config.preset, watched_through=config.watched_through)
        self.bench_running = False
        self.bench_results: list[BenchResult] = []
        self.log_path = config.log_path
        self.sources = AppSources(
            config, self.feed, lambda s: self.post_message(messages.ServerStatusChanged(s)),
            lambda s: self.post_message(messages.GpuSampled(s)),
        )
        self.bench_run: BenchRun | None = None
        self.oncall = OncallWiring(self)
        self.cadence = FlushCadence(self.feed, config)
        self._last_header: tuple[str, str | None, str, bool] | None = None
        self._main_screen = MainScreen(max_lines=config.max_lines, id="main")
        self._started = False
        self._rendered_once = False
        self.live = live.LiveWiring(self)
        self.traffic = traffic.TrafficWiring(self)
        self.theme = DARK_THEME
        self._switched_to: str | None = None
        """The preset a switch launched, said "Switched to" once its server is ready."""

    # ----- lifecycle

    def get_default_screen(self) -> Screen:
        return self._main_screen

    @property
    def main(self) -> MainScreen:
        return self._main_screen

    @on(MainScreen.Composed)
    def start_sources(self) -> None:
        """Start following, polling and sampling, once the main screen is composed."""
        if self._started:
            return
        self._started = True
        loop, context = asyncio.get_running_loop(), contextvars.copy_context()  # Textual's timers need its context
        self.cadence.start(self.set_interval, self.set_timer, self.flush_feed,
                           lambda callback: loop.call_soon_threadsafe(callback, context=context))
        self._phase_clock = self.set_interval(1.0, self._tick_running_phase, pause=True)
        if self.log_path:
            self.sources.follow(self.log_path)
        if self.config.poll:
            self.sources.start_poller()
        if self.config.gpu_source is not None:
            self.sources.start_gpu_sampler(self.config.gpu_source)
            self._pace_gpus()  # then at each change of the header's state, and as a benchmark starts and ends
        self.live.start()
        self.traffic.start()
        if self.config.live_source is not None and not self.log_path:
            self.main.show_pane("live")  # a server read through Prometheus: no log, its Live view is all there is
        self.oncall.start()
        if self.config.read_only:
            self.main.show_bench_note(READ_ONLY_BENCH_NOTE)
        self.flush_feed(force=True)
        self.call_after_refresh(freeze_startup_objects)
        if self.config.exit_after_s is not None:
            self.set_timer(self.config.exit_after_s, self._finish_headless)

    def _finish_headless(self) -> None:
        self.flush_feed()
        if self.config.screenshot_path:
            shots.save_svg(self, self.config.screenshot_path)
        self.exit(0)

    def _check_milestones(self, state: str) -> None:
        wanted = {*self.config.screenshots_at, *self.config.exit_on}
        milestone = self.server_state.new_milestone(state, wanted)
        if milestone is not None:
            self.set_timer(MILESTONE_SETTLE_S, lambda: self._reach_milestone(milestone))

    def _reach_milestone(self, milestone: str) -> None:
        self.flush_feed(force=True)
        path = self.config.screenshots_at.get(milestone)
        if path:
            shots.save_svg(self, path)
        if milestone in self.config.exit_on:
            self.exit(1 if milestone == "failed" else 0)

    def on_unmount(self) -> None:
        self.sources.stop()
        self.live.stop()
        self.traffic.stop()
        if self.bench_run is not None:
            self.bench_run.cancel()

    # ----- rendering

    def _ui_ready(self) -> bool:
        """The main screen is composed and the app runs: not before start, and not once its shutdown began (its
        widgets go one by one then, while timers and messages still arrive)."""
        return self._started and self.is_running and self.main.is_attached and self.main.composed

    def flush_feed(self, force: bool = False) -> None:
        """Move pending log lines into the log pane (one batch) and re-render the server state."""
        if not self._ui_ready():
            return
        if not self._rendered_once:
            self._rendered_once = force = True
        if not force and self.cadence.defer():
            return
        batch = self.feed.take()
        if batch.generation != self.cadence.shown_generation:
            self.main.clear_log()
            self.cadence.shown_generation = batch.generation
            force = True
        if not batch.changed and not force:
            return
        if batch.lines:
            self.main.write_log(batch.lines, batch.kinds)
            self.cadence.written()
        if any(isinstance(event, StartupFailed) for event in batch.events):
            self._switched_to = None
            self._notify_failure()
        if any(isinstance(event, ServerBecameReady) for event in batch.events):
            if self._switched_to is not None:
                self.notify(f"Switched to {self._switched_to}: it is ready", title="Preset")
                self._switched_to = None
            self._maybe_sanity_check()
        self.render_state()

    def _notify_failure(self) -> None:
        """One notification per failed run, with the error panel's diagnosis (replaced if it is refined)."""
        with self.feed.lock:
            due = self.server_state.failure_notice(self.cadence.shown_generation, self.feed.state.error)
        if due is not None:
            (title, message), replaces = due
            if replaces:
                self.clear_notifications()
            self.notify(message, title=title, severity="error", timeout=FAILURE_NOTICE_S, markup=False)

    def view(self) -> status.ServerView:
        """The server as the app knows it now; hold ``feed.lock`` while using it (it holds the tracker's state)."""
        supervisor = self.config.supervisor
        exit_code = supervisor.returncode if supervisor is not None else None
        return self.server_state.view(self.feed.state, self.config.poll, bool(self.log_path), exit_code, self.feed.restarts)

    def current_state(self) -> str:
        """The header's state (see ``status.header_state``)."""
        with self.feed.lock:
            return status.header_state(self.view())

    def render_state(self) -> None:
        """Re-render the header and the Server pane from the current state."""
        if not self._ui_ready():
            return
        with self.feed.lock:
            view = self.view()
            rows, notes = status.live_rows(view)
            notes += self.oncall.switch.notes() if self.oncall.switch is not None else []
            self.main.show_server(view.startup, rows, notes, bool(self.log_path), self._running_extra_s())
            header = (self.config.url, self.server_state.preset_name, status.header_state(view), self.config.emulator)
            if status.phase_clock_runs(self.feed.state):
                self._phase_clock.resume()
        if header != self._last_header:
            self._last_header = header
            self.main.show_header(*header)
            self._pace_gpus()
        self._check_milestones(header[2])

    def _running_extra_s(self) -> float:
        """Whole seconds a running phase went past the log's newest stamp (until now only while it is alive)."""
        supervisor = self.config.supervisor
        alive = status.server_alive(supervisor is not None and supervisor.is_running, self.server_state.http)
        return float(int(self.feed.unstamped_s(time.monotonic() if alive else None)))

    def _tick_running_phase(self) -> None:
        """Once a second while a startup phase runs, let its duration count on when the log brings no line; the
        clock sleeps otherwise (``render_state`` wakes it)."""
        with self.feed.lock:
            running = status.phase_clock_runs(self.feed.state)
        if running:
            self.render_state()
        else:
            self._phase_clock.pause()

    # ----- messages from sources

    @on(messages.ServerStatusChanged)
    def _server_status_changed(self, message: messages.ServerStatusChanged) -> None:
        if self.server_state.http_changed(message.status):
            self.oncall.restart_seen()
        if message.status.state == "unreachable" and self.oncall.process_gone():
            self.server_state.exited = True  # within one poll: a dead process is "exited", not "unreachable"
            self.live.refresh()
        self._maybe_sanity_check()
        self.render_state()

    @on(messages.TrafficRead)
    def _traffic_read(self, message: messages.TrafficRead) -> None:
        if self._ui_ready():
            self.main.show_traffic(message.model)

    @on(messages.GpuSampled)
    def _gpu_sampled(self, message: messages.GpuSampled) -> None:
        self.oncall.gpus = message.snapshot
        if self._ui_ready():
            self.main.show_gpus(message.snapshot)

    def _pace_gpus(self) -> None:
        """Idle (ready, no benchmark), the GPUs are read and the GPU pane repainted every ``gpu_idle_refresh_s``."""
        sampler = self.sources.gpu_sampler
        if sampler is not None:
            shown_state = self._last_header[2] if self._last_header is not None else None
            sampler.pace(status.gpu_sample_interval(self.bench_running, shown_state, self.config.gpu_idle_refresh_s))

    @on(messages.BenchProgressed)
    def _bench_progressed(self, message: messages.BenchProgressed) -> None:
        self.main.show_bench_progress(message.progress)

    @on(messages.BenchFinished)
    def _bench_finished(self, message: messages.BenchFinished) -> None:
        self.bench_running = False
        self.bench_run = None
        self._pace_gpus()
        if message.result is not None:
            self.bench_results[:] = progress.merged_runs(self.bench_results, [message.result])
            self.oncall.bench_finished(message.result)
            self.main.show_bench_results(list(self.bench_results))
            finished, among = message.result, list(self.bench_results)
            self.run_worker(lambda: self._say_bench_outcome(finished, among), thread=True, group="bench-outcome",
                            exit_on_error=False)

    def _say_bench_outcome(self, result: BenchResult, among: list[BenchResult]) -> None:
        """On a worker thread (the comparison bootstraps): the notification of a finished run."""
        title, text, severity = status.bench_outcome(result, among=among)
        with contextlib.suppress(RuntimeError):  # the app has gone
            self.call_from_thread(self.notify, text, title=title, severity=severity, markup=False)

    @on(messages.SanityChecked)
    def _sanity_checked(self, message: messages.SanityChecked) -> None:
        self.server_state.sanity_checked(message.summary, message.ok)
        self.render_state()

    @on(messages.PresetSwitched)
    def _preset_switched(self, message: messages.PresetSwitched) -> None:
        self.server_state.end_switch(None if message.error else self.config.presets.get(message.preset_name))
        if message.error:
            self.notify(message.error, title="Preset switch failed", severity="error", markup=False)
            supervisor = self.config.supervisor
            if supervisor is not None and supervisor.is_running and self.log_path:
                self.sources.follow(self.log_path)  # not stopped: its log again, from its start
        else:  # launched, not yet serving: "Switched to" is said once its log says ready
            self._switched_to = message.preset_name
            if message.log_path:
                self.log_path = message.log_path
                self.sources.follow(message.log_path)
        self.render_state()

    # ----- the sanity check after ready (only when specmon launched the server): `specmon check`'s core

    def _maybe_sanity_check(self) -> None:
        if self.config.sanity_check and self.config.supervisor is not None and self.server_state.sanity_due(
            self.feed.generation
        ):
            self._sanity_check()

    @work(exclusive=True, group="sanity", exit_on_error=False)
    async def _sanity_check(self) -> None:
        summary, ok = await self.sources.sanity_check(self.server_state.preset)
        self.post_message(messages.SanityChecked(summary, ok=ok))

    # ----- actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if self.config.read_only and action in ("pick_preset", "run_bench", "screenshot"):  # no files written
            return False
        return action != "pick_preset" or self.oncall.can_switch()

    def action_show_pane(self, pane: str) -> None:
        self.main.show_pane(pane)

    def action_search(self) -> None:
        self.main.open_search()

    def action_search_next(self) -> None:
        self.main.search_again(forward=True)

    def action_search_previous(self) -> None:
        self.main.search_again(forward=False)

    def action_follow_tail(self) -> None:
        self.main.follow_tail()

    def action_toggle_polls(self) -> None:
        self.notify(f"Polling requests {'shown' if self.main.toggle_polls() else 'hidden'}", title="Log")

    def action_toggle_theme(self) -> None:
        self.theme = LIGHT_THEME if self.theme == DARK_THEME else DARK_THEME

    # Replaces Textual's own (which takes a file name and a folder) so that every screenshot goes through
    # shots.save_svg: the signatures differ on purpose.
    def action_screenshot(self) -> None:  # type: ignore[override]
        if (saved := shots.save_svg(self)) is not None:
            self.notify(f"Saved {saved}", title="Screenshot")

    def action_pick_preset(self) -> None:
        self.oncall.pick()

    def switch_preset(self, name: str, confirmed: bool = False) -> None:
        """Restart the server with preset ``name`` (see ``OncallWiring.switch_to``)."""
        self.oncall.switch_to(name, confirmed)

    @on(messages.SwitchStepped)
    def _switch_stepped(self, message: messages.SwitchStepped) -> None:
        self.oncall.stepped(message)
        self.render_state()

    @on(messages.AttachedSwitchFinished)
    def _attached_switch_finished(self, message: messages.AttachedSwitchFinished) -> None:
        self.oncall.attached_switch_finished(message)
        self.render_state()

    @on(messages.ServerFound)
    def _server_found(self, message: messages.ServerFound) -> None:
        self.oncall.follow(message.server)

    @on(messages.SweepProgressed)
    def _sweep_progressed(self, message: messages.SweepProgressed) -> None:
        self.oncall.sweeps.progressed(message)

    @on(messages.SweepFinished)
    def _sweep_finished(self, message: messages.SweepFinished) -> None:
        self.oncall.sweeps.finished(message)

    @on(messages.ResultsLoaded)
    def _results_loaded(self, message: messages.ResultsLoaded) -> None:
        self.oncall.results_loaded(message.results, message.skipped)

    def action_run_bench(self) -> None:
        if self.bench_running:
            self.notify("A benchmark is already running", severity="warning")
            return
        self.main.show_pane("bench")
        self.bench_running = True
        self._pace_gpus()
        self.bench_run = self.sources.start_bench(
            self.server_state.preset, lambda progress: self.post_message(messages.BenchProgressed(progress))
        )
        self._wait_bench(self.bench_run)

    @work(thread=True, group="bench", exit_on_error=False)
    def _wait_bench(self, bench: BenchRun) -> None:
        bench.wait()
        self.post_message(messages.BenchFinished(bench.result))

    # ----- command palette, quitting

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from keys.system_commands(self, super().get_system_commands(screen))

    async def action_quit(self) -> None:
        """Quit; attached to a server found by `specmon ps`, ask whether to leave it running (the default)."""
        if not quit_dialog.ask_before_quit(self, self.config.attached):
            self.exit(self.return_code)


def freeze_startup_objects() -> None:
    """Move everything alive after startup (Textual's DOM, styles, imported modules) out of the cyclic GC's
    reach: a full collection then scans only what the app made since, not the ~90,000 alive at startup."""
    gc.collect()
    gc.freeze()
