"""The emulated launch: SGLang's startup log, paced, with memory rising on the simulated GPUs.

Order and wording follow the real 0.5.16 logs (new family) or SGLang 0.5.3 (legacy family): weights for the
target (then the draft), KV pools, CUDA-graph captures (target prefill, target decode/verify, draft prefill,
draft decode, draft extend), `max_total_num_tokens=...`. Failures (`--emulator-fail`, or memory that does not
fit) end the process the way SGLang's do.
"""

from __future__ import annotations

import math
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specmon.emulator.gpus import SimulatedGpus
from specmon.emulator.launch_args import LaunchConfig, capture_batch_sizes, public_args
from specmon.emulator.sglang_log import SGLangLogWriter, tqdm_frame

GIB = 1024**3
PREFILL_NUM_TOKENS = [4, 8, 12, 16, 20, 24, 28, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240,
                      256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 832, 896, 960, 1024, 1280,
                      1536, 1792, 2048, 2304, 2560, 2816, 3072, 3328, 3584, 3840, 4096, 4608, 5120, 5632, 6144,
                      6656, 7168, 7680, 8192]
SITE = "/usr/local/lib/python3.12/dist-packages"
OOM_MEM_FRACTION = 0.95  # above this the emulated capture runs out of memory, like a real one near 1.0


class StartupFailed(Exception):
    """The launch failed; the log already holds SGLang's failure text. `exit_kind` says how the process ends."""

    def __init__(self, exit_kind: str, code: int = 1) -> None:
        super().__init__(exit_kind)
        self.exit_kind = exit_kind  # "sigkill" (scheduler crash) or "exit"
        self.code = code


@dataclass
class StartupResult:
    """What the load produced, for the scheduler and /server_info."""

    max_total_num_tokens: int
    memory_usage: dict[str, float]
    available_gib: float
    architecture: str = "LlamaForCausalLM"
    model_type: str = "llama"


def _model_params_b(path: str | None) -> float:
    match = re.search(r"(\d+(?:\.\d+)?)[bB](?![a-zA-Z])", path or "")
    return float(match.group(1)) if match else 8.0


def _bytes_per_param(args: dict[str, Any], path: str | None) -> float:
    quant = (args.get("quantization") or "").lower()
    text = (path or "").lower()
    if "awq" in quant or "gptq" in quant or "int4" in text or "awq" in text or "fp4" in quant:
        return 0.5
    if "fp8" in quant or "fp8" in text:
        return 1.0
    return 2.0


@dataclass(frozen=True)
class ModelProfile:
    """The emulated target model: its size on the GPUs and the KV bytes one token takes."""

    architecture: str
    model_type: str
    params_b: float
    bytes_per_param: float
    kv_bytes_per_token: float  # the whole model's, before tensor-parallel sharding
    mla: bool = False  # MLA caches one latent per token (logged as `KV size`), replicated across TP ranks


def model_profile(args: dict[str, Any]) -> ModelProfile:
    """A plausible profile from the model path's name (Kimi-K2.5, DeepSeek-V3, or a Llama of its size)."""
    path = str(args.get("model_path") or "")
    name = path.lower()
    if "kimi" in name:
        return ModelProfile("KimiK25ForConditionalGeneration", "kimi_k25", 1026.0, 0.55, 61 * 576 * 2, mla=True)
    if "deepseek" in name:
        return ModelProfile("DeepseekV3ForCausalLM", "deepseek_v3", 671.0, 1.0, 61 * 576 * 2, mla=True)
    params_b = _model_params_b(path)
    return ModelProfile(
        "LlamaForCausalLM", "llama", params_b, _bytes_per_param(args, path), 131072 * (params_b / 8.0) ** 0.75
    )


