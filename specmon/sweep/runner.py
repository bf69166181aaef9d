"""SweepRunner: runs a sweep's pending steps unattended. For each: switch the server to the preset (stop, GPUs and
port free, preflight, start, follow to ready: `specmon switch`'s core without its sanity run), then benchmark
it with the same prompts and settings as every other step (each request saved as it finishes). Progress is
saved after every step; a preset that fails to start is recorded as failed with its classified error and the
sweep goes on. At the end the report is built and the chosen preset is left serving."""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import msgspec

from specmon.bench.predict import (
    Drafting,
    PredictionSet,
    chain_figures,
    predict_measured,
    prediction_for,
    through_no_speculation,
)
from specmon.sweep.plan import TO_DO, Leave, SweepPlan, SweepStep, SweepStore
from specmon.sweep.report import PresetOutcome, SweepReport, build_report
from specmon.units import format_seconds

if TYPE_CHECKING:
    from specmon.bench.model import BenchProgress, BenchResult, RunSettings
    from specmon.bench.results import ResultStore
    from specmon.bench.run import BenchRun
    from specmon.launch.presets import Preset
    from specmon.oncall.discovery import FoundServer

Event = Callable[[str], None]
CELL_REQUESTS_PER_STREAM = 2
"""A grid cell measures at least this many requests per concurrent stream."""
LEAVE_CHOICES = ("best", "baseline", "none")
KEPT_RUNS = 8
"""Finished runs the runner keeps in memory once read."""


@dataclass
class SweepOptions:
    """How a sweep runs."""

    preflight: bool = True
    ready_timeout_s: float = 1800.0
    leave: Leave = "best"
    skip_predicted_worse: bool = False
    before_save: Callable[[BenchResult], None] | None = None
    """Added to each run's summary before it is saved (`--against-traffic`: its τ against production's)."""


def drafting_of(preset: Preset | None) -> Drafting | None:
    """A preset's speculative configuration (`Drafting`: what steps are matched by); None without speculation."""
    if preset is None:
        return None
    return Drafting.of_flags(preset.speculative, preset.args.get("speculative-draft-model-path"))


def capacity_warnings(run: BenchResult, concurrency: int) -> list[str]:
    """Where a cell's concurrency is above what the server batches as it usually does: its captured CUDA-graph
    batch sizes (the figure then describes decoding without graphs) or its --max-running-requests (requests
    queue)."""
    out = []
    graphs, limit = run.server.cuda_graph_max_bs, run.server.max_running_requests
    if isinstance(graphs, int) and concurrency > graphs:
        out.append(f"concurrency {concurrency} is above the server's largest CUDA-graph batch ({graphs}): it "
                   "decodes without graphs there, and the figure describes that" if graphs else
                   f"the server runs without CUDA graphs (concurrency {concurrency})")
    if isinstance(limit, int) and concurrency > limit:
        out.append(f"concurrency {concurrency} is above the server's --max-running-requests {limit}: the rest "
                   "queue, and the figure describes that")
    return out


def _own_start_time() -> float | None:
    import psutil

    try:
        return psutil.Process().create_time()
    except psutil.Error:
        return None


