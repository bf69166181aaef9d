"""The emulated scheduler: one thread running continuous-batched prefill and decode (or verify) steps.

Requests arrive from HTTP threads through `submit()` and report progress through their own queue. Every
`decode_log_interval` decode steps it logs SGLang's `Decode batch, ...` line and folds the window into the
cumulative acceptance counters (`avg_spec_accept_length`), which `/flush_cache` resets.
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
from typing import Any

from specmon.emulator.gpus import SimulatedGpus
from specmon.emulator.metrics import EmulatorMetrics
from specmon.emulator.sglang_log import SGLangLogWriter
from specmon.emulator.speed_model import EOS_TOKEN_ID, SpeedModel, TextModel, acceptance_rng

PREFILL_BASE_S = 0.006
PREFILL_PER_TOKEN_S = 0.00002


IDLE_METRICS_S = 30.0


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
    ) -> None:
        self.speed = speed
        self.cuda_graph = cuda_graph
        self.log = log
        self.gpus = gpus
        self.family = family
        self.max_total_tokens = max_total_tokens
        self.max_running_requests = max(1, max_running_requests)
        self.decode_log_interval = max(1, decode_log_interval)
        self.metrics = metrics
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
            self._waiting.append(request)
            self._cond.notify_all()

    def busy(self) -> tuple[int, int]:
        """(#queue-req, #running-req)."""
        with self._cond:
            return len(self._waiting), len(self._running)

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
        self.log.info("Cache flushed successfully!")
        return True

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
                room = self.max_running_requests - len(self._running)
                admitted, self._waiting = self._waiting[:room], self._waiting[room:]
                self._running = [r for r in self._running if not r.aborted]
            if admitted:
                self._prefill(admitted)
            if self._running:
                self._decode_step()

    def _refresh_idle_metrics(self) -> None:
        """Idle, SGLang refreshes its scheduler gauges every 30 s (`check_memory`): running and queue go to 0."""
        if self.metrics is None or time.monotonic() - self._win_started < IDLE_METRICS_S / self.speed.time_scale:
            return
        m = self.metrics
        for gauge in (m.num_running_reqs, m.num_queue_reqs, m.num_used_tokens, m.token_usage, m.gen_throughput):
            gauge.set(0)
        self._win_started = time.monotonic()

    def _used_tokens(self) -> int:
        return sum(r.prompt_tokens + r.completion_tokens for r in self._running)

    def _prefill(self, batch: list[GenRequest]) -> None:
        new_tokens = sum(r.prompt_tokens for r in batch)
        seconds = (PREFILL_BASE_S + PREFILL_PER_TOKEN_S * new_tokens) / self.speed.time_scale
        self.gpus.set_busy(0.9)
        time.sleep(seconds)
        usage = self._used_tokens() / self.max_total_tokens
        queued = len(self._waiting)
        if self.family == "new":
            self.log.info(
                f"Prefill batch, #new-seq: {len(batch)}, #new-token: {new_tokens}, #cached-token: 0, "
                f"token usage: {usage:.2f}, #running-req: {len(self._running)}, #queue-req: {queued}, "
                f"#pending-token: 0, cuda graph: True, input throughput (token/s): {new_tokens / seconds:.2f}"
            )
        else:
            self.log.info(
                f"Prefill batch. #new-seq: {len(batch)}, #new-token: {new_tokens}, #cached-token: 0, "
                f"token usage: {usage:.2f}, #running-req: {len(self._running)}, #queue-req: {queued}, "
            )
        if self.metrics is not None:
            self.metrics.realtime_tokens.labels(mode="prefill_compute").inc(new_tokens)
        now = time.monotonic()
        for request in batch:
            request.first_token_at = now
            request._append(1)
            self._publish(request)
            if not request.finished:
                with self._cond:
                    self._running.append(request)

    def _decode_step(self) -> None:
        batch = list(self._running)
        shape = self.speed.shape
        self.gpus.set_busy(min(1.0, 0.75 + 0.05 * len(batch)))
        time.sleep(self.speed.step_seconds(len(batch)))
        produced = 0
        for request in batch:
            if request.aborted:
                continue
            before = request.completion_tokens
            if shape.enabled:
                accepted = self.speed.draw_accepted(request.accept_rng)
                request.verify_ct += 1
                request.correct_drafts += accepted
                request.proposed_drafts += shape.draft_tokens - 1
                if len(request.accept_histogram) <= accepted:
                    request.accept_histogram.extend([0] * (accepted + 1 - len(request.accept_histogram)))
                request.accept_histogram[accepted] += 1
                self._win_verify += 1
                self._win_correct += accepted
                self._win_proposed += shape.draft_tokens - 1
                request._append(accepted + 1)
            else:
                request._append(1)
            produced += request.completion_tokens - before
            self._publish(request)
        self._win_tokens += produced
        with self._cond:
            self._running = [r for r in self._running if not r.finished and not r.aborted]
        self.forward_ct_decode += 1
        if self.forward_ct_decode % self.decode_log_interval == 0:
            self._log_decode_window(len(batch))

    def _log_decode_window(self, batch_size: int) -> None:
        now = time.monotonic()
        throughput = self._win_tokens / max(1e-9, now - self._win_started)
        usage = self._used_tokens() / self.max_total_tokens
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
        if self.metrics is not None:
            m = self.metrics
            m.num_running_reqs.set(batch_size)
            m.num_queue_reqs.set(queued)
            m.num_used_tokens.set(used)
            m.token_usage.set(usage)
            m.gen_throughput.set(throughput)
            m.is_cuda_graph.set(1 if self.cuda_graph else 0)
            m.realtime_tokens.labels(mode="decode").inc(self._win_tokens)
            if accept_len is not None:
                m.spec_accept_length.set(accept_len)
                m.spec_accept_rate.set(accept_rate)
        self._win_tokens = self._win_verify = self._win_correct = self._win_proposed = 0
        self._win_started = now

    def _publish(self, request: GenRequest) -> None:
        if request.finished:
            request.finished_ts = time.time()
            self._record_finished(request)
        request.events.put((request.text, request.completion_tokens, request.finished))

    def _record_finished(self, request: GenRequest) -> None:
        if self.metrics is None:
            return
        m = self.metrics
        m.num_requests_total.inc()
        m.prompt_tokens_total.inc(request.prompt_tokens)
        m.generation_tokens_total.inc(request.completion_tokens)
        if request.verify_ct:
            m.spec_verify_calls_total.inc(request.verify_ct)
        e2e = time.monotonic() - request.received_at
        m.e2e_request_latency.observe(e2e)
        if request.first_token_at is not None:
            ttft = request.first_token_at - request.received_at
            m.time_to_first_token.observe(ttft)
            if request.completion_tokens > 1:
                m.inter_token_latency.observe((e2e - ttft) / (request.completion_tokens - 1))

    # --- the response objects -----------------------------------------------------------------
    def meta_info(
        self, request: GenRequest, completion_tokens: int, *, final: bool, first: bool = False
    ) -> dict[str, Any]:
        """`meta_info` of a chunk (or of the final answer), with SGLang 0.5.16's keys (0.5.3's for legacy)."""
        if self.family == "legacy":
            meta: dict[str, Any] = {
                "id": request.rid,
                "finish_reason": request.finish_reason,
                "prompt_tokens": request.prompt_tokens,
                "completion_tokens": completion_tokens,
                "cached_tokens": 0,
                "weight_version": "default",
            }
            if final:
                meta["e2e_latency"] = (request.finished_ts or time.time()) - request.received_ts
                if self.speed.shape.enabled:
                    meta["spec_verify_ct"] = request.verify_ct
            return meta
        meta = {
            "id": request.rid,
            "finish_reason": request.finish_reason,
            "prompt_tokens": request.prompt_tokens,
            "weight_version": "default",
            "num_retractions": 0,
            "queue_time": 0.0,
            "reasoning_tokens": 0,
            "completion_tokens": completion_tokens,
            "cached_tokens": 0,
            "cached_tokens_details": None,
            "dp_rank": None,
        }
        now = time.time()
        if first and not final:
            meta["response_sent_to_client_ts"] = now
        if final:
            finished_ts = request.finished_ts or now
            e2e = finished_ts - request.received_ts
            meta["e2e_latency"] = e2e
            if request.verify_ct > 0:
                proposed = request.proposed_drafts
                meta.update(
                    {
                        "spec_accept_rate": request.correct_drafts / proposed if proposed else 0.0,
                        "spec_accept_length": request.completion_tokens / request.verify_ct,
                        "spec_num_correct_drafts": request.correct_drafts,
                        "spec_num_proposed_drafts": proposed,
                        "spec_verify_ct": request.verify_ct,
                        "spec_accepted_drafts": request.correct_drafts,
                        "spec_proposed_drafts": proposed,
                        "spec_correct_drafts_histogram": list(request.accept_histogram),
                        "spec_accept_histogram": list(request.accept_histogram),
                    }
                )
            decode_s = finished_ts - request.received_ts - (
                (request.first_token_at - request.received_at) if request.first_token_at else 0.0
            )
            meta.update(
                {
                    "request_received_ts": request.received_ts,
                    "api_server_dispatch_finish_ts": request.received_ts + 0.0005,
                    "response_sent_to_client_ts": now,
                    "request_finished_ts": finished_ts,
                    "decode_throughput": (request.completion_tokens - 1) / decode_s if decode_s > 0 else 0.0,
                }
            )
        return meta

    def new_request(self, prompt: str, prompt_tokens: int, sampling: dict[str, Any], seed: int) -> GenRequest:
        temperature = float(sampling.get("temperature", 1.0) or 0.0)
        stop = sampling.get("stop") or []
        if isinstance(stop, str):
            stop = [stop]
        sample_seed = sampling.get("sampling_seed")
        if sample_seed is None and temperature > 0:
            sample_seed = random.getrandbits(32)
        return GenRequest(
            prompt=prompt,
            prompt_tokens=prompt_tokens,
            max_new_tokens=max(1, int(sampling.get("max_new_tokens", 128) or 1)),
            ignore_eos=bool(sampling.get("ignore_eos", False)),
            text_model=TextModel(prompt, temperature, sample_seed),
            accept_rng=acceptance_rng(prompt, seed),
            stop=[s for s in stop if isinstance(s, str)],
        )
