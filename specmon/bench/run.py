"""BenchRun: one benchmark of one server, on its own thread with its own asyncio loop.

Per request it streams `/generate` with one keep-alive connection per concurrent stream and times chunks
with `time.perf_counter` in that loop; nothing else runs there but a coalescer that hands `on_update` a
`BenchProgress` at most four times a second. Each finished request is appended to the results store at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from specmon.bench.model import (
    OWN_TOKENS,
    BenchProgress,
    BenchResult,
    OwnTokens,
    RequestResult,
    RunSettings,
    ServerFacts,
    Speculative,
)
from specmon.bench.prompts import Prompt, load_prompts, prompt_set_hash
from specmon.bench.results import ResultStore
from specmon.bench.stats import CROSS_CHECK_TOLERANCE, relative_difference
from specmon.bench.stream import DEFAULT_STALL_TIMEOUT_S, stream_client, stream_generate
from specmon.bench.summary import summarize
from specmon.http.client import HttpClient
from specmon.loop_thread import LoopThread

__all__ = ["BenchProgress", "BenchResult", "BenchRun", "RequestResult", "RunSettings", "new_run_id"]

UPDATE_INTERVAL_S = 0.25
MAX_CONSECUTIVE_FAILURES = 5
UNNAMED_PRESET = "(current server)"
DEFAULT_DEADLINE_S = 3600.0
SGLANG_INFO_KEYS = ("version", "model_path", "served_model_name", "tp_size", "max_total_num_tokens")


class NotMeasurable(Exception):
    """Nothing can be measured or saved: not an SGLang server, or the results cannot be written."""


def new_run_id() -> str:
    """A run id that sorts by start time: `YYYYmmdd-HHMMSS-xxxx`."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


