"""The app's sweep: `specmon sweep`'s runner on a worker thread, its picker, and its progress in the Benchmark pane.
The runner's thread posts messages (``specmon.tui.messages``); the app's handlers call back into this class."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from specmon.oncall import progress
from specmon.tui import messages

if TYPE_CHECKING:
    from textual.message import Message

    from specmon.bench.model import BenchResult
    from specmon.sweep.runner import SweepRunner
    from specmon.tui.oncall import OncallHost, OncallWiring


class SweepWiring:
    """A sweep started from the app over the attached server: asked, run on a thread, followed, cancelled."""

    def __init__(self, app: OncallHost, oncall: OncallWiring) -> None:
        self.app = app
        self.oncall = oncall
        self.running = False
        self._sweep_runner: SweepRunner | None = None

    def can_start(self) -> bool:
        return self.oncall.attached is not None and self.oncall.can_switch() and self.app.server_state.preset is not None

    def ask(self) -> None:
        """Pick among the presets that run this server's launcher and model; start the sweep they make."""
        from specmon.tui.screens.sweep_picker import SweepPicker

        app = self.app
        if not self.can_start() or self.running or app.server_state.switching_to is not None:
            app.notify("A sweep needs an attached server with a known preset, and no switch or sweep running",
                       severity="warning")
            return
        candidates = progress.sweep_candidates(app.config.presets, app.server_state.preset)
        picker = SweepPicker(progress.sweep_choices(candidates, self.oncall.last), self._sweep_problem)
        app.push_screen(picker, self._sweep_picked)

    def _sweep_plan(self, names: list[str]):
        from specmon.sweep.plan import plan_sweep

        return plan_sweep([self.app.config.presets[name] for name in names])

    def _sweep_problem(self, names: list[str]) -> str | None:
        """Why these presets make no sweep (the picker says it and stays open), or None."""
        from specmon.sweep.plan import SweepError

        try:
            self._sweep_plan(names)
        except SweepError as exc:
            return str(exc)
        return None

    def _sweep_picked(self, names: list[str] | None) -> None:
        from specmon.sweep.plan import SweepError

        if not names:
            return
        try:
            plan = self._sweep_plan(names)
        except SweepError as exc:
            self.app.notify(str(exc), title="Sweep", severity="error", markup=False)
            return
        self.start(plan)

    def start(self, plan) -> None:
        self.running = True
        self.app.main.show_pane("bench")
        self.app.main.show_bench_note(f"sweep {plan.run_id}: starting")
        threading.Thread(target=lambda: self._sweep(plan), name="sweep", daemon=True).start()  # quitting mid-sweep leaves it resumable (`--resume`)

    def _sweep(self, plan) -> None:
        """On a worker thread: run the sweep; each event and finished run is posted as it happens."""
        from specmon.bench.results import ResultStore
        from specmon.oncall.state import state_dir
        from specmon.sweep.plan import SweepStore
        from specmon.sweep.runner import SweepRunner

        def post(message: Message) -> None:  # the callbacks' type: what they return is not used
            self.app.post_message(message)

        class PostingStore(ResultStore):
            def finish_run(self, result: BenchResult) -> None:
                super().finish_run(result)
                post(messages.SweepProgressed(f"{result.preset}: benchmark {result.status}", result))

        presets = {s.preset: self.app.config.presets[s.preset] for s in plan.steps}
        runner = SweepRunner(plan, presets, SweepStore(state_dir() / "sweeps"), PostingStore(),
                             on_event=lambda text: post(messages.SweepProgressed(text)),
                             on_progress=lambda progress: post(messages.BenchProgressed(progress)),
                             server=self.oncall.attached)
        self._sweep_runner = runner
        try:
            report = runner.run()
            post(messages.SweepFinished(report, cancelled=not plan.finished))
        except Exception as exc:  # the sweep is saved after each step: `specmon sweep --resume` goes on
            post(messages.SweepFinished(None, f"{type(exc).__name__}: {exc}", run_id=plan.run_id))

    def cancel(self) -> None:
        """Stop the sweep after the step under way (a benchmark measuring is cancelled); resumable later."""
        runner = self._sweep_runner
        if not self.running or runner is None or runner.cancelled:
            return
        runner.cancel()
        self.app.main.show_bench_note("sweep: cancelling after the step under way…")

    def progressed(self, message: messages.SweepProgressed) -> None:
        app = self.app
        app.main.show_bench_note(f"sweep: {message.text}")
        if message.result is not None:
            app.bench_results[:] = progress.merged_runs(app.bench_results, [message.result])
            self.oncall.bench_finished(message.result)
            app.main.show_bench_results(list(app.bench_results))
            app.main.show_bench_note(f"sweep: {message.text}")

    def finished(self, message: messages.SweepFinished) -> None:
        self.running = False
        self._sweep_runner = None
        report = message.report
        # the resume command first: a narrow screen wraps or cuts what follows it, never the command
        if report is None:
            resume = f"specmon sweep --resume {message.run_id}" if message.run_id else "specmon sweep --resume"
            text = f"sweep stopped: {resume} · {message.error}"
        elif message.cancelled:
            measured = sum(1 for row in report.rows if row.get("state") == "measured")
            text = (f"sweep cancelled: specmon sweep --resume {report.run_id} · {measured} of {len(report.rows)} "
                    "runs measured; the resume measures the rest")
        else:
            chosen = report.recommended or f"none ({report.no_recommendation})"
            text = (f"sweep {report.run_id} done: recommended {chosen}, "
                    f"left serving {report.left_serving or 'nothing'}")
            text += "".join(f"; {note}" for note in report.notes)
        self.app.main.show_bench_note(text)
        self.app.notify(text, title="Sweep", severity="information" if report else "error", markup=False)
        self.oncall.lost_track()  # the server serving now is whatever the sweep left: look it up
