"""The emulated scheduler: one thread running continuous-batched prefill and decode (or verify) steps.

Requests arrive from HTTP threads through `submit()` and report progress through their own queue. Every
`decode_log_interval` decode steps it logs SGLang's `Decode batch, ...` line and folds the window into the
cumulative acceptance counters (`avg_spec_accept_length`), which `/flush_cache` resets.

With `--dp-size` > 1 each request goes to one DP group (round robin, SGLang's default load balancing), which has
its own batch limit and KV pool; the metrics are reported per group, as each DP rank's scheduler reports its own.
A prefix cache (the radix cache, reduced to the longest common prefix with recent prompts) gives cached tokens.
"""

from __future__ import annotations

import os
import queue
import random
import signal
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from specmon.emulator.gpus import SimulatedGpus
from specmon.emulator.metrics import EmulatorMetrics
from specmon.emulator.sglang_log import SGLangLogWriter
from specmon.emulator.speed_model import (
    EOS_TOKEN_ID,
    SpeedModel,
    TextModel,
    acceptance_rng,
    class_accept_prob,
    request_class,
)

if TYPE_CHECKING:
    from specmon.emulator.records import RequestRecordWriter
from specmon.sglang.metric_names import (
    CACHE_HIT_RATE,
    CUDA_GRAPH_PASSES_TOTAL,
    DECODE_SUM_SEQ_LENS,
    FULL_TOKEN_USAGE,
    GEN_THROUGHPUT,
    IS_CUDA_GRAPH,
    KV_AVAILABLE_TOKENS,
    KV_USED_TOKENS,
    NEW_TOKEN_RATIO,
    NUM_QUEUE_REQS,
    NUM_RUNNING_REQS,
    NUM_USED_TOKENS,
    REALTIME_TOKENS_TOTAL,
    SPEC_ACCEPT_LENGTH,
    SPEC_ACCEPT_RATE,
    SPEC_NUM_DRAFT_TOKENS,
    SPEC_NUM_STEPS,
    TOKEN_USAGE,
)

PREFILL_BASE_S = 0.006
PREFILL_PER_TOKEN_S = 0.00002


IDLE_METRICS_S = 30.0
INIT_NEW_TOKEN_RATIO = 0.7  # SGLang's starting new_token_ratio (the gauge after the first prefill)
CHARS_PER_TOKEN = 4  # count_prompt_tokens' rule


