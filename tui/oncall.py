"""The app's on-call wiring: switching presets (the demo's supervisor, or `specmon switch`'s core for an attached
server), following an attached server across restarts and switches made elsewhere, and the stored results.

Threads here post messages (``specmon.tui.messages``); the app's handlers call back into this class.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from specmon.oncall import progress
from specmon.tui import messages
from specmon.tui.sweeping import SweepWiring

if TYPE_CHECKING:
    from textual.message import Message
    from textual.screen import Screen

    from specmon.bench.model import BenchResult
    from specmon.bench.results import StoreWatch
    from specmon.bench.run import BenchRun
    from specmon.gpu.model import GpuProcess, GpuSnapshot
    from specmon.launch.presets import Preset
    from specmon.oncall.discovery import FoundServer
    from specmon.tui.config import AppConfig
    from specmon.tui.screens.main import MainScreen
    from specmon.tui.sources import AppSources
    from specmon.view.log_feed import LogFeed
    from specmon.view.state import MonitorState

BENCH_CANCEL_WAIT_S = 10.0
NOTICE_S = 30.0
"""How long a notice given at start (an interrupted sweep) stays."""
LOOK_EVERY_S = 2.0
"""How often the followed server's process is checked (one cheap pid look-up; a process scan only when gone)."""
RESULTS_LOOK_S = 5.0
"""How often the result store is looked at for runs another process (`specmon bench`, a sweep) saved."""
SLOW_LOOK_AFTER = 15
SLOW_LOOK_EVERY = 5
"""After ``SLOW_LOOK_AFTER`` checks without a successor (the server was stopped for good), scan every 5th."""


def _daemon(target, name: str) -> None:
    threading.Thread(target=target, name=name, daemon=True).start()


class OncallHost(Protocol):
    """What the on-call wiring uses of the app: its settings and state, its sources (to follow another log), its
    benchmark, the main screen, and Textual's means to post, ask, notify and run work."""

    config: AppConfig
    server_state: MonitorState
    feed: LogFeed
    sources: AppSources
    bench_run: BenchRun | None
    bench_results: list[BenchResult]
    log_path: str | None

    @property
    def main(self) -> MainScreen: ...

    def render_state(self) -> None: ...

    def current_state(self) -> str: ...

    def flush_feed(self, force: bool = False) -> None: ...

    def post_message(self, message: Message) -> bool: ...

    def push_screen(self, screen: Screen[Any], callback: Callable[[Any], Any] | None = None) -> Any: ...

    def notify(self, message: str, *, title: str = "", severity: Any = "information", timeout: float | None = None,
               markup: bool = True) -> None: ...

    def run_worker(self, work: Any, *args: Any, **kwargs: Any) -> Any: ...

    def set_interval(self, interval: float, callback: Callable[[], Any]) -> Any: ...