class BenchRun:
    """Benchmarks the server at `url` under the label `preset_name` with `settings` (see RunSettings).

    `start()` runs it on a daemon thread; `cancel()` stops it (partial results are kept); `result` is the
    BenchResult (growing while it runs); `wait()` joins. `on_update(BenchProgress)` is called from the
    benchmark's thread, coalesced, so it must only hand the progress on (e.g. `post_message`).
    With `gpu_sampler` (a running `specmon.gpu.sampler.GpuSampler`) the GPUs' clocks and slowdowns over the
    measured window are stored and a slowdown flags the run "throttled"; `note_gpu_throttle()` does the same
    by hand. With `asked` (the preset's SGLang arguments) a speculative setting SGLang runs otherwise (16 draft
    tokens asked, 2 run with topk 1) is noted; without, the server's own launch command (0.5.23+) stands in.
    """

    def __init__(
        self,
        url: str,
        preset_name: str | None,
        settings: Any = None,
        api_key: str | None = None,
        on_update: Callable[[BenchProgress], object] | None = None,
        *,
        results_dir: str | None = None,
        store: ResultStore | None = None,
        prompts: list[Prompt] | None = None,
        gpu_sampler: Any = None,
        stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
        deadline_s: float | None = DEFAULT_DEADLINE_S,
        flush_retries: int = 5,
        flush_delay_s: float = 0.5,
        own_tokens: OwnTokens = OWN_TOKENS,
        asked: Mapping[str, Any] | None = None,
        keep_prompts: bool = False,
        private_prompts: bool = False,
        before_save: Callable[[BenchResult], None] | None = None,
    ) -> None:
        from specmon.urls import base_url

        self.url = base_url(url)
        self.settings = RunSettings.of(settings)
        self.preset = preset_name or UNNAMED_PRESET
        self._auto_label = not preset_name
        self._api_key = api_key
        self._on_update = on_update
        self.store = store if store is not None else ResultStore(results_dir)
        self._prompts = prompts
        self._gpu_sampler = gpu_sampler
        self._measure_window: list[float] = []
        self._stall_timeout_s = stall_timeout_s
        self._deadline_s = deadline_s
        self._deadline: float | None = None
        # Set when the run stopped before measuring anything (then nothing is saved) ...
        self.fatal: str | None = None
        # ... and when a result could not be written (then it is not "saved").
        self.save_error: str | None = None
        self.own_tokens = own_tokens
        """Where the tokens this run generates are counted, as they stream and as requests end."""
        self._flush_retries = flush_retries
        self._asked = asked  # the preset's SGLang arguments: what SGLang runs otherwise is noted
        self._flush_delay_s = flush_delay_s
        self._keep_prompts = keep_prompts  # store each prompt's text or ids, not only its hash
        self._private = private_prompts and not keep_prompts  # production's prompts: their outputs not stored either
        self._before_save = before_save  # adds to the summary before it is saved (a check against production)
        self.result = BenchResult(
            run_id=new_run_id(), preset=self.preset, url=self.url, started_at=time.time(),
            settings=self.settings,
        )
        self._phase = "connecting"
        self._in_flight = 0
        self._dirty = True
        self._throttle: list[str] = []
        self._lock = threading.Lock()
        self._runner = LoopThread(f"bench-{self.result.run_id}")
        self._stop_reason: str | None = None

    # -- control (any thread) -------------------------------------------------------------------------
    def start(self) -> None:
        """Start the run on its own thread."""
        self._runner.start(self._main)

    def run_blocking(self) -> BenchResult:
        """Run to the end on the calling thread (used by `specmon bench`)."""
        self._runner.run(self._main)
        return self.result

    def cancel(self) -> None:
        """Stop the run: requests in flight are abandoned, finished ones stay saved."""
        self._runner.cancel()

    def wait(self, timeout: float | None = None) -> bool:
        """Join the run's thread; True when it has finished."""
        return self._runner.join(timeout)

    @property
    def done(self) -> bool:
        return self.result.status != "running"

    def note_gpu_throttle(self, reason: str) -> None:
        """Record that a GPU throttled during the run (called by whoever samples NVML); flags the result."""
        with self._lock:
            if reason not in self._throttle:
                self._throttle.append(reason)

    # -- progress --------------------------------------------------------------------------------------
    def progress(self, message: str = "") -> BenchProgress:
        """The current progress snapshot."""
        result = self.result
        measured = [r for r in result.requests if not r.warmup]
        ok = [r for r in measured if r.ok]
        tps = tuple(r.decode_tok_s for r in ok if r.decode_tok_s)
        steps = sum(r.spec_verify_ct or 0 for r in ok)
        tokens = sum(r.completion_tokens for r in ok if r.spec_verify_ct)
        median = statistics.median(tps) if tps else None
        return BenchProgress(
            run_id=result.run_id,
            preset=self.preset,
            phase=self._phase,
            done=len(measured),
            total=self.settings.requests,
            failed=len(measured) - len(ok),
            warmup_done=len(result.requests) - len(measured),
            warmup_total=self.settings.warmup,
            in_flight=self._in_flight,
            decode_tok_s=tps,
            accept_length=tokens / steps if steps else None,
            median_tok_s=median,
            message=message or "; ".join(result.notes[-1:]),
        )

    def _emit(self, message: str = "") -> None:
        self._dirty = False
        if self._on_update is not None:
            with contextlib.suppress(Exception):
                self._on_update(self.progress(message))

    async def _coalesce_updates(self) -> None:
        while True:
            await asyncio.sleep(UPDATE_INTERVAL_S)
            if self._dirty:
                self._emit()

    # -- the run ---------------------------------------------------------------------------------------
    async def _main(self) -> None:
        coalescer = asyncio.create_task(self._coalesce_updates())
        try:
            if self._runner.cancel_requested:
                raise asyncio.CancelledError
            self._deadline = None if self._deadline_s is None else time.perf_counter() + self._deadline_s
            await self._run()
            self.result.status = "failed" if self._stop_reason or not self.result.measured else "finished"
            if self.result.measured and not any(r.ok for r in self.result.measured):
                self.result.status = "failed"
        except NotMeasurable as exc:
            self.fatal = str(exc)
            self.result.status = "failed"
            self.result.notes.append(self.fatal)
        except asyncio.CancelledError:
            self.result.status = "cancelled"
            self.result.notes.append("cancelled")
        except Exception as exc:  # a bug or an unexpected answer must not kill the app
            self.result.status = "failed"
            self.result.notes.append(f"{type(exc).__name__}: {exc}")
        finally:
            coalescer.cancel()
            try:
                self._finish()
            except Exception as exc:  # never leave the UI waiting for a final update
                self.result.status = "failed"
                self.result.notes.append(f"summary failed: {type(exc).__name__}: {exc}")
                self._phase = "failed"
                self._emit()

    def _finish(self) -> None:
        result = self.result
        result.finished_at = time.time()
        result.summary = summarize(result.requests, self.settings.max_new_tokens, self.settings.ignore_eos)
        for code, detail in result.cross_checks.get("mismatches", {}).items():
            result.summary.flag(code, detail)
        if not result.cross_checks.get("flushed", True):
            result.summary.flag("no-flush", "the cache was not flushed before measuring")
        self._record_gpus()
        with self._lock:
            if self._throttle:
                result.summary.flag("throttled", "GPU throttled during the run: " + ", ".join(self._throttle))
        if self._stop_reason:
            result.summary.flag("aborted", self._stop_reason)
        if self._before_save is not None and result.measured:
            try:
                self._before_save(result)
            except Exception as exc:  # a failed check is said, the run is still saved
                result.notes.append(f"not checked against production: {type(exc).__name__}: {exc}")
        self._phase = result.status
        if self.fatal is None:
            self._save(self.store.finish_run, result)
        self._emit(result.notes[-1] if result.notes else "")

    def _record_gpus(self) -> None:
        """With a GpuSampler: the GPUs' clocks and slowdowns over the measured window, and throttle flags."""
        if self._gpu_sampler is None or not self._measure_window:
            return
        t0, t1 = self._measure_window[0], time.time()
        self.result.gpus = [s.to_json() for s in self._gpu_sampler.summarize(t0, t1)]
        for throttle in self._gpu_sampler.throttled_during(t0, t1):
            self.note_gpu_throttle(f"GPU {throttle.gpu_index} {throttle.reason}")

    async def _run(self) -> None:
        from specmon.serving.check import not_as_asked, why_adjusted
        from specmon.serving.client import SGLangClient
        from specmon.serving.spec import spec_settings

        result = self.result
        prompts = self._prompts if self._prompts is not None else load_prompts(self.settings.prompts)
        result.settings = result.settings.with_prompts(prompt_set_hash(prompts), len(prompts))
        async with SGLangClient(self.url, self._api_key, timeout=min(10.0, self._stall_timeout_s)) as api:
            info = await self._server_info(api)
            spec = spec_settings(info)
            result.server = _server_record(info, spec)
            result.notes.extend(f"/server_info: {absurd}" for absurd in spec.absurd)
            who, differences = not_as_asked(spec, info, self._asked)
            result.notes.extend(f"SGLang runs {d.name} {d.effective}, not the {d.requested} {who} asked "
                                f"({why_adjusted(d, spec)}): these figures are for what it runs" for d in differences)
            if self._auto_label:
                self.preset = result.preset = server_label(spec)
            try:
                self.store.start_run(result)
            except OSError as exc:
                raise NotMeasurable(f"cannot save results in {self.store.directory}: {exc.strerror or exc}") from exc
            async with stream_client(self.url, self._api_key) as http:
                if self.settings.warmup > 0:
                    self._set_phase("warmup")
                    warm = [(i, prompts[-1 - (i % len(prompts))]) for i in range(self.settings.warmup)]
                    await self._run_requests(http, warm, warmup=True)
                self._set_phase("flushing")
                flushed = await self._flush(api)
                result.cross_checks["flushed"] = flushed
                before = await _metrics_or_none(api, self._stall_timeout_s)
                self._set_phase("measuring")
                self._measure_window = [time.time()]
                jobs = [(i, prompts[i % len(prompts)]) for i in range(self.settings.requests)]
                await self._run_requests(http, jobs, warmup=False)
            self._set_phase("checking")
            await self._cross_check(api, before, flushed)

    async def _server_info(self, api: Any) -> dict[str, Any]:
        """The server's /server_info; anything but an SGLang answer stops the run before it starts."""
        from specmon.serving.client import AuthenticationFailed, SGLangError

        try:
            async with asyncio.timeout(self._stall_timeout_s):
                info = await api.server_info()
        except AuthenticationFailed as exc:
            raise NotMeasurable(f"the server rejected the API key: {exc}") from exc
        except SGLangError as exc:
            raise NotMeasurable(f"not an SGLang server: {exc}") from exc
        except TimeoutError as exc:
            raise NotMeasurable(f"not an SGLang server: no /server_info within {self._stall_timeout_s:g} s") from exc
        if not isinstance(info, dict) or not any(key in info for key in SGLANG_INFO_KEYS):
            shape = type(info).__name__ if not isinstance(info, dict) else "an object without SGLang's keys"
            raise NotMeasurable(f"not an SGLang server: /server_info answered {shape}")
        return info

    def _save(self, write: Callable[..., None], *args: Any) -> None:
        """Write to the results store; a failure is noted once and the run goes on."""
        try:
            write(*args)
        except OSError as exc:
            note = f"results not saved in {self.store.directory}: {exc.strerror or exc}"
            self.save_error = self.save_error or note
            if note not in self.result.notes:
                self.result.notes.append(note)

    def _set_phase(self, phase: str) -> None:
        self._phase = phase
        self._dirty = True

    async def _flush(self, api: Any) -> bool:
        from specmon.serving.client import SGLangError

        try:
            async with asyncio.timeout(self._stall_timeout_s + self._flush_retries * self._flush_delay_s):
                flushed = await api.flush_cache(retries=self._flush_retries, delay=self._flush_delay_s)
        except TimeoutError:
            self.result.notes.append("flush_cache did not answer; measuring without a flush")
            return False
        except SGLangError as exc:
            self.result.notes.append(f"flush_cache failed ({exc}); measuring without a flush")
            return False
        if not flushed:
            self.result.notes.append(
                f"flush_cache answered 400 (requests running) {self._flush_retries + 1} times; measuring without a flush"
            )
        return flushed

    async def _run_requests(self, http: HttpClient, jobs: list[tuple[int, Prompt]], warmup: bool) -> None:
        from specmon.serving.client import OWN_RID_PREFIX, generate_payload

        queue: asyncio.Queue[tuple[int, Prompt]] = asyncio.Queue()
        for job in jobs:
            queue.put_nowait(job)
        consecutive_failures = 0

        async def worker() -> None:
            nonlocal consecutive_failures
            while not queue.empty() and self._stop_reason is None:
                if self._deadline is not None and time.perf_counter() >= self._deadline:
                    self._stop_reason = f"the run's deadline ({self._deadline_s:g} s) passed"
                    self.result.notes.append(self._stop_reason)
                    break
                index, prompt = queue.get_nowait()
                payload = generate_payload(prompt.sent, prompt.max_new_tokens or self.settings.max_new_tokens,
                                           self.settings.temperature, self.settings.ignore_eos,
                                           rid=f"{OWN_RID_PREFIX}{self.result.run_id}-{'w' if warmup else ''}{index}")
                self._in_flight += 1
                try:
                    request = await stream_generate(
                        http, payload, index, prompt.id, warmup=warmup, stall_timeout_s=self._stall_timeout_s,
                        deadline=self._deadline, on_tokens=self.own_tokens.stream,
                    )
                finally:
                    self._in_flight -= 1
                self.own_tokens.finish(request.completion_tokens)
                request.category, request.max_new_tokens = prompt.category, prompt.max_new_tokens
                request.prompt_hash = prompt.prompt_hash
                if self._keep_prompts:
                    request.prompt_text = prompt.text if prompt.input_ids is None else None
                    request.prompt_ids = None if prompt.input_ids is None else list(prompt.input_ids)
                if self._private:
                    request.output_text = ""
                self.result.requests.append(request)
                self._save(self.store.add_request, self.result.run_id, request)
                consecutive_failures = 0 if request.ok else consecutive_failures + 1
                if consecutive_failures >= MAX_CONSECUTIVE_FAILURES and self._stop_reason is None:
                    self._stop_reason = f"stopped after {consecutive_failures} failures in a row: {request.error}"
                    self.result.notes.append(self._stop_reason)
                self._dirty = True

        workers = [asyncio.create_task(worker()) for _ in range(max(1, self.settings.concurrency))]
        try:
            await asyncio.gather(*workers)
        finally:
            for task in workers:
                task.cancel()

    async def _cross_check(self, api: Any, before: Any, flushed: bool) -> None:
        """Compare the client's acceptance length with the server's own figures; >5% apart is flagged."""
        from specmon.serving.client import SGLangError
        from specmon.serving.metrics import delta
        from specmon.serving.spec import spec_settings

        checks = self.result.cross_checks
        mismatches: dict[str, str] = {}
        ok = [r for r in self.result.measured if r.ok]
        with_spec = [r for r in ok if r.spec_verify_ct]
        client_tau = (
            sum(r.completion_tokens for r in with_spec) / sum(r.spec_verify_ct or 0 for r in with_spec)
            if with_spec
            else None
        )
        checks["client_accept_length"] = client_tau
        after = await _metrics_or_none(api, self._stall_timeout_s)
        if before is not None and after is not None:
            d = delta(before, after)
            checks["metrics"] = {
                "generation_tokens": d.generation_tokens,
                "spec_verify_calls": d.spec_verify_calls,
                "accept_length": d.accept_length,
                "client_completion_tokens": sum(r.completion_tokens for r in ok),
                "reset": d.reset,
            }
            if client_tau and d.accept_length and relative_difference(client_tau, d.accept_length) > CROSS_CHECK_TOLERANCE:
                mismatches["accept-mismatch-metrics"] = (
                    f"acceptance length {client_tau:.3f} (client) vs {d.accept_length:.3f} (/metrics delta)"
                )
        if flushed:
            try:
                async with asyncio.timeout(self._stall_timeout_s):
                    info = await api.server_info()
                if not isinstance(info, dict):
                    raise SGLangError(f"the answer is a {type(info).__name__}, not an object")
                settings = spec_settings(info)
            except (SGLangError, TimeoutError) as exc:
                self.result.notes.append(f"server_info after the run unavailable: {exc or 'no answer'}")
            else:
                server_tau = settings.avg_spec_accept_length
                checks["server_info_accept_length"] = server_tau
                if client_tau and server_tau and relative_difference(client_tau, server_tau) > CROSS_CHECK_TOLERANCE:
                    mismatches["accept-mismatch-server"] = (
                        f"acceptance length {client_tau:.3f} (client) vs {server_tau:.3f} (/server_info after a flush)"
                    )
        checks["mismatches"] = mismatches


