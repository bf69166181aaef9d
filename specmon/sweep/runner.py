"""SweepRunner: runs a sweep's pending steps unattended. For each: switch the server to the preset (stop, GPUs and
port free, preflight, start, follow to ready: `specmon switch`'s core without its sanity run), then benchmark
it with the same prompts and settings as every other step (each request saved as it finishes). Progress is
saved after every step; a preset that fails to start is recorded as failed with its classified error and the
sweep goes on. At the end the report is built and the chosen preset is left serving."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specmon.bench.predict import PredictionSet, fit_step_cost, predict_run
from specmon.sweep.plan import SweepPlan, SweepStep, SweepStore
from specmon.sweep.report import PresetOutcome, SweepReport, build_report

if TYPE_CHECKING:
    from specmon.bench.model import BenchProgress, BenchResult
    from specmon.bench.results import ResultStore
    from specmon.bench.run import BenchRun
    from specmon.launch.presets import Preset

Event = Callable[[str], None]
LEAVE_CHOICES = ("best", "baseline", "none")


@dataclass
class SweepOptions:
    """How a sweep runs."""

    preflight: bool = True
    ready_timeout_s: float = 1800.0
    leave: str = "best"
    skip_predicted_worse: bool = False


def predictions_for(runs: dict[int, BenchResult]) -> PredictionSet | None:
    """What the longest measured chain predicts for every shorter one (`specmon predict`'s code), with tok/s
    once two or more speculative presets are measured (the step-cost model); ``runs`` maps draft tokens to a
    measured run. None without a run."""
    if not runs:
        return None
    longest = max(runs)
    measured = []
    for draft_tokens, run in runs.items():
        decode = (run.summary.get("decode_tok_s") or {}).get("median")
        accept = (run.summary.get("accept_length") or {}).get("token_weighted")
        if decode and accept:
            measured.append((draft_tokens, accept, decode))
    return predict_run(runs[longest], draft_tokens=longest, cost_model=fit_step_cost(measured))


def _own_start_time() -> float | None:
    import psutil

    try:
        return psutil.Process().create_time()
    except psutil.Error:
        return None


class SweepRunner:
    """Runs a `SweepPlan` against the presets it names, saving progress in `store`."""

    def __init__(
        self,
        plan: SweepPlan,
        presets: dict[str, Preset],
        store: SweepStore,
        results: ResultStore,
        options: SweepOptions | None = None,
        on_event: Event | None = None,
        on_progress: Callable[[BenchProgress], None] | None = None,
        on_startup: Event | None = None,
    ) -> None:
        self.plan = plan
        self.presets = presets
        self.store = store
        self.results = results
        self.options = options or SweepOptions()
        self.say = on_event or (lambda text: None)
        self.on_progress = on_progress
        """Each benchmark's progress, request by request (called on the runner's thread)."""
        self.on_startup = on_startup
        """Each starting server's phases and capture progress, a line each (as `log-summary --follow`)."""
        self._stop = threading.Event()
        self._measuring: BenchRun | None = None

    def cancel(self) -> None:
        """Stop after the step under way, cancelling its benchmark if it is measuring (from any thread). The plan
        stays unfinished and the server as it is: `specmon sweep --resume` measures what is left."""
        self._stop.set()
        bench = self._measuring
        if bench is not None:
            bench.cancel()

    @property
    def cancelled(self) -> bool:
        return self._stop.is_set()

    def run(self) -> SweepReport:
        """Run every pending step, then report and leave the chosen preset serving."""
        self.plan.leave = self.options.leave
        self.plan.runner_pid, self.plan.runner_started = os.getpid(), _own_start_time()
        self.store.save(self.plan)
        while not self.cancelled and (step := self.plan.next_step) is not None:
            if self._predicted_worse(step):
                step.state, step.error = "skipped", "predicted clearly worse than the best measured preset"
                self.say(f"{step.preset}: skipped ({step.error})")
            else:
                self._run_step(step)
            self.plan.recommended = self.report().recommended
            self.store.save(self.plan)
        report = self.report()
        if self.cancelled and self.plan.next_step is not None:
            return report  # unfinished: `specmon sweep --resume` goes on
        if not self.plan.finished:
            self.plan.left_serving = self._leave(report)
            self.plan.finished = True
            self.store.save(self.plan)
        report.left_serving = self.plan.left_serving
        return report

    def report(self) -> SweepReport:
        """The report of what the plan holds now (finished or not)."""
        outcomes = [
            PresetOutcome(
                s.preset, s.draft_tokens, s.state, self._load(s.bench_run_id), s.startup_s, s.measure_s, s.error,
                s.baseline,
            )
            for s in self.plan.steps
        ]
        report = build_report(self.plan.run_id, outcomes)
        predicted_set = predictions_for(self._measured_runs())
        predicted = {p.draft_tokens: p for p in predicted_set.predictions} if predicted_set else {}
        if predicted_set is not None and (skipped := predicted_set.skipped_text()):
            report.notes.append(f"prediction from run {predicted_set.run_id}: {skipped}")
        for row in report.rows:
            guess = predicted.get(row["draft_tokens"]) if row["draft_tokens"] else None
            row["predicted_accept_length"] = guess.accept_length if guess else None
            row["predicted_decode_tok_s"] = guess.decode_tok_s if guess else None
        report.left_serving = self.plan.left_serving
        return report

    # ----- steps

    def _run_step(self, step: SweepStep) -> None:
        from specmon.oncall.switch import switch

        preset = self.presets[step.preset]
        self.say(f"{step.preset}: switching")
        outcome = switch(
            self._running_server(), preset, preflight=self.options.preflight, requests=0,
            ready_timeout=self.options.ready_timeout_s, on_line=self.on_startup,
        )  # fmt: skip
        step.startup_s = round(sum(s["took_s"] or 0.0 for s in outcome.steps), 3)
        if outcome.state != "ready" or outcome.url is None:
            step.state, step.error = "failed", outcome.error or "not ready"
            self.say(f"{step.preset}: failed: {step.error}")
            return
        if self.cancelled:
            return
        self.say(f"{step.preset}: ready after {step.startup_s:.1f} s; measuring")
        step.state, step.error = "pending", None
        run = self._bench(outcome.url, preset, step)
        if self.cancelled and run.status != "finished":
            self.say(f"{step.preset}: benchmark cancelled after {step.measure_s:.1f} s")
            return  # still pending: a resume measures it again
        if run.status == "finished" and (run.summary.get("decode_tok_s") or {}).get("median"):
            step.state = "measured"
        else:
            step.state, step.error = "failed", "; ".join(run.notes) or f"benchmark {run.status}"
        self.say(f"{step.preset}: {step.state} in {step.measure_s:.1f} s")

    def _bench(self, url: str, preset: Preset, step: SweepStep) -> BenchResult:
        from specmon.bench.run import BenchRun
        from specmon.serving.client import resolve_api_key

        settings = self._settings()
        bench = BenchRun(url, preset.name, settings, api_key=resolve_api_key(None), on_update=self.on_progress,
                         store=self.results, asked=dict(preset.args))
        step.bench_run_id = bench.result.run_id
        self.store.save(self.plan)  # a kill now keeps the partial run's id (the run itself is saved as it goes)
        started = time.monotonic()
        self._measuring = bench
        if self.cancelled:  # a cancel that came before the run existed
            bench.cancel()
        try:
            run = bench.run_blocking()
        finally:
            self._measuring = None
        step.measure_s = round(time.monotonic() - started, 3)
        return run

    def _settings(self) -> Any:
        """The same prompts and settings for every step: the baseline's benchmark settings (its preset's
        [bench]; the first step's without one), with the sweep's request count."""
        from specmon.bench.run import RunSettings

        first = next((s for s in self.plan.steps if s.baseline), self.plan.steps[0])
        settings = RunSettings.of(self.presets[first.preset].bench)
        return dataclasses.replace(settings, requests=self.plan.requests) if self.plan.requests else settings

    def _running_server(self) -> Any:
        from specmon.oncall.discovery import find_servers

        alive = [s for s in find_servers(with_gpus=False).alive() if s.launched_by_specmon]
        return max(alive, key=lambda s: s.started_at or 0) if alive else None

    def _load(self, run_id: str | None) -> BenchResult | None:
        if not run_id:
            return None
        try:
            return self.results.load(run_id)
        except (OSError, ValueError, KeyError):
            return None

    def _measured_runs(self) -> dict[int, BenchResult]:
        runs = {}
        for step in self.plan.steps:
            if step.state == "measured" and step.draft_tokens and (run := self._load(step.bench_run_id)):
                runs[step.draft_tokens] = run
        return runs

    def _predicted_worse(self, step: SweepStep) -> bool:
        """With --skip-predicted-worse: a speculative preset whose predicted tok/s, even at its acceptance CI's
        top, stays below the best measured preset's CI low end."""
        if not self.options.skip_predicted_worse or step.baseline or not step.draft_tokens:
            return False
        runs = self._measured_runs()
        predicted = predictions_for(runs)
        guess = {p.draft_tokens: p for p in predicted.predictions}.get(step.draft_tokens) if predicted else None
        if guess is None or guess.decode_tok_s is None or guess.ci95 is None:
            return False
        best_low = max(((r.summary.get("decode_tok_s") or {}).get("ci95") or [0])[0] for r in runs.values())
        return guess.decode_tok_s * guess.ci95[1] / guess.accept_length < best_low

    def _leave(self, report: SweepReport) -> str | None:
        """Leave the recommended (or the baseline) preset serving, or stop the server (none)."""
        from specmon.oncall.stopper import StopRefused, stop_server
        from specmon.oncall.switch import switch

        server = self._running_server()
        if self.options.leave == "none":
            if server is not None:
                try:
                    stop_server(server)
                except StopRefused as exc:
                    self.say(f"left running: {exc}")
                    return server.preset
            return None
        wanted = report.recommended if self.options.leave == "best" else self.plan.steps[0].preset
        if wanted is None:
            return server.preset if server is not None else None
        if server is not None and server.preset == wanted:
            return wanted
        self.say(f"leaving {wanted} serving")
        outcome = switch(server, self.presets[wanted], preflight=self.options.preflight, requests=0,
                         ready_timeout=self.options.ready_timeout_s, on_line=self.on_startup)
        return wanted if outcome.state == "ready" else None