class OncallWiring:
    """Preset switching and the attached server's identity for one app."""

    def __init__(self, app: OncallHost) -> None:
        self.app = app
        self.switch: progress.SwitchProgress | None = None
        self.last: dict[str, BenchResult] = {}
        """Each preset's last finished benchmark run (from the result store and this session's runs)."""
        self._lost = False
        self._looking = False
        self._ticks_lost = 0
        self._log_restarts = 0
        self.sweeps = SweepWiring(app, self)
        """The sweep run from the app (its picker, runner thread and progress)."""
        self.gpus: GpuSnapshot | None = None
        """The last GPU snapshot (its leftover processes may be killed from the palette)."""
        self._store_watch: StoreWatch | None = None

    @property
    def attached(self) -> FoundServer | None:
        """The server followed without a supervisor (found by `specmon ps`), if any."""
        config = self.app.config
        return config.attached if config.supervisor is None else None

    def start(self) -> None:
        self.app.run_worker(self._load_results, thread=True, group="results", exit_on_error=False)
        self.app.set_interval(RESULTS_LOOK_S, self._look_for_results)
        if self.attached is not None:
            self.app.set_interval(LOOK_EVERY_S, self._check_alive)
        for notice in self.app.config.notices:  # e.g. a sweep an SSH drop interrupted: how to resume it
            self.app.notify(notice, title="Sweep", severity="warning", timeout=NOTICE_S, markup=False)
            self.app.main.show_bench_note(notice)

    # ----- switching

    def can_switch(self) -> bool:
        config = self.app.config
        if not config.presets:
            return False
        if config.supervisor is not None:
            return True
        return self.attached is not None and self.attached.why_not_signalable() is None

    def pick(self) -> None:
        if not self.can_switch():
            self.app.notify("Preset switching needs a server specmon launched or may signal (your own user)",
                            severity="warning")
            return
        from specmon.tui.screens.preset_picker import PresetPicker

        app = self.app
        current = app.server_state.preset.name if app.server_state.preset is not None else None
        lines = {name: progress.result_line(result) for name, result in self.last.items()}
        app.push_screen(PresetPicker(app.config.presets, current, lines), lambda n: self.switch_to(n) if n else None)

    def switch_to(self, name: str, confirmed: bool = False) -> None:
        """Restart the server with preset ``name`` (asking first while a benchmark runs: it is cancelled)."""
        app = self.app
        preset = app.config.presets.get(name)
        if preset is None or not self.can_switch() or app.server_state.switching_to is not None:
            return
        if self.sweeps.running:
            app.notify("A sweep is running: it switches the presets itself", severity="warning")
            return
        question = None if confirmed else self._switch_question(name)
        if question is not None:
            from specmon.tui.screens.confirm import Confirm

            ask = Confirm(question, default=not self.runs_now(name))  # a restart of what runs: Enter says no
            app.push_screen(ask, lambda yes: self.switch_to(name, confirmed=True) if yes else None)
            return
        app.server_state.begin_switch(name, preset)
        app.sources.stop_following()
        app.feed.reset()
        if app.config.supervisor is None:
            self.switch = progress.SwitchProgress(name)
        app.flush_feed(force=True)  # the log pane clears at once: the new log may not exist yet
        if app.config.supervisor is None:  # a daemon thread: quitting mid-switch must not wait for it
            _daemon(lambda: self._restart(preset, app.bench_run), "switch the attached server")
        else:
            app.run_worker(lambda: self._restart(preset, app.bench_run), thread=True, group="supervisor",
                           exclusive=True, exit_on_error=False)

    def runs_now(self, name: str) -> bool:
        """Whether ``name`` is the preset of a server that runs now (starting, serving: not failed or gone)."""
        app = self.app
        running = app.server_state.preset is not None and app.server_state.preset.name == name
        return running and app.current_state() not in ("failed", "stopped", "exited")

    def _switch_question(self, name: str) -> str | None:
        """What to ask before switching to ``name``: restarting the preset that runs now, or cancelling a
        benchmark (both in one question); None when nothing is lost."""
        benchmark = self.app.bench_run is not None
        if self.runs_now(name):
            cancel = "A benchmark is running: cancel it and restart" if benchmark else "Restart"
            return f"The server already runs {name}. {cancel} it on {name}?"
        return f"A benchmark is running. Cancel it and switch to {name}?" if benchmark else None

    def _restart(self, preset: Preset, bench: BenchRun | None) -> None:
        """On a worker thread: cancel the benchmark, then restart (the supervisor's, or `specmon switch`'s)."""
        post = self.app.post_message
        if bench is not None:  # ends as "cancelled" before its server goes, not as a run of failed requests
            bench.cancel()
            bench.wait(BENCH_CANCEL_WAIT_S)
        supervisor = self.app.config.supervisor
        if supervisor is None:
            from specmon.oncall.switch import switch

            old = self.attached

            def on_step(name: str, status: str, took: float | None) -> None:
                new = self._successor(old) if (name, status) == ("startup", "running") and old else None
                post(messages.SwitchStepped(name, status, took, new))

            report = switch(old, preset, on_step=on_step)
            post(messages.AttachedSwitchFinished(report, self._find(report.id) if report.id else None))
            return
        try:
            supervisor.restart_with(preset)
        except Exception as exc:  # reported in the UI; a check that failed left the old server serving
            kept = f"; {supervisor.preset.name} was not stopped and still serves" if supervisor.is_running else ""
            post(messages.PresetSwitched(preset.name, None, error=f"{exc}{kept}"))
            return
        log_path = supervisor.log_path
        post(messages.PresetSwitched(preset.name, str(log_path) if log_path else None))

    def stepped(self, message: messages.SwitchStepped) -> None:
        if self.switch is not None:
            self.switch.step(message.name, message.status, message.took_s)
        server, app = message.server, self.app
        if server is not None and server.log and server.log != app.log_path:  # its startup, as it happens
            app.sources.stop_following()
            app.log_path = server.log
            app.sources.follow(server.log)

    def attached_switch_finished(self, message: messages.AttachedSwitchFinished) -> None:
        """The switch's outcome goes to the Server pane; the new server (if any) is followed from now on."""
        report, app = message.report, self.app
        if self.switch is not None:
            self.switch.finish(report)
        if message.server is not None:
            app.server_state.end_switch(app.config.presets.get(report.to))
            self.follow(message.server, new_run=False)
        elif report.old_still_serving:  # it failed before stopping anything: the old server's log again
            app.server_state.end_switch(None)
            if app.log_path:
                app.sources.follow(app.log_path)
        else:
            app.server_state.end_switch(None)
            self._lost = True  # whatever runs on the port now (maybe the old server, maybe nothing)
        title = "Preset" if report.state == "ready" else "Preset switch failed"
        text = f"Switched to {report.to}" if report.state == "ready" else report.error or "the switch failed"
        app.notify(text + "".join(f"\n{alert}" for alert in report.alerts), title=title,
                   severity="information" if report.state == "ready" and not report.alerts else "warning",
                   markup=False)

    def lost_track(self) -> None:
        """The server serving now may be another (a sweep or a switch ended): look it up at the next check."""
        self._lost = True

    # ----- GPU memory left over by orphaned SGLang workers: killed by pid, after confirmation, own user only

    def leftovers(self) -> list[GpuProcess]:
        """The killable leftovers of the last GPU snapshot (see ``processes.why_not_killable``)."""
        if self.gpus is None or not self.gpus.available:
            return []
        return [p for p in self.gpus.processes if p.leftover == "orphaned"]

    def ask_kill(self, proc: GpuProcess) -> None:
        from specmon.gpu.processes import why_not_killable
        from specmon.tui.screens.confirm import Confirm

        refused = why_not_killable(proc)
        if refused is not None:
            self.app.notify(refused, title="GPU", severity="warning", markup=False)
            return
        question = (f"Kill pid {proc.pid} ({proc.name[:60]}), an orphaned SGLang worker holding "
                    f"{(proc.used_mib or 0) / 1024:.1f} GiB on GPU {proc.gpu_index}? (SIGTERM, then SIGKILL)")
        self.app.push_screen(Confirm(question), lambda yes: yes and self.app.run_worker(self._kill(proc)))

    async def _kill(self, proc: GpuProcess) -> None:
        import asyncio

        from specmon.gpu.processes import kill_leftover

        outcome = await asyncio.to_thread(kill_leftover, proc)
        self.app.notify(outcome, title="GPU", markup=False)

    # ----- the attached server's identity

    def process_gone(self) -> bool:
        """Whether the followed server's own process is gone (the demo's exited, or the attached one's pid and
        start time no longer run); False when specmon does not know its process."""
        supervisor = self.app.config.supervisor
        if supervisor is not None:
            return supervisor.returncode is not None
        server = self.attached
        if server is None or self.app.server_state.switching_to is not None:
            return False
        from specmon.oncall.stopper import server_process

        return server_process(server) is None

    def restart_seen(self) -> None:
        """The log or HTTP shows a restart: look the server up again (its log and preset may have changed)."""
        if self.attached is not None and self.app.server_state.switching_to is None:
            self._lost = True
            self._look()

    def _check_alive(self) -> None:
        """Every ``LOOK_EVERY_S``: a restart the log began, or the followed process gone, starts a look-up
        (a process scan), repeated while none is found, less often after ``SLOW_LOOK_AFTER`` tries."""
        server = self.attached
        if server is None or self.app.server_state.switching_to is not None:
            return
        if self.app.feed.restarts != self._log_restarts:
            self._log_restarts, self._lost = self.app.feed.restarts, True
        if self._lost:
            self._ticks_lost += 1
            if self._ticks_lost > SLOW_LOOK_AFTER and self._ticks_lost % SLOW_LOOK_EVERY:
                return
        if not self._lost:
            import psutil

            try:
                self._lost = psutil.Process(server.pid).status() == psutil.STATUS_ZOMBIE
            except psutil.Error:
                self._lost = True
            if self._lost and not self.app.server_state.exited:
                self.app.server_state.exited = True
                self.app.render_state()
        if self._lost:
            self._look()

    def _look(self) -> None:
        if self._looking or self.attached is None:
            return
        self._looking = True
        self.app.run_worker(self._look_thread, thread=True, group="look", exit_on_error=False)

    def _look_thread(self) -> None:
        try:
            followed = self.attached
            if followed is None:
                return
            found = self._successor(followed)
            if found is not None:
                self.app.post_message(messages.ServerFound(found))
        finally:
            self._looking = False

    @staticmethod
    def _successor(followed: FoundServer) -> FoundServer | None:
        from specmon.oncall.discovery import find_servers

        with contextlib.suppress(Exception):
            return progress.successor(find_servers(with_gpus=False).alive(), followed)
        return None

    def _find(self, server_id: str) -> FoundServer | None:
        from specmon.oncall.discovery import find_servers

        with contextlib.suppress(Exception):
            found = find_servers(with_gpus=False).find(server_id)
            return found if found is not None and found.alive else None
        return None

    def follow(self, server: FoundServer, new_run: bool = True) -> None:
        """Follow ``server`` from now on: its log (the earlier run kept in history) and its preset."""
        app = self.app
        if app.config.supervisor is not None or app.server_state.switching_to is not None:
            return
        self._lost, self._ticks_lost = False, 0
        app.config.attached = server
        if new_run:
            self.switch = None
            app.server_state.server_replaced(app.config.presets.get(server.preset) if server.preset else None)
        if server.log and server.log != app.log_path:
            app.sources.stop_following()
            if new_run:
                app.feed.next_log()
            app.log_path = server.log
            app.sources.follow(server.log)
        self._log_restarts = app.feed.restarts  # this one is seen
        app.flush_feed(force=True)

    # ----- stored results

    def _load_results(self) -> None:
        from specmon.bench.results import ResultStore, StoreWatch, read_run_file

        store = ResultStore()
        watch = StoreWatch(store)
        results, unreadable = [], 0
        for run_id in watch.prime()[-progress.HISTORY_RUNS :]:
            try:
                results.append(read_run_file(store.path_for(run_id)))
            except (OSError, ValueError):
                unreadable += 1
        results.sort(key=lambda r: r.started_at)
        watch.watch_unfinished([r.run_id for r in results if r.status == "incomplete"])
        self._store_watch = watch
        self.app.post_message(messages.ResultsLoaded(results, progress.skipped_summary(results, unreadable)))

    def _look_for_results(self) -> None:
        """Every ``RESULTS_LOOK_S``: a run another process saved (or finished) since is read on a thread."""
        watch = self._store_watch
        if watch is not None and watch.due():
            self.app.run_worker(self._read_new_results, thread=True, group="results", exclusive=True,
                                exit_on_error=False)

    def _read_new_results(self) -> None:
        watch = self._store_watch
        if watch is None:
            return
        results, unreadable = watch.look()
        if results or unreadable:
            self.app.post_message(messages.ResultsLoaded(results, progress.skipped_summary(results, unreadable)))

    def results_loaded(self, results: list[BenchResult], skipped: str | None = None) -> None:
        """Keep each preset's last result (the picker); watching a server the app did not launch (attached, or
        `--url`), show the runs against its URL or of its preset. What the reader skipped is said once."""
        self.last = progress.last_results([*self.last.values(), *results])
        app = self.app
        if skipped:
            app.notify(skipped, title="Stored results", severity="warning", markup=False)
        if app.config.supervisor is not None:  # a server this app launched has no history yet
            return
        preset = app.server_state.preset
        model = preset.args.get("model-path") if preset is not None else None
        history = progress.history_for(results, app.server_state.preset_name, app.config.url,
                                       model if isinstance(model, str) else None)
        measuring = app.bench_run.result.run_id if app.bench_run is not None else None
        history = [r for r in history if r.run_id != measuring]  # its own run: shown as it finishes
        if history:
            app.bench_results[:] = progress.merged_runs(app.bench_results, history)
            app.main.show_bench_results(list(app.bench_results))

    def bench_finished(self, result: BenchResult) -> None:
        if result.status == "finished" and result.preset:
            self.last[result.preset] = result