def server_label(spec: Any) -> str:
    """A label for a run without a preset, from what the server runs: `EAGLE3 3/1/4` or `no speculation`."""
    if not spec.algorithm:
        return "no speculation"
    return f"{spec.algorithm} {spec.num_steps}/{spec.eagle_topk}/{spec.num_draft_tokens}"


async def _metrics_or_none(api: Any, timeout_s: float) -> Any:
    from specmon.serving.client import SGLangError

    try:
        async with asyncio.timeout(timeout_s):
            return await api.metrics()
    except (SGLangError, ValueError, TimeoutError):
        return None


def context_length(info: dict[str, Any]) -> int | None:
    """The server's context length from /server_info: its own figure (in `internal_states` on 0.5.x), else the
    asked `context_length`; None when neither is a positive integer."""
    states = info.get("internal_states")
    candidates = [s.get("context_length") for s in states if isinstance(s, dict)] if isinstance(states, list) else []
    for value in [*candidates, info.get("context_length")]:
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _server_record(info: dict[str, Any], spec: Any) -> ServerFacts:
    """What is stored about the server: its version, model and effective speculative settings."""
    from specmon.plausible import Figures

    name = info.get("served_model_name")
    return ServerFacts(
        version=spec.version,
        model_path=spec.model_path,
        served_model_name=name if isinstance(name, str) and len(name) <= 4096 else None,
        tp_size=Figures().count("tp_size", info.get("tp_size"), maximum=4096, minimum=1),
        context_length=context_length(info),
        speculative=Speculative(
            algorithm=spec.algorithm,
            draft_model_path=spec.draft_model_path,
            num_steps=spec.num_steps,
            eagle_topk=spec.eagle_topk,
            num_draft_tokens=spec.num_draft_tokens,
        ),
        avg_spec_accept_length_at_start=spec.avg_spec_accept_length,
        max_running_requests=spec.max_running_requests,
        cuda_graph_max_bs=spec.cuda_graph_max_bs,
    )