class PrefixCache:
    """The radix cache, reduced: cached tokens are the longest prefix shared with a recent prompt."""

    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self._prompts: list[str] = []

    def match(self, prompt: str, prompt_tokens: int) -> int:
        """Tokens of `prompt` already cached (never all of them: SGLang computes at least the last one)."""
        longest = 0
        for seen in self._prompts:
            shared = len(os.path.commonprefix([seen, prompt]))
            longest = max(longest, shared)
        return max(0, min(longest // CHARS_PER_TOKEN, prompt_tokens - 1))

    def insert(self, prompt: str) -> None:
        if prompt in self._prompts:
            self._prompts.remove(prompt)
        self._prompts.append(prompt)
        del self._prompts[: -self.capacity]

    def clear(self) -> None:
        self._prompts.clear()


@dataclass
class GenRequest:
    """One generation request and its progress, shared between its HTTP thread and the scheduler."""

    prompt: str
    prompt_tokens: int
    max_new_tokens: int
    ignore_eos: bool
    text_model: TextModel
    accept_rng: random.Random
    stop: list[str] = field(default_factory=list)
    group: int = 0  # the DP group serving it
    cached_tokens: int = 0
    rid: str = field(default_factory=lambda: uuid.uuid4().hex)
    received_ts: float = field(default_factory=time.time)
    received_at: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    finished_ts: float | None = None
    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: dict | None = None
    verify_ct: int = 0
    correct_drafts: int = 0
    proposed_drafts: int = 0
    accept_histogram: list[int] = field(default_factory=list)
    accept_prob: float | None = None  # its class's (speed_model.request_class); None: the launch's
    accept_decay: float | None = None  # acceptance's decay along the chain; None: speed_model.DEPTH_DECAY
    custom_labels: dict[str, str] | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    input_ids: list[int] | None = None  # the prompt as sent where it came as token ids (`prompt` then spells them)
    aborted: bool = False
    events: queue.Queue = field(default_factory=queue.Queue)

    @property
    def completion_tokens(self) -> int:
        return len(self.output_ids)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def _append(self, count: int) -> None:
        for _ in range(count):
            index = len(self.output_ids)
            token = self.text_model.token_id(index)
            if not self.ignore_eos and index >= self.text_model.eos_position:
                self.finish_reason = {"type": "stop", "matched": EOS_TOKEN_ID}
                return
            self.output_ids.append(token)
            self.text += TextModel.piece(token, index)
            for stop in self.stop:
                if stop and stop in self.text:
                    self.text = self.text[: self.text.index(stop)]
                    self.finish_reason = {"type": "stop", "matched": stop}
                    return
            if len(self.output_ids) >= self.max_new_tokens:
                self.finish_reason = {"type": "length", "length": self.max_new_tokens}
                return


@dataclass
class _GroupWindow:
    """One DP group's decode figures since its last stats report."""

    batch: int = 0  # request-steps decoded
    tokens: int = 0
    verify: int = 0
    correct: int = 0
    proposed: int = 0


def crash_out_of_memory(log: SGLangLogWriter, speculative: bool, batch_size: int, tokens: int) -> None:
    """End the server as SGLang's scheduler ends on a CUDA out-of-memory mid-run (`--emulator-oom-at-step-tokens`):
    its traceback, then the launcher's sigquit line, then the whole process killed (requests in flight cut off)."""
    from specmon.emulator.startup import SITE

    frames = [
        ("managers/scheduler.py", 3392, "run_scheduler_process", "scheduler.event_loop_overlap()"),
        ("managers/scheduler.py", 1104, "event_loop_overlap", "batch_result = self.run_batch(batch)"),
        ("speculative/eagle_worker.py" if speculative else "managers/tp_worker.py", 287,
         "forward_batch_generation", "logits_output, can_run_cuda_graph = self.model_runner.forward("),
    ]
    lines = ["Scheduler hit an exception: Traceback (most recent call last):"]
    for path, lineno, func, code in frames:
        lines += [f'  File "{SITE}/sglang/srt/{path}", line {lineno}, in {func}', f"    {code}"]
    lines.append(f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {0.25 * tokens:.2f} GiB. GPU 0 has "
                 f"a total capacity of 139.81 GiB of which 212.00 MiB is free. (a decode step of {batch_size} running "
                 f"requests, {tokens} tokens)")
    log.error("\n".join(lines))
    log.error("Received sigquit from a child process. It usually means the child failed.")
    os.kill(os.getpid(), signal.SIGKILL)


class EmulatedScheduler:
    """Runs the batch loop on its own thread; HTTP threads call `submit`, `flush_cache` and read counters."""

    def __init__(
        self,
        speed: SpeedModel,
        log: SGLangLogWriter,
        gpus: SimulatedGpus,
        *,
        family: str,
        max_total_tokens: int,
        max_running_requests: int,
        decode_log_interval: int = 40,
        metrics: EmulatorMetrics | None = None,
        cuda_graph: bool = True,
        dp_groups: int = 1,
        spec_steps: int = 0,
        records: RequestRecordWriter | None = None,
        record_step_time: bool = False,
        oom_at_step_tokens: int | None = None,
    ) -> None:
        self.records = records
        self.oom_at_step_tokens = oom_at_step_tokens
        """`--emulator-oom-at-step-tokens`: a decode step holding this many tokens crashes the server."""
        self.step_time_dict: dict[int, list[float]] | None = {} if record_step_time else None
        """With SGLANG_RECORD_STEP_TIME: each decode log window's mean step time, by the batch size at its end
        (as SGLang's scheduler records it: the window's wall time over the log interval)."""
        self.speed = speed
        self.cuda_graph = cuda_graph
        self.log = log
        self.gpus = gpus
        self.family = family
        self.max_total_tokens = max_total_tokens  # each DP group's KV pool
        self.dp_groups = max(1, dp_groups)
        self.max_running_per_group = max(1, -(-max(1, max_running_requests) // self.dp_groups))
        self.decode_log_interval = max(1, decode_log_interval)
        self.metrics = metrics
        self.spec_steps = spec_steps
        self.prefix_cache = PrefixCache()
        self._next_group = 0
        self._group_windows: dict[int, _GroupWindow] = {g: _GroupWindow() for g in range(self.dp_groups)}
        self._last_stats_at = [time.monotonic()] * self.dp_groups
        self._cond = threading.Condition()
        self._waiting: list[GenRequest] = []
        self._running: list[GenRequest] = []
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._reset_counters()
        self.last_gen_throughput = 0.0

    def _reset_counters(self) -> None:
        self.forward_ct_decode = 0
        self._win_tokens = 0
        self._win_verify = 0
        self._win_correct = 0
        self._win_proposed = 0
        self._win_started = time.monotonic()
        self.cum_accept_tokens = 0
        self.cum_verify = 0

    # --- called from HTTP threads -------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="emulator-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def submit(self, request: GenRequest) -> None:
        with self._cond:
            request.group = self._next_group
            self._next_group = (self._next_group + 1) % self.dp_groups
            self._waiting.append(request)
            self._cond.notify_all()

    def busy(self) -> tuple[int, int]:
        """(#queue-req, #running-req)."""
        with self._cond:
            return len(self._waiting), len(self._running)

    def rids_in_flight(self) -> list[str]:
        with self._cond:
            return [r.rid for r in (*self._waiting, *self._running)]

    def flush_cache(self) -> bool:
        """Reset the acceptance counters if idle (True), like SGLang's `/flush_cache`; False while busy."""
        with self._cond:
            waiting, running = len(self._waiting), len(self._running)
            if waiting or running:
                self.log.warning(
                    f"Cache not flushed because there are pending requests. #queue-req: {waiting}, "
                    f"#running-req: {running}"
                )
                return False
            self._reset_counters()
            self.prefix_cache.clear()
        self.log.info("Cache flushed successfully!")
        return True

    def step_times(self) -> dict[str, list[float]] | None:
        """The recorded step times as SGLang's /server_info gives them (batch sizes as strings), None when not
        recorded."""
        if self.step_time_dict is None:
            return None
        with self._cond:
            return {str(batch): list(times) for batch, times in self.step_time_dict.items()}

    def avg_spec_accept_length(self) -> float | None:
        with self._cond:
            if not self.speed.shape.enabled or self.cum_verify == 0:
                return None
            return self.cum_accept_tokens / self.cum_verify

    # --- the scheduler thread -----------------------------------------------------------------
    def _loop(self) -> None:
        try:
            self._run_batches()
        except Exception:
            # Like SGLang: a scheduler exception is logged and takes the whole server down.
            self.log.error(f"Scheduler hit an exception: {traceback.format_exc().rstrip()}")
            self.log.error("Received sigquit from a child process. It usually means the child failed.")
            os.kill(os.getpid(), signal.SIGKILL)

    def _run_batches(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and not self._waiting and not self._running:
                    self.gpus.set_busy(0.0)
                    self._refresh_idle_metrics()
                    self._cond.wait(0.5)
                if self._stopped:
                    return
                self._running = [r for r in self._running if not r.aborted]
                admitted = self._admit()
            if admitted:
                self._prefill(admitted)
            if self._running:
                self._decode_step()

    def _admit(self) -> list[GenRequest]:
        """Move waiting requests into the batch while their DP group has room (call with the lock held)."""
        running = [0] * self.dp_groups
        for request in self._running:
            running[request.group] += 1
        admitted, still = [], []
        for request in self._waiting:
            if running[request.group] < self.max_running_per_group:
                running[request.group] += 1
                admitted.append(request)
            else:
                still.append(request)
        self._waiting = still
        return admitted

    def _refresh_idle_metrics(self) -> None:
        """Idle, each SGLang scheduler re-reports its gauges every 30 s: running and queue go to 0."""
        if self.metrics is None:
            return
        now = time.monotonic()
        for group in range(self.dp_groups):
            if now - self._last_stats_at[group] >= IDLE_METRICS_S / self.speed.time_scale:
                self._log_stats(group, {GEN_THROUGHPUT: 0.0})

    def _used_tokens(self, group: int | None = None) -> int:
        return sum(r.prompt_tokens + r.completion_tokens for r in self._running if group in (None, r.group))

    def _log_stats(self, group: int, values: dict[str, float]) -> None:
        """One stats report of a DP group's schedulers: the batch, queue and KV pool now, plus `values`."""
        if self.metrics is None:
            return
        with self._cond:
            used = self._used_tokens(group)
            running = sum(1 for r in self._running if r.group == group)
            queued = sum(1 for r in self._waiting if r.group == group)
        usage = used / self.max_total_tokens
        stats = {
            NUM_RUNNING_REQS: running,
            NUM_QUEUE_REQS: queued,
            TOKEN_USAGE: usage,
            FULL_TOKEN_USAGE: usage,
            NUM_USED_TOKENS: used,
            KV_USED_TOKENS: used,
            KV_AVAILABLE_TOKENS: self.max_total_tokens - used,
            IS_CUDA_GRAPH: 1.0 if self.cuda_graph else 0.0,
        }
        stats.update(values)
        self.metrics.scheduler.log_stats(group, stats)
        self._last_stats_at[group] = time.monotonic()

    def _prefill(self, batch: list[GenRequest]) -> None:
        admitted_at = time.monotonic()
        for request in batch:
            request.cached_tokens = self.prefix_cache.match(request.prompt, request.prompt_tokens)
            self.prefix_cache.insert(request.prompt)
        cached = sum(r.cached_tokens for r in batch)
        new_tokens = sum(r.prompt_tokens for r in batch) - cached
        seconds = (PREFILL_BASE_S + PREFILL_PER_TOKEN_S * new_tokens) / self.speed.time_scale
        self.gpus.set_busy(0.9)
        time.sleep(seconds)
        usage = self._used_tokens() / (self.max_total_tokens * self.dp_groups)
        queued = len(self._waiting)
        if self.family == "new":
            self.log.info(
                f"Prefill batch, #new-seq: {len(batch)}, #new-token: {new_tokens}, #cached-token: {cached}, "
                f"token usage: {usage:.2f}, #running-req: {len(self._running)}, #queue-req: {queued}, "
                f"#pending-token: 0, cuda graph: True, input throughput (token/s): {new_tokens / seconds:.2f}"
            )
        else:
            self.log.info(
                f"Prefill batch. #new-seq: {len(batch)}, #new-token: {new_tokens}, #cached-token: {cached}, "
                f"token usage: {usage:.2f}, #running-req: {len(self._running)}, #queue-req: {queued}, "
            )
        self._report_prefill(batch, admitted_at, seconds)
        now = time.monotonic()
        for request in batch:
            request.first_token_at = now
            request._append(1)
            self._publish(request)
            if not request.finished:
                with self._cond:
                    self._running.append(request)

    def _report_prefill(self, batch: list[GenRequest], admitted_at: float, seconds: float) -> None:
        """Each DP group's prefill stats report (SGLang's `report_prefill_stats`) and request timings."""
        if self.metrics is None:
            return
        sched = self.metrics.scheduler
        graph_mode = "prefill_cuda_graph" if self.cuda_graph else "prefill_none"
        for group in sorted({r.group for r in batch}):
            mine = [r for r in batch if r.group == group]
            hit = sum(r.cached_tokens for r in mine)
            computed = sum(r.prompt_tokens for r in mine) - hit
            for request in mine:
                sched.observe_queue_time(group, max(0.0, admitted_at - request.received_at))
                sched.observe_stage(group, "request_process", 0.0001)
                sched.observe_stage(group, "prefill_forward", seconds)
            sched.inc(CUDA_GRAPH_PASSES_TOTAL, group, graph_mode)
            sched.inc(REALTIME_TOKENS_TOTAL, group, "prefill_compute", computed)
            sched.inc(REALTIME_TOKENS_TOTAL, group, "prefill_cache", hit)
            self._log_stats(group, {
                CACHE_HIT_RATE: hit / (hit + computed) if hit + computed else 0.0,
                NEW_TOKEN_RATIO: INIT_NEW_TOKEN_RATIO,
            })

    def _decode_step(self) -> None:
        batch = list(self._running)
        shape = self.speed.shape
        step_tokens_held = len(batch) * (shape.draft_tokens if shape.enabled else 1)
        if self.oom_at_step_tokens is not None and step_tokens_held >= self.oom_at_step_tokens:
            crash_out_of_memory(self.log, shape.enabled, len(batch), step_tokens_held)
        self.gpus.set_busy(min(1.0, 0.75 + 0.05 * len(batch)))
        time.sleep(self.speed.step_seconds(len(batch)))
        produced = 0
        step_tokens: dict[int, int] = {}
        for request in batch:
            if request.aborted:
                continue
            window = self._group_windows[request.group]
            window.batch += 1
            before = request.completion_tokens
            if shape.enabled:
                accepted = self.speed.draw_accepted(request.accept_rng, request.accept_prob, request.accept_decay)
                request.verify_ct += 1
                request.correct_drafts += accepted
                request.proposed_drafts += shape.draft_tokens - 1
                if len(request.accept_histogram) <= accepted:
                    request.accept_histogram.extend([0] * (accepted + 1 - len(request.accept_histogram)))
                request.accept_histogram[accepted] += 1
                self._win_verify += 1
                self._win_correct += accepted
                self._win_proposed += shape.draft_tokens - 1
                window.verify += 1
                window.correct += accepted
                window.proposed += shape.draft_tokens - 1
                request._append(accepted + 1)
            else:
                request._append(1)
            produced += request.completion_tokens - before
            window.tokens += request.completion_tokens - before
            step_tokens[request.group] = step_tokens.get(request.group, 0) + request.completion_tokens - before
            self._publish(request)
        self._win_tokens += produced
        self._count_decode_step(step_tokens)
        with self._cond:
            self._running = [r for r in self._running if not r.finished and not r.aborted]
        self.forward_ct_decode += 1
        if self.forward_ct_decode % self.decode_log_interval == 0:
            self._log_decode_window(len(batch))

    def _count_decode_step(self, step_tokens: dict[int, int]) -> None:
        """Every decode iteration: each DP group's realtime decode tokens and CUDA-graph passes."""
        if self.metrics is None:
            return
        graph_mode = "decode_cuda_graph" if self.cuda_graph else "decode_none"
        for group, tokens in step_tokens.items():
            self.metrics.scheduler.inc(REALTIME_TOKENS_TOTAL, group, "decode", tokens)
            self.metrics.scheduler.inc(CUDA_GRAPH_PASSES_TOTAL, group, graph_mode)

    def _report_decode_windows(self, elapsed: float) -> None:
        """Each DP group's decode stats report (SGLang's `report_decode_stats` at the log interval)."""
        shape = self.speed.shape
        for group, window in self._group_windows.items():
            if window.batch:
                values = {
                    GEN_THROUGHPUT: window.tokens / max(1e-9, elapsed),
                    CACHE_HIT_RATE: 0.0,
                    DECODE_SUM_SEQ_LENS: self._used_tokens(group),
                }
                if shape.enabled and window.verify:
                    values.update({
                        SPEC_ACCEPT_LENGTH: window.tokens / window.verify,
                        SPEC_ACCEPT_RATE: window.correct / max(1, window.proposed),
                        SPEC_NUM_STEPS: self.spec_steps,
                        SPEC_NUM_DRAFT_TOKENS: shape.draft_tokens,
                    })
                self._log_stats(group, values)
            self._group_windows[group] = _GroupWindow()

    def _log_decode_window(self, batch_size: int) -> None:
        now = time.monotonic()
        throughput = self._win_tokens / max(1e-9, now - self._win_started)
        usage = self._used_tokens() / (self.max_total_tokens * self.dp_groups)
        used = self._used_tokens()
        queued = len(self._waiting)
        spec = ""
        accept_len = accept_rate = None
        if self.speed.shape.enabled and self._win_verify:
            accept_len = self._win_tokens / self._win_verify
            accept_rate = self._win_correct / max(1, self._win_proposed)
            with self._cond:
                self.cum_accept_tokens += self._win_tokens
                self.cum_verify += self._win_verify
            if self.family == "new":
                spec = f"accept len: {accept_len:.2f}, accept rate: {accept_rate:.2f}, "
            else:
                spec = f"accept len: {accept_len:.2f}, "
        if self.family == "new":
            self.log.info(
                f"Decode batch, #running-req: {batch_size}, #token: {used}, token usage: {usage:.2f}, {spec}"
                f"cuda graph: {self.cuda_graph}, gen throughput (token/s): {throughput:.2f}, #queue-req: {queued}"
            )
        else:
            self.log.info(
                f"Decode batch. #running-req: {batch_size}, #token: {used}, token usage: {usage:.2f}, {spec}"
                f"cuda graph: {self.cuda_graph}, gen throughput (token/s): {throughput:.2f}, #queue-req: {queued}, "
            )
        self.last_gen_throughput = throughput
        if self.step_time_dict is not None:
            with self._cond:
                self.step_time_dict.setdefault(batch_size, []).append(
                    (now - self._win_started) / self.decode_log_interval)
        if self.metrics is not None:
            self._report_decode_windows(now - self._win_started)
        self._win_tokens = self._win_verify = self._win_correct = self._win_proposed = 0
        self._win_started = now

    def _publish(self, request: GenRequest) -> None:
        if request.finished:
            request.finished_ts = time.time()
            self._record_finished(request)
            if self.records is not None:
                self.records.write(request)
        request.events.put((request.text, request.completion_tokens, request.finished))

    def _record_finished(self, request: GenRequest) -> None:
        if self.metrics is None:
            return
        e2e = time.monotonic() - request.received_at
        ttft = request.first_token_at - request.received_at if request.first_token_at is not None else None
        self.metrics.finished(prompt_tokens=request.prompt_tokens, cached_tokens=request.cached_tokens,
                              completion_tokens=request.completion_tokens, verify_ct=request.verify_ct,
                              e2e_s=e2e, ttft_s=ttft)

    # --- the response objects -----------------------------------------------------------------
    def new_request(self, prompt: str, prompt_tokens: int, sampling: dict[str, Any], seed: int) -> GenRequest:
        temperature = float(sampling.get("temperature", 1.0) or 0.0)
        stop = sampling.get("stop") or []
        if isinstance(stop, str):
            stop = [stop]
        sample_seed = sampling.get("sampling_seed")
        if sample_seed is None and temperature > 0:
            sample_seed = random.getrandbits(32)
        traffic_class = request_class(prompt, prompt_tokens)
        return GenRequest(
            accept_prob=None if traffic_class is None else class_accept_prob(self.speed.accept_prob, traffic_class),
            sampling=dict(sampling),
            prompt=prompt,
            prompt_tokens=prompt_tokens,
            max_new_tokens=max(1, int(sampling.get("max_new_tokens", 128) or 1)),
            ignore_eos=bool(sampling.get("ignore_eos", False)),
            text_model=TextModel(prompt, temperature, sample_seed),
            accept_rng=acceptance_rng(prompt, seed),
            stop=[s for s in stop if isinstance(s, str)],
        )