def death_cause(server_id: str) -> str | None:
    """What the log of a dead server specmon launched says ended it (its classified error), or None: it runs, it
    left no log, or the log gives no cause."""
    from specmon.inputs import InputError, open_regular
    from specmon.logs.summary import summarize_stream
    from specmon.oncall.discovery import find_launched

    found = find_launched(server_id)
    if found is None or found.alive or not found.log:
        return None
    try:
        with open_regular(found.log, what="server log") as stream:
            error = summarize_stream(stream).error
    except (OSError, InputError):
        return None
    return error.message if error is not None else None


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
        server: FoundServer | None = None,
    ) -> None:
        self.plan = plan
        self._server = server
        """The server the next switch replaces until the sweep launches its own (`plan.server_id`): the one the
        user named or `pick_server` picked; None: no server specmon launched runs."""
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
        self._finished_runs: OrderedDict[str, BenchResult] = OrderedDict()

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
        """Run every step to do, then report and leave the chosen preset serving. Cancelled, it returns after the
        step under way (that step "cancelled"), leaving the servers as they are; the plan says it was cancelled
        and that no process runs it any more."""
        self.plan.leave = self.options.leave
        self.plan.runner_pid, self.plan.runner_started = os.getpid(), _own_start_time()
        self.plan.cancelled = False
        self.store.save(self.plan)
        try:
            return self._run()
        finally:
            if not self.plan.finished:  # cancelled, or an error: nothing runs it now (a kill leaves its pid)
                self.plan.runner_pid = self.plan.runner_started = None
                self.plan.cancelled = self.cancelled
                self.store.save(self.plan)

    def _run(self) -> SweepReport:
        while not self.cancelled and (step := self.plan.next_step) is not None:
            if self.plan.grid is not None and (why := self._grid_predicted_worse(step)):
                step.state, step.error = "predicted", why
                for cell in step.cells:
                    cell.state, cell.error = "predicted", why
                self.say(f"{step.preset}: {why}")
            elif self.plan.grid is None and self._predicted_worse(step):  # a grid has no one best: per load
                step.state, step.error = "skipped", "predicted clearly worse than the best measured preset"
                self.say(f"{step.preset}: skipped ({step.error})")
            else:
                self._run_step(step)
            if self.plan.grid is None:  # a grid recommends per load, from its cells' kept figures at its end
                self.plan.recommended = self.report().recommended
            else:  # the longest chain's replay, done once and kept for the report (the fit is redone, cheaply)
                from specmon.sweep.grid_predict import predict_cells

                predict_cells(self.plan, self._load)
            self.store.save(self.plan)
        report = self.report()
        if self.cancelled:  # unfinished: `specmon sweep --resume` goes on; what serves is what the step left
            server = self._running_server()
            report.left_serving = (server.preset or f"pid {server.pid}") if server is not None else None
            return report
        if not self.plan.finished:
            leaving = time.monotonic()
            self.plan.left_serving = self._leave(report)
            self.plan.leave_s = round(time.monotonic() - leaving, 3)
            self.plan.finished = True
            self.store.save(self.plan)
        report.left_serving = self.plan.left_serving
        return report

    def report(self) -> SweepReport:
        """The report of what the plan holds now (finished or not)."""
        outcomes = [
            PresetOutcome(
                s.preset, s.draft_tokens, s.state, self._load(s.bench_run_id), s.startup_s, s.measure_s, s.error,
                s.baseline, self._drafting(s),
            )
            for s in self.plan.steps
        ]
        report = build_report(self.plan.run_id, outcomes)
        report.left_serving = self.plan.left_serving
        if self.plan.grid is not None:  # a grid's predictions are per concurrency, in its grid report
            return report
        predicted_sets, cannot = self._predictions()
        report.notes += cannot
        for predicted_set in predicted_sets:
            source = predicted_set.drafting.text() if predicted_set.drafting else "?"
            report.predicted_from.append(f"run {predicted_set.run_id} ({source})")
            if skipped := predicted_set.skipped_text():
                report.notes.append(f"prediction from run {predicted_set.run_id}: {skipped}")
        for step, row in zip(self.plan.steps, report.rows, strict=True):
            guess = prediction_for(predicted_sets, self._drafting(step))
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
            ready_timeout=self.options.ready_timeout_s, on_line=self.on_startup, should_stop=lambda: self.cancelled,
        )  # fmt: skip
        step.startup_s = round(sum(s["took_s"] or 0.0 for s in outcome.steps), 3)
        self._switched(outcome)
        if self.cancelled and (outcome.state != "ready" or outcome.url is None):
            # a failure while cancelling may be the cancel's (Ctrl+C reaches the preflight's processes too)
            self._cancel_step(step, outcome.error or "cancelled")
            return
        if outcome.state != "ready" or outcome.url is None:
            step.state, step.error = "failed", f"launch failed: {outcome.error or 'not ready'}"
            for cell in step.cells:  # a grid's: each says why it was not measured; a resume launches it again
                if cell.state in TO_DO:
                    cell.state, cell.error = "failed", step.error
            self.say(f"{step.preset}: {step.error}")
            return
        if self.cancelled:
            self._cancel_step(step, f"cancelled once {step.preset} was ready, before it was measured")
            return
        self.say(f"{step.preset}: ready after {format_seconds(step.startup_s)}; measuring")
        step.state, step.error = "pending", None
        if step.cells:
            self._measure_cells(outcome.url, preset, step)
            return
        run = self._bench(outcome.url, preset, step)
        if self.cancelled and run.status != "finished":
            self._cancel_step(step, f"its benchmark was cancelled after {format_seconds(step.measure_s)}")
            return
        if run.status == "finished" and run.summary.median_tok_s:
            step.state = "measured"
        else:
            step.state, step.error = "failed", "; ".join(run.notes) or f"benchmark {run.status}"
        self.say(f"{step.preset}: {step.state} in {format_seconds(step.measure_s)}")

    def _measure_cells(self, url: str, preset: Preset, step: SweepStep) -> None:
        """A grid step: each concurrency still to do, one benchmark each on the one running server (no restart);
        Ctrl+C stops after the cell under way, which a resume measures again."""
        from specmon.serving.client import resolve_api_key
        from specmon.sweep.grid_report import keep_cell_figures
        from specmon.sweep.step_times import cell_step_time_ms, read_step_times

        api_key = resolve_api_key(None)
        step_times = read_step_times(url, api_key)  # after each cell, the next one's "before"
        records_step_times = step_times is not None
        for cell in step.cells:
            if cell.state not in TO_DO:
                continue
            if self.cancelled:
                break
            self.say(f"{step.preset}: concurrency {cell.concurrency}")
            before = step_times if step_times is not None or not records_step_times else read_step_times(url, api_key)
            run = self._bench(url, preset, cell, concurrency=cell.concurrency)
            if before is not None:
                step_times = read_step_times(url, api_key)
                if step_time := cell_step_time_ms(before, step_times, cell.concurrency):
                    cell.step_time_ms, cell.step_time_windows = step_time
            if step.bench_run_id is None:
                step.bench_run_id = cell.bench_run_id  # the step's first cell stands for it in the preset table
            if self.cancelled and run.status != "finished":
                cell.state, cell.error = "cancelled", f"cancelled after {format_seconds(cell.measure_s)}"
                break
            cell.warnings = capacity_warnings(run, cell.concurrency)
            for warning in cell.warnings:
                self.say(f"{step.preset}: WARNING: {warning}")
            if run.status == "finished" and run.summary.median_tok_s:
                cell.state = "measured"
                keep_cell_figures(self.plan, step, cell, partial(self._load_or, run))
            else:
                cell.state, cell.error = "failed", "; ".join(run.notes) or f"benchmark {run.status}"
            self.say(f"{step.preset}: concurrency {cell.concurrency}: {cell.state} in "
                     f"{format_seconds(cell.measure_s)}")
            if cell.state == "failed" and self.plan.server_id and self._running_server() is None:
                self._server_died(step, cell)
            self.store.save(self.plan)
            if cell.state == "failed" and cell.error and cell.error.startswith("the server died"):
                break
        states = {cell.state for cell in step.cells}
        if "cancelled" in states or "pending" in states:
            self._cancel_step(step, "cancelled between its concurrencies; a resume measures the rest")
        elif states == {"measured"}:
            step.state = "measured"
        else:
            failed = [f"concurrency {c.concurrency}: {c.error}" for c in step.cells if c.state == "failed"]
            step.state, step.error = "failed", "; ".join(failed)

    def _server_died(self, step: SweepStep, cell: Any) -> None:
        """The step's server is gone after a failed cell: that cell and the rest are not measured (each says why);
        the sweep goes on to the next configuration, whose launch finds nothing to replace."""
        why = f"the server died during concurrency {cell.concurrency}"
        cause = death_cause(self.plan.server_id or "")
        cell.error = f"{why}: {cause}" if cause else f"{why}: {cell.error}"
        for rest in step.cells:
            if rest.state in TO_DO:
                rest.state, rest.error = "failed", f"{why}; not measured"
        self.say(f"{step.preset}: {why}")

    def _cancel_step(self, step: SweepStep, why: str) -> None:
        """The step under way when the sweep was cancelled: a resume runs it again."""
        step.state, step.error = "cancelled", why
        self.say(f"{step.preset}: cancelled: {why}")

    def _bench(self, url: str, preset: Preset, step: Any, concurrency: int | None = None) -> BenchResult:
        """Benchmark what serves at `url`, recording the run in `step` (a step, or a grid step's cell)."""
        from specmon.bench.run import BenchRun
        from specmon.serving.client import resolve_api_key

        settings = self._settings()
        if concurrency is not None:  # enough requests that the concurrency is reached and held
            settings = msgspec.structs.replace(settings, concurrency=concurrency,
                                               requests=max(settings.requests, CELL_REQUESTS_PER_STREAM * concurrency))
        bench = BenchRun(url, preset.name, settings, api_key=resolve_api_key(None), on_update=self.on_progress,
                         store=self.results, asked=dict(preset.args), before_save=self.options.before_save)
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

    def _settings(self) -> RunSettings:
        """The same prompts and settings for every step: the baseline's benchmark settings (its preset's
        [bench]; the first step's without one), with the sweep's request count."""
        import msgspec

        from specmon.bench.model import RunSettings

        first = next((s for s in self.plan.steps if s.baseline), self.plan.steps[0])
        settings = RunSettings.of(self.presets[first.preset].bench)
        return msgspec.structs.replace(settings, requests=self.plan.requests) if self.plan.requests else settings

    def _switched(self, outcome: Any) -> None:
        """After a switch: unless it left the old server serving, the sweep's server is the one it launched (if
        any), and no other server is ever acted on again (saved, for a resume)."""
        if not outcome.old_still_serving:
            self._server = None
            self.plan.server_id = outcome.id
            self.store.save(self.plan)

    def _running_server(self) -> Any:
        """The server the next switch replaces: the one given until the sweep launched its own, then its own while
        it runs (None: nothing to replace)."""
        if self._server is not None or not self.plan.server_id:
            return self._server
        from specmon.oncall.discovery import find_launched

        own = find_launched(self.plan.server_id)
        return own if own is not None and own.alive else None

    def _load(self, run_id: str | None) -> BenchResult | None:
        """A stored run; the last few finished ones are kept (a grid compares each cell with the same baseline
        runs, and predicts from the same longest chain)."""
        if not run_id:
            return None
        if (kept := self._finished_runs.get(run_id)) is not None:
            self._finished_runs.move_to_end(run_id)
            return kept
        try:
            run = self.results.load(run_id)
        except (OSError, ValueError, KeyError):
            return None
        if run.status == "finished":
            self._finished_runs[run_id] = run
            while len(self._finished_runs) > KEPT_RUNS:
                self._finished_runs.popitem(last=False)
        return run

    def _load_or(self, run: BenchResult, run_id: str | None) -> BenchResult | None:
        """`run` itself when it is the one asked (just measured, in memory), else the stored one."""
        return run if run_id == run.run_id else self._load(run_id)

    def _drafting(self, step: SweepStep) -> Drafting | None:
        return None if step.baseline else drafting_of(self.presets.get(step.preset))

    def _measured(self) -> list[tuple[Drafting | None, BenchResult]]:
        """Each measured step's configuration (None: the baseline) and run."""
        return [(self._drafting(step), run) for step in self.plan.steps
                if step.state == "measured" and (run := self._load(step.bench_run_id)) is not None]

    def _predictions(self, measured: list[tuple[Drafting | None, BenchResult]] | None = None
                     ) -> tuple[list[PredictionSet], list[str]]:
        """What the measured chains predict (`predict_measured`), and the runs that could not predict, in words
        (`measured`: `_measured()`, when the caller has it already)."""
        measured = self._measured() if measured is None else measured
        return predict_measured([(drafting, run) for drafting, run in measured if drafting is not None])

    def _predicted_worse(self, step: SweepStep) -> bool:
        """With --skip-predicted-worse: a chain whose predicted tok/s, even at its acceptance CI's top, stays
        below the best measured preset's CI low end, also on the line through no speculation where the chains'
        line is extrapolated (`through_no_speculation`); a tree is never predicted, so never skipped."""
        if not self.options.skip_predicted_worse or step.baseline:
            return False
        drafting, measured = self._drafting(step), self._measured()
        guess = prediction_for(self._predictions(measured)[0], drafting)
        if drafting is None or guess is None or guess.decode_tok_s is None or guess.ci95 is None:
            return False
        lows = [(r.summary.tok_s_ci95 or [None])[0] for d, r in measured if d is not None]
        best_low = max((low for low in lows if low is not None), default=0.0)  # a run without a CI: 0
        chains = chain_figures([(d, r) for d, r in measured if d is not None and d.chain
                                and d.drafter == drafting.drafter])
        base = next((t for d, r in measured if d is None and (t := r.summary.median_tok_s)), None)
        top = guess.decode_tok_s * guess.ci95[1] / guess.accept_length
        optimistic = through_no_speculation(drafting.draft_tokens, guess.ci95[1], chains, base)
        return max(top, optimistic or 0.0) < best_low

    def _grid_predicted_worse(self, step: SweepStep) -> str | None:
        """With --skip-predicted-worse, in a grid: why a chain configuration is not launched (predicted slower
        than no speculation beyond its CI at every asked concurrency), else None."""
        if not self.options.skip_predicted_worse or step.baseline or not step.grid_config:
            return None
        from specmon.sweep.grid_predict import loses_everywhere

        config = (step.grid_config[0], step.grid_config[1], step.grid_config[2])
        return loses_everywhere(self.plan, self._load, config, [cell.concurrency for cell in step.cells])

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
        if self.plan.grid is not None and self.options.leave == "best":  # no one best across loads: the base
            wanted = self.plan.grid.base
        if wanted is None:
            return server.preset if server is not None else None
        if server is not None and server.preset == wanted:
            return wanted
        self.say(f"leaving {wanted} serving")
        outcome = switch(server, self.presets[wanted], preflight=self.options.preflight, requests=0,
                         ready_timeout=self.options.ready_timeout_s, on_line=self.on_startup)
        self._switched(outcome)
        return wanted if outcome.state == "ready" else None