class StartupScript:
    """Writes the startup log and moves the simulated GPU memory; `run()` returns a StartupResult or raises."""

    def __init__(
        self, config: LaunchConfig, log: SGLangLogWriter, gpus: SimulatedGpus,
        rendezvous: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.rendezvous = rendezvous  # blocks until every node of a multi-node launch has joined
        self.args = config.server_args
        self.family = config.options.family
        self.log = log
        self.gpus = gpus
        self.speed = config.options.speed
        self.tp = max(1, int(self.args.get("tp_size") or 1))
        self.fail = config.options.fail
        self.profile = model_profile(self.args)

    # --- helpers ------------------------------------------------------------------------------
    def pause(self, seconds: float) -> None:
        time.sleep(seconds / self.speed)

    def real(self, seconds: float) -> float:
        """Emulated seconds as the wall-clock seconds they take under --emulator-speed: what the log says (its
        timestamps are the wall clock, so its elapsed times must be too)."""
        return seconds / self.speed

    def avail(self) -> float:
        return self.gpus.avail_gib()

    def _progress(self, descs: list[str], total_s: float, *, shards: bool = False, on_item=None) -> None:
        """A tqdm bar over len(descs) items taking total_s emulated seconds."""
        total = len(descs)
        legacy_shards = shards and self.family == "legacy"
        if not shards:
            self.log.frame(tqdm_frame("", 0, total, 0.0))
        step = total_s / max(1, total)
        for index, desc in enumerate(descs):
            elapsed = self.real(step * index)
            self.log.frame(tqdm_frame(desc, index, total, elapsed, shards_style=shards), newline=legacy_shards)
            self.pause(step)
            if on_item is not None:
                on_item(index)
        final = tqdm_frame(descs[-1] if descs else "", total, total, self.real(total_s), shards_style=shards)
        self.log.frame(final, newline=True)

    def _scheduler_crash(self, frames: list[tuple[str, int, str, str]], error: str, *, chained: str = "") -> None:
        lines = ["Scheduler hit an exception: Traceback (most recent call last):"]
        for path, lineno, func, code in frames:
            lines.append(f'  File "{SITE}/sglang/srt/{path}", line {lineno}, in {func}')
            lines.append(f"    {code}")
        lines.append(error)
        if chained:
            lines.append(chained)
        tag = 0 if self.tp > 1 else None
        self.log.error("\n".join(lines), tag)
        self.log.raw("")
        self.log.error("Received sigquit from a child process. It usually means the child failed.")
        raise StartupFailed("sigkill")

    _SCHEDULER_FRAMES = [
        ("managers/scheduler.py", 3383, "run_scheduler_process", "scheduler = Scheduler("),
        ("managers/scheduler.py", 412, "__init__", "self.init_model_worker()"),
    ]

    # --- the sequence -------------------------------------------------------------------------
    def run(self) -> StartupResult:
        args = self.args
        spec = args.get("speculative_algorithm")
        profile = self.profile
        params_b = profile.params_b
        target_gib = params_b * 1e9 * profile.bytes_per_param / GIB / self.tp
        draft_gib = 0.0
        if spec == "STANDALONE":
            draft_gib = _model_params_b(args.get("speculative_draft_model_path") or "1b") * 2e9 / GIB / self.tp
        elif spec in ("EAGLE", "EAGLE3"):
            draft_gib = min(target_gib * (0.06 if spec == "EAGLE3" else 0.1), 3.2 / self.tp)

        self.log.info(self._server_args_line())
        if self.family == "new" and not self.args.get("node_rank"):
            self.log.info("Using default HuggingFace chat template with detected content format: string")
        self.pause(3.5)
        self.gpus.start_process()
        self._init_distributed()
        self._load_weights(target_gib, profile.architecture, shards=max(1, min(8, math.ceil(target_gib * self.tp / 5))))
        if self.family == "new" and spec and spec != "NGRAM":
            self._init_distributed(draft=True)
            self._load_weights(draft_gib, self._draft_type(spec), shards=1, draft=True)
        kv_gib, tokens = self._kv_pool(target_gib + draft_gib, params_b)
        if self.family == "new" and spec and spec != "NGRAM":
            self._draft_kv(tokens, params_b)
            self.log.all_ranks("SPECULATIVE_MOE_RUNNER_BACKEND is not initialized, using auto backend")
            self.log.all_ranks("SPECULATIVE_MOE_A2A_BACKEND is not initialized, using none backend")
        graph_gib = self._captures(spec, tokens, draft_gib, params_b)
        max_running = args.get("max_running_requests")
        self.log.info(
            f"max_total_num_tokens={tokens}, chunked_prefill_size={args.get('chunked_prefill_size')}, "
            f"max_prefill_tokens={args.get('max_prefill_tokens')}, max_running_requests={max_running}, "
            f"context_len={args.get('context_length')}, available_gpu_mem={self.avail():.2f} GB",
            0 if self.tp > 1 else None,
        )
        if self.family == "new":
            self.log.info(
                "Tree cache initialized: source=default impl=RadixCache hybrid_swa=False hybrid_ssm=False "
                "hierarchical=False streaming_wrapped=False",
                0 if self.tp > 1 else None,
            )
        return StartupResult(
            max_total_num_tokens=tokens,
            memory_usage={
                "weight": round(target_gib + draft_gib, 2),
                "kvcache": round(kv_gib, 2),
                "token_capacity": tokens,
                "graph": round(graph_gib, 2),
            },
            available_gib=self.avail(),
            architecture=profile.architecture,
            model_type=profile.model_type,
        )

    def _server_args_line(self) -> str:
        body = ", ".join(f"{key}={value!r}" for key, value in public_args(self.args).items())
        return f"server_args=ServerArgs({body})"

    @staticmethod
    def _draft_type(spec: str) -> str:
        types = {"EAGLE3": "LlamaForCausalLMEagle3", "EAGLE": "LlamaForCausalLMEagle", "DFLASH": "DFlashDraftModel"}
        return types.get(spec, "LlamaForCausalLM")

    def _init_distributed(self, draft: bool = False) -> None:
        self.log.all_ranks("Init torch distributed begin.")
        if not draft and self.rendezvous is not None:
            self.rendezvous()
        self.pause(0.0 if draft else 0.2)
        if self.family == "new":
            used = 0.0 if draft else 0.09
            if not draft:
                self.gpus.add_gib(used)
            self.log.all_ranks(f"Init torch distributed ends. elapsed={self.real(0.0 if draft else 0.2):.2f} s, "
                               f"mem usage={used:.2f} GB")
        else:
            self.log.all_ranks("Init torch distributed ends. mem usage=0.00 GB")

    def _load_weights(self, gib: float, model_type: str, *, shards: int, draft: bool = False) -> None:
        start_avail = self.avail()
        self.log.all_ranks(f"Load weight begin. avail mem={start_avail:.2f} GB")
        seconds = 1.0 if draft else 1.0 * shards
        desc = "Multi-thread loading shards" if self.family == "new" else "Loading safetensors checkpoint shards"
        keyerror = self.fail == "weight-keyerror" and (draft or not self.args.get("speculative_algorithm"))
        self.gpus.set_transfer(12_000_000)

        def loaded(index: int) -> None:
            self.gpus.add_gib(gib / shards)
            if keyerror:
                self.gpus.set_transfer(0)
                self.log.end_frames()
                draft_frames = [
                    ("managers/scheduler.py", 561, "maybe_init_draft_worker", "self.draft_worker = DraftWorkerClass("),
                    ("speculative/eagle_worker_v2.py", 187, "__init__", "self._draft_worker = EagleDraftWorker("),
                    ("speculative/eagle_worker_v2.py", 246, "__init__", "self.draft_worker = TpModelWorker("),
                    ("managers/tp_worker.py", 262, "__init__", "self._init_model_runner()"),
                    ("managers/tp_worker.py", 345, "_init_model_runner", "self._model_runner = ModelRunner("),
                    ("model_executor/model_runner.py", 415, "__init__", "self.initialize(pre_model_load_memory)"),
                    ("model_executor/model_runner.py", 598, "initialize", "self.load_model()"),
                    ("model_executor/model_runner.py", 1312, "load_model", "self.model = self.loader.load_model("),
                ] if draft else [
                    ("managers/scheduler.py", 540, "init_tp_model_worker", "self.tp_worker = TpModelWorker("),
                    ("managers/tp_worker.py", 345, "_init_model_runner", "self._model_runner = ModelRunner("),
                    ("model_executor/model_runner.py", 1312, "load_model", "self.model = self.loader.load_model("),
                ]
                self._scheduler_crash(
                    [*self._SCHEDULER_FRAMES, *draft_frames,
                     ("model_loader/loader.py", 681, "load_model",
                      "self.load_weights_and_postprocess(model, self._get_all_weights(model_config, model), target_device)"),
                     ("models/llama_eagle3.py" if draft else "models/llama.py", 245, "load_weights",
                      "param = params_dict[name]")],
                    "KeyError: 'model.layers.0.self_attn.qkv_proj.weight'",
                )

        self._progress([desc] * shards, seconds, shards=True, on_item=loaded)
        self.gpus.set_transfer(0)
        end_avail = self.avail()
        usage = start_avail - end_avail
        if self.family == "new":
            self.log.all_ranks(
                f"Load weight end. elapsed={self.real(seconds):.2f} s, type={model_type}, avail mem={end_avail:.2f} GB, "
                f"mem usage={usage:.2f} GB."
            )
        else:
            self.log.all_ranks(
                f"Load weight end. type={model_type}, dtype=torch.bfloat16, avail mem={end_avail:.2f} GB, "
                f"mem usage={usage:.2f} GB."
            )

    def _kv_pool(self, weights_gib: float, params_b: float) -> tuple[float, int]:
        fraction = float(self.args.get("mem_fraction_static") or 0.88)
        total_gib = 143771 / 1024
        pool_gib = total_gib * fraction - (total_gib - self.avail())
        if self.fail == "not-enough-memory" or pool_gib < 1.0:
            self._scheduler_crash(
                [*self._SCHEDULER_FRAMES,
                 ("model_executor/model_runner.py", 512, "initialize", "self.init_memory_pool(")
                 if self.family == "new" else
                 ("model_executor/model_runner.py", 1724, "init_memory_pool", "raise RuntimeError(")],
                "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
                + (f"mem_fraction_static={fraction}" if self.family == "new"
                   else f"self.server_args.mem_fraction_static={fraction}"),
            )
        profile = self.profile
        bytes_per_token = profile.kv_bytes_per_token / (1 if profile.mla else self.tp)
        tokens = int(pool_gib * GIB / bytes_per_token) // 16 * 16
        self.pause(0.5)
        self.gpus.add_gib(pool_gib)
        self.log.all_ranks(f"KV Cache is allocated. {self._kv_sizes(tokens, pool_gib)}")
        self.log.all_ranks(f"Memory pool end. avail mem={self.avail():.2f} GB")
        return pool_gib, tokens

    def _kv_sizes(self, tokens: int, gib: float, *, mla: bool | None = None) -> str:
        dtype = "dtype: torch.bfloat16, " if self.family == "new" else ""
        if self.profile.mla if mla is None else mla:
            return f"{dtype}#tokens: {tokens}, KV size: {gib:.2f} GB"
        return f"{dtype}#tokens: {tokens}, K size: {gib / 2:.2f} GB, V size: {gib / 2:.2f} GB"

    def _draft_kv(self, tokens: int, params_b: float) -> float:
        # The EAGLE draft is one Llama-style layer with the target's hidden size.
        bytes_per_token = 2 * 2 * 1024 * (params_b / 8.0) ** 0.5 / self.tp
        gib = tokens * bytes_per_token / GIB
        self.gpus.add_gib(gib)
        self.log.all_ranks(f"KV Cache is allocated. {self._kv_sizes(tokens, gib, mla=False)}")
        self.log.all_ranks(f"Memory pool end. avail mem={self.avail():.2f} GB")
        return gib

    # --- CUDA graphs --------------------------------------------------------------------------
    def _capture(self, begin: str | None, end_prefix: str, descs: list[str], seconds: float, gib: float,
                 *, oom: bool = False) -> float:
        """Log one graph capture: its begin line (None: already logged), a frame per item, its end line."""
        start = self.avail()
        if begin is not None:
            self.log.all_ranks(begin.format(avail=start))
        per_item = gib / max(1, len(descs))

        def captured(index: int) -> None:
            self.gpus.add_gib(per_item)
            if oom and index == 1:
                self.gpus.add_gib(max(0.0, self.avail() - 0.6))
                self.log.end_frames()
                self._oom_crash()

        self._progress(descs, seconds, on_item=captured)
        end = self.avail()
        if self.family == "new":
            self.log.all_ranks(f"{end_prefix} end. elapsed={self.real(seconds):.2f} s, mem usage={start - end:.2f} GB, "
                               f"avail mem={end:.2f} GB.")
        else:
            self.log.all_ranks(f"{end_prefix} end. Time elapsed: {self.real(seconds):.2f} s. mem usage={start - end:.2f} "
                               f"GB. avail mem={end:.2f} GB.")
        return start - end

    def _oom_crash(self) -> None:
        free_mib = self.avail() * 1024
        message = (
            f"CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a total capacity of 139.81 GiB of which "
            f"{free_mib:.2f} MiB is free. Including non-PyTorch memory, this process has 139.21 GiB memory in use. "
            "Of the allocated memory 136.02 GiB is allocated by PyTorch, and 1.17 GiB is reserved by PyTorch but "
            "unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
            "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        )
        solutions = (
            "Possible solutions:\n"
            "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
            "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
            "3. disable torch compile by not using --enable-torch-compile\n"
            "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
            "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
        )
        runner = "model_executor/runner/decode_cuda_graph_runner.py" if self.family == "new" else \
            "model_executor/cuda_graph_runner.py"
        self._scheduler_crash(
            [*self._SCHEDULER_FRAMES,
             ("model_executor/model_runner.py", 2147, "init_device_graphs", "self.graph_runner = graph_runners[self.device](self)"),
             (runner, 388, "__init__", "raise Exception(")],
            f"Exception: Capture cuda graph failed: {message}\n{solutions}",
        )

    def _captures(self, spec: str | None, tokens: int, draft_gib: float, params_b: float) -> float:
        args = self.args
        max_bs = int(args.get("cuda_graph_max_bs_decode") or 8)
        bs_list = capture_batch_sizes(max_bs, spec is not None)
        oom = self.fail == "oom-during-capture" or float(args.get("mem_fraction_static") or 0) > OOM_MEM_FRACTION
        if args.get("disable_cuda_graph"):
            return 0.0
        total = 0.0
        scale = min(3.0, max(0.5, params_b / 8.0) ** 0.5)
        draft_tokens = int(args.get("speculative_num_draft_tokens") or 1)
        batch_descs = [f"Capturing batches (bs={bs} avail_mem={{avail:.2f}} GB)" for bs in reversed(bs_list)]
        if self.family == "legacy":
            self.log.all_ranks(f"Capture cuda graph begin. This can take up to several minutes. avail mem={self.avail():.2f} GB")
            self.log.all_ranks(f"Capture cuda graph bs {bs_list}")
            total += self._capture(None, "Capture cuda graph", self._fill(batch_descs), 3.0, 0.4 * scale, oom=oom)
            if spec in ("EAGLE", "EAGLE3", "STANDALONE"):
                self._init_distributed(draft=True)
                self._load_weights(draft_gib, self._draft_type(spec), shards=1, draft=True)
                self._draft_kv(tokens, params_b)
                for graph, seconds, gib in (("draft", 2.5, 0.3), ("draft extend", 1.5, 0.2)):
                    total += self._capture(
                        f"Capture {graph} cuda graph begin. This can take up to several minutes. avail mem={{avail:.2f}} GB",
                        f"Capture {graph} cuda graph", self._fill(batch_descs), seconds, gib,
                    )
            return total
        prefill_descs = [f"Capturing num tokens (num_tokens={n} avail_mem={{avail:.2f}} GB)" for n in reversed(PREFILL_NUM_TOKENS)]
        total += self._capture(
            f"Capture target prefill CUDA graph begin. backend=breakable, num_tokens={PREFILL_NUM_TOKENS}, avail mem={{avail:.2f}} GB",
            "Capture target prefill CUDA graph", self._fill(prefill_descs), 3.0, 0.24 * scale,
        )
        phase, per_req = ("verify", draft_tokens) if spec else ("decode", 1)
        total += self._capture(
            f"Capture target {phase} CUDA graph begin. backend=full, num_tokens_per_req={per_req}, bs={bs_list}, avail mem={{avail:.2f}} GB",
            f"Capture target {phase} CUDA graph", self._fill(batch_descs), 3.0, 0.3 * scale, oom=oom,
        )
        if spec in ("EAGLE", "EAGLE3", "STANDALONE"):
            topk = int(args.get("speculative_eagle_topk") or 1)
            total += self._capture(
                f"Capture draft prefill CUDA graph begin. backend=breakable, num_tokens={PREFILL_NUM_TOKENS}, avail mem={{avail:.2f}} GB",
                "Capture draft prefill CUDA graph", self._fill(prefill_descs), 2.0, 0.2,
            )
            if int(args.get("speculative_num_steps") or 1) > 1:
                total += self._capture(
                    f"Capture draft decode CUDA graph begin. backend=full, num_tokens_per_req={topk}, bs={bs_list}, avail mem={{avail:.2f}} GB",
                    "Capture draft decode CUDA graph", self._fill(batch_descs), 2.0, 0.1,
                )
            total += self._capture(
                f"Capture draft extend CUDA graph begin. backend=full, num_tokens_per_req={draft_tokens}, bs={bs_list}, avail mem={{avail:.2f}} GB",
                "Capture draft extend CUDA graph", self._fill(batch_descs), 1.5, 0.1,
            )
        return total

    def _fill(self, descs: list[str]) -> list[str]:
        """Descriptions whose avail_mem is read when each frame is written."""
        return [_LiveDesc(d, self.gpus) for d in descs]


class _LiveDesc(str):
    """A tqdm description template whose `avail_mem` is filled in when it is formatted."""

    _gpus: SimulatedGpus

    def __new__(cls, template: str, gpus: SimulatedGpus) -> _LiveDesc:
        obj = super().__new__(cls, template)
        obj._gpus = gpus
        return obj

    def __format__(self, spec: str) -> str:
        return str.format(self, avail=self._gpus.avail_gib())

    def __str__(self) -> str:
        return str.format(self, avail=self._gpus.avail_gib())


def die(failure: StartupFailed) -> int:
    """End the process like SGLang: the main process SIGKILLs itself after a scheduler crash."""
    if failure.exit_kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    return failure.code
