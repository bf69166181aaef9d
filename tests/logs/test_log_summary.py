"""`specmon log-summary`, run as the real command on the real logs, on stdin, and with --follow."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
ROOT = Path(__file__).parents[2]
GRAPHS = {"target", "draft", "draft_extend", "prefill"}
STATUSES = {"running", "done", "failed"}


def log_summary(*args: str, stdin: bytes | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specmon", "log-summary", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        cwd=ROOT,
    )


def summary_json(log: Path | str, *extra: str) -> tuple[dict, int]:
    proc = log_summary(str(log), "--json", *extra)
    assert proc.stderr == b"", proc.stderr.decode()
    return json.loads(proc.stdout), proc.returncode


def assert_iso_or_null(value):
    assert value is None or isinstance(datetime.fromisoformat(value), datetime)


def assert_shape(doc: dict) -> None:
    """The `--json` shape promised by the issue (more keys are allowed)."""
    assert doc["state"] in {"starting", "ready", "failed", "stopped"}
    for phase in doc["phases"]:
        assert {"name", "status", "started", "ended", "elapsed_s"} <= phase.keys()
        assert phase["status"] in STATUSES
        assert_iso_or_null(phase["started"])
        assert_iso_or_null(phase["ended"])
        assert phase["elapsed_s"] is None or phase["elapsed_s"] >= 0
    graphs = [c["graph"] for c in doc["captures"]]
    for capture in doc["captures"]:
        assert {"graph", "status", "done", "total", "batch_sizes", "elapsed_s"} <= capture.keys()
        assert capture["graph"] in GRAPHS and capture["status"] in STATUSES
        assert isinstance(capture["done"], int) and isinstance(capture["batch_sizes"], list)
        assert capture["total"] is None or 0 <= capture["done"] <= capture["total"]
    assert len(graphs) == len(set(zip(graphs, [c.get("role") for c in doc["captures"]], strict=True)))
    for weights in doc["weights"]:
        assert {"model", "type", "mem_usage_gb", "avail_gb", "elapsed_s"} <= weights.keys()
        assert weights["model"] in {"target", "draft"}
    assert doc["max_total_num_tokens"] is None or isinstance(doc["max_total_num_tokens"], int)
    assert doc["ready_after_s"] is None or isinstance(doc["ready_after_s"], float | int)
    if doc["error"] is not None:
        assert {"kind", "message", "phase", "hint"} <= doc["error"].keys()
        assert doc["error"]["message"]


def capture(doc: dict, graph: str, role: str | None = None) -> dict:
    found = [c for c in doc["captures"] if c["graph"] == graph and (role is None or c.get("role") == role)]
    assert found, f"no {graph} capture in {doc['captures']}"
    return found[0]


def weights(doc: dict, model: str) -> dict:
    return next(w for w in doc["weights"] if w["model"] == model)


# Expected facts from tests/fixtures/logs/INDEX.md (only the ones it states with certainty).
EXPECTED = {
    "01-qwq32b-tp4-l4-v0.4.3-ready.log": dict(state="ready", ready_after_s=29, max_total=46611),
    "02-qwen3-14b-tp2-a4500-cutoff-during-capture.log": dict(state="starting", max_total=None),
    # INDEX.md: 367 s, from the server_args line (23:37:40); pre-launch warnings at 23:37:38 don't count.
    "03-laguna-int4-dflash-v0.5.16-ready.log": dict(state={"ready", "stopped"}, ready_after_s=369, from_args=367, max_total=185897),
    "04-laguna-nvfp4-dflash-v0.5.16-killed-during-prefill-capture.log": dict(state="failed", error="killed", max_total=None),
    "05-laguna-nvfp4-dflash-v0.5.16-killed-during-weight-load.log": dict(state="failed", error="killed", max_total=None),
    "06-qwen2-7b-eagle-tp2-draft-weight-keyerror.log": dict(state="failed", error="weight_load"),
    "07-mistral-7b-v0.4.0-warmup-502-killed.log": dict(state="failed", error="warmup_failed", max_total=56524),
    "09-phi35-mini-v0.3-capture-traceback-partial.log": dict(state="failed"),
    "10-qwen3-fp8-v0.4.7-capture-scheduler-exception-partial.log": dict(state="failed"),
    "13-eagle-awq-draft-cuda-graph-capture-failed-traceback.log": dict(state="failed", error="capture_failed"),
    "15-dp-attention-dp4-tp4-ep4-capture-progress-complete-fragment.log": dict(state="starting"),
    "18-glm47-ktransformers-sglang-rtxpro6000-capture-to-uvicorn-fragment.log": dict(state="starting", max_total=121240),
    "19-gemma3-eagle2-docker-compose-prefix-fragment.log": dict(state="starting"),
    "22-qwen35-9b-tp2-rtx4090-capture-per-bs-progress.log": dict(state="starting", max_total=327310),
    "24-kimi-k2-v0.5.5-unrecognized-argument-oneline.log": dict(state="failed", error="unrecognized_arguments"),
    "26-llama2-7b-eagle2-docs-ci-warning-level-three-capture-bars.log": dict(state="starting", max_total=None),
    # 0.5.16 serves an EAGLE-3 draft with renamed keys without a word; only the preflight can tell (test_preflight)
    "h200-0.5.16-eagle3-draft-keys-layers0.log": dict(state={"ready", "stopped"}, ready_after_s=41, from_args=38, max_total=3221374),
    "h200-0.5.16-eagle3-draft-keys-unknown-names.log": dict(state={"ready", "stopped"}, ready_after_s=31, from_args=29,
                                                           max_total=3221374),
    "h200-0.5.16-plain-ready.log": dict(state={"ready", "stopped"}, ready_after_s=34, max_total=3626606),
    "h200-0.5.16-spec-args-assertion.log": dict(state="failed", error="invalid_server_args"),
    "h200-0.5.16-standalone-ready.log": dict(state={"ready", "stopped"}, ready_after_s=107, from_args=105, max_total=151561),
    "h200-0.5.16-unrecognized-num-speculative-tokens.log": dict(state="failed", error="unrecognized_arguments"),
}


def test_every_fixture_log_has_expectations():
    assert {p.name for p in LOGS.glob("*.log")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED), ids=lambda n: n[:14])
def test_json_summary_of_every_real_log(name: str):
    expected = EXPECTED[name]
    doc, code = summary_json(LOGS / name)
    assert_shape(doc)
    states = expected["state"] if isinstance(expected["state"], set) else {expected["state"]}
    assert doc["state"] in states
    assert code == (1 if doc["state"] == "failed" else 0)
    if "max_total" in expected:
        assert doc["max_total_num_tokens"] == expected["max_total"]
    if "ready_after_s" in expected:
        assert doc["ready_after_s"] == pytest.approx(expected["ready_after_s"], abs=0.5)
        assert doc["ready_after_server_args_s"] == pytest.approx(
            expected.get("from_args", expected["ready_after_s"]), abs=0.5
        )
    elif doc["state"] not in ("ready", "stopped"):
        assert doc["ready_after_s"] is None
    if "error" in expected:
        assert doc["error"]["kind"] == expected["error"]
        assert doc["error"]["hint"]
    elif doc["state"] != "failed":
        assert doc["error"] is None


def test_qwq_tp4_ready_log_values():
    doc, _ = summary_json(LOGS / "01-qwq32b-tp4-l4-v0.4.3-ready.log")
    target = capture(doc, "target")
    assert (target["status"], target["done"], target["total"]) == ("done", 13, 13)
    w = weights(doc, "target")
    assert (w["type"], w["mem_usage_gb"], w["avail_gb"]) == ("Qwen2ForCausalLM", 15.54, 6.09)
    names = [p["name"] for p in doc["phases"]]
    assert names.index("load_weights") < names.index("capture") < names.index("ready")
    assert all(p["status"] == "done" for p in doc["phases"] if p["name"] != "ready")


def test_cut_off_during_capture_shows_the_last_progress():
    doc, code = summary_json(LOGS / "02-qwen3-14b-tp2-a4500-cutoff-during-capture.log")
    target = capture(doc, "target")
    assert (target["status"], target["done"], target["total"]) == ("running", 0, 1)
    w = weights(doc, "target")
    assert (w["elapsed_s"], w["mem_usage_gb"], w["avail_gb"]) == (24.17, 1.50, 17.22)
    assert code == 0


def test_laguna_ready_weights_and_new_style_captures():
    doc, _ = summary_json(LOGS / "03-laguna-int4-dflash-v0.5.16-ready.log")
    assert (weights(doc, "target")["type"], weights(doc, "target")["elapsed_s"]) == ("LagunaForCausalLM", 109.33)
    assert (weights(doc, "draft")["type"], weights(doc, "draft")["mem_usage_gb"]) == ("DFlashLagunaForCausalLM", 1.58)
    prefill = capture(doc, "prefill")
    assert (prefill["status"], prefill["total"], prefill["elapsed_s"]) == ("done", 58, 216.19)
    assert capture(doc, "target")["total"] == 8


def test_weight_load_killed_shows_shard_progress():
    doc, _ = summary_json(LOGS / "05-laguna-nvfp4-dflash-v0.5.16-killed-during-weight-load.log")
    w = weights(doc, "target")
    assert (w["status"], w["shards_done"], w["shards_total"]) == ("failed", 47, 49)


def test_three_capture_bars_at_warning_level():
    doc, _ = summary_json(LOGS / "26-llama2-7b-eagle2-docs-ci-warning-level-three-capture-bars.log")
    assert [(c["done"], c["total"]) for c in doc["captures"]] == [(4, 4)] * 3


# --- logs built from the exact strings in docs/sglang-facts.md ---------------------------------

LEGACY_EAGLE3_READY = (
    "Overlap scheduler is disabled because of using eagle speculative decoding.\n"
    "[2025-10-01 12:00:00] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', "
    "speculative_algorithm='EAGLE3', speculative_num_steps=3, speculative_eagle_topk=4)\n"
    "[2025-10-01 12:00:05] Init torch distributed begin.\n"
    "[2025-10-01 12:00:06] Init torch distributed ends. mem usage=0.00 GB\n"
    "[2025-10-01 12:00:06] Load weight begin. avail mem=139.03 GB\n"
    "\rLoading safetensors checkpoint shards:   0% Completed | 0/4 [00:00<?, ?it/s]\n"
    "\rLoading safetensors checkpoint shards: 100% Completed | 4/4 [00:04<00:00,  1.00it/s]\n"
    "[2025-10-01 12:00:11] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=123.91 GB, mem usage=15.12 GB.\n"
    "[2025-10-01 12:00:11] KV Cache is allocated. #tokens: 850000, K size: 51.88 GB, V size: 51.88 GB\n"
    "[2025-10-01 12:00:11] Memory pool end. avail mem=19.60 GB\n"
    "[2025-10-01 12:00:12] Capture cuda graph begin. This can take up to several minutes. avail mem=19.40 GB\n"
    "[2025-10-01 12:00:12] Capture cuda graph bs [1, 2, 4, 8]\n"
    "\r  0%|          | 0/4 [00:00<?, ?it/s]"
    "\rCapturing batches (bs=8 avail_mem=19.30 GB):   0%|          | 0/4 [00:00<?, ?it/s]"
    "\rCapturing batches (bs=4 avail_mem=19.30 GB):  25%|██▌       | 1/4 [00:01<00:03,  1.00it/s]"
    "\rCapturing batches (bs=1 avail_mem=19.25 GB): 100%|██████████| 4/4 [00:03<00:00,  1.30it/s]\n"
    "[2025-10-01 12:00:16] Capture cuda graph end. Time elapsed: 3.90 s. mem usage=0.55 GB. avail mem=18.85 GB.\n"
    "[2025-10-01 12:00:16] Init torch distributed begin.\n"
    "[2025-10-01 12:00:16] Init torch distributed ends. mem usage=0.00 GB\n"
    "[2025-10-01 12:00:16] Load weight begin. avail mem=18.85 GB\n"
    "[2025-10-01 12:00:17] Load weight end. type=LlamaForCausalLMEagle3, dtype=torch.bfloat16, avail mem=17.90 GB, mem usage=0.95 GB.\n"
    "[2025-10-01 12:00:17] KV Cache is allocated. #tokens: 850000, K size: 1.62 GB, V size: 1.62 GB\n"
    "[2025-10-01 12:00:17] Memory pool end. avail mem=14.60 GB\n"
    "[2025-10-01 12:00:17] Capture draft cuda graph begin. This can take up to several minutes. avail mem=14.50 GB\n"
    "\rCapturing batches (bs=8 avail_mem=14.45 GB):   0%|          | 0/4 [00:00<?, ?it/s]"
    "\rCapturing batches (bs=1 avail_mem=14.45 GB): 100%|██████████| 4/4 [00:08<00:00,  0.50it/s]\n"
    "[2025-10-01 12:00:25] Capture draft cuda graph end. Time elapsed: 8.10 s. mem usage=0.30 GB. avail mem=14.20 GB.\n"
    "[2025-10-01 12:00:25] Capture draft extend cuda graph begin. This can take up to several minutes. avail mem=14.20 GB\n"
    "\rCapturing batches (bs=8 avail_mem=14.15 GB):   0%|          | 0/4 [00:00<?, ?it/s]"
    "\rCapturing batches (bs=1 avail_mem=14.15 GB): 100%|██████████| 4/4 [00:02<00:00,  1.40it/s]\n"
    "[2025-10-01 12:00:28] Capture draft extend cuda graph end. Time elapsed: 2.80 s. mem usage=0.20 GB. avail mem=14.00 GB.\n"
    "[2025-10-01 12:00:28] max_total_num_tokens=850000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=48, context_len=131072, available_gpu_mem=14.00 GB\n"
    "[2025-10-01 12:00:29] INFO:     Started server process [4242]\n"
    "[2025-10-01 12:00:29] INFO:     Waiting for application startup.\n"
    "[2025-10-01 12:00:29] INFO:     Application startup complete.\n"
    "[2025-10-01 12:00:29] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)\n"
    '[2025-10-01 12:00:30] INFO:     127.0.0.1:51234 - "GET /get_model_info HTTP/1.1" 200 OK\n'
    "[2025-10-01 12:00:30] Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00, "
    "#running-req: 0, #queue-req: 0, \n"
    '[2025-10-01 12:00:31] INFO:     127.0.0.1:51240 - "POST /generate HTTP/1.1" 200 OK\n'
    "[2025-10-01 12:00:31] The server is fired up and ready to roll!\n"
)


def _bar(bs_list: list[int], avail: float) -> str:
    n = len(bs_list)
    frames = [f"\r  0%|          | 0/{n} [00:00<?, ?it/s]"]
    for i, bs in enumerate(bs_list):
        frames.append(f"\rCapturing batches (bs={bs} avail_mem={avail:.2f} GB): {100 * i // n:3d}%|          | {i}/{n} [00:0{i}<00:01,  2.00it/s]")
    frames.append(f"\rCapturing batches (bs={bs_list[-1]} avail_mem={avail:.2f} GB): 100%|██████████| {n}/{n} [00:02<00:00,  2.00it/s]\n")
    return "".join(frames)


NEW_EAGLE3_READY = (
    "[2026-11-29 10:00:00] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', "
    "speculative_algorithm='EAGLE3', speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)\n"
    "[2026-11-29 10:00:02] Load weight begin. avail mem=139.03 GB\n"
    "[2026-11-29 10:00:06] Load weight end. elapsed=4.10 s, type=LlamaForCausalLM, avail mem=123.91 GB, mem usage=15.12 GB.\n"
    "[2026-11-29 10:00:06] Load weight begin. avail mem=123.91 GB\n"
    "[2026-11-29 10:00:07] Load weight end. elapsed=0.52 s, type=LlamaForCausalLMEagle3, avail mem=122.96 GB, mem usage=0.95 GB.\n"
    "[2026-11-29 10:00:07] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 850000, K size: 51.88 GB, V size: 51.88 GB\n"
    "[2026-11-29 10:00:07] Memory pool end. avail mem=19.60 GB\n"
    "[2026-11-29 10:00:07] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 850000, K size: 1.62 GB, V size: 1.62 GB\n"
    "[2026-11-29 10:00:07] Memory pool end. avail mem=16.30 GB\n"
    "[2026-11-29 10:00:08] Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=4, bs=[1, 2, 4, 8], avail mem=16.30 GB\n"
    + _bar([8, 4, 2, 1], 16.20)
    + "[2026-11-29 10:00:11] Capture target verify CUDA graph end. elapsed=3.00 s, mem usage=0.60 GB, avail mem=15.70 GB.\n"
    "[2026-11-29 10:00:11] Capture draft decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[1, 2, 4, 8], avail mem=15.70 GB\n"
    + _bar([8, 4, 2, 1], 15.60)
    + "[2026-11-29 10:00:13] Capture draft decode CUDA graph end. elapsed=2.10 s, mem usage=0.30 GB, avail mem=15.40 GB.\n"
    "[2026-11-29 10:00:13] Capture draft extend CUDA graph begin. backend=full, num_tokens_per_req=4, bs=[1, 2, 4, 8], avail mem=15.40 GB\n"
    + _bar([8, 4, 2, 1], 15.30)
    + "[2026-11-29 10:00:14] Capture draft extend CUDA graph end. elapsed=1.20 s, mem usage=0.20 GB, avail mem=15.20 GB.\n"
    "[2026-11-29 10:00:14] max_total_num_tokens=850000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=48, context_len=131072, available_gpu_mem=15.20 GB\n"
    "[2026-11-29 10:00:15] INFO:     Started server process [4242]\n"
    "[2026-11-29 10:00:15] INFO:     Waiting for application startup.\n"
    "[2026-11-29 10:00:15] INFO:     Application startup complete.\n"
    "[2026-11-29 10:00:15] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)\n"
    '[2026-11-29 10:00:16] INFO:     127.0.0.1:51234 - "GET /model_info HTTP/1.1" 200 OK\n'
    '[2026-11-29 10:00:17] INFO:     127.0.0.1:51240 - "POST /generate HTTP/1.1" 200 OK\n'
    "[2026-11-29 10:00:17] The server is fired up and ready to roll!\n"
)

PORT_IN_USE = NEW_EAGLE3_READY.split("[2026-11-29 10:00:15] INFO:     Uvicorn running")[0] + (
    "[2026-11-29 10:00:15] ERROR:    [Errno 98] error while attempting to bind on address "
    "('127.0.0.1', 30000): address already in use\n"
    "[2026-11-29 10:00:15] INFO:     Waiting for application shutdown.\n"
    "[2026-11-29 10:00:15] INFO:     Application shutdown complete.\n"
)

OOM_DURING_CAPTURE = (
    "[2025-06-09 18:16:20 TP0] Load weight begin. avail mem=78.50 GB\n"
    "[2025-06-09 18:16:26 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.38 GB, mem usage=15.12 GB.\n"
    "[2025-06-09 18:16:26 TP0] KV Cache is allocated. #tokens: 480000, K size: 29.30 GB, V size: 29.30 GB\n"
    "[2025-06-09 18:16:26 TP0] Memory pool end. avail mem=1.40 GB\n"
    "[2025-06-09 18:16:27 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=1.20 GB\n"
    "[2025-06-09 18:16:27 TP0] Capture cuda graph bs [1, 2, 4, 8, 16]\n"
    "\rCapturing batches (bs=16 avail_mem=1.10 GB):   0%|          | 0/5 [00:00<?, ?it/s]\n"
    "[2025-06-09 18:16:29 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/usr/lib/python3/site-packages/sglang/srt/model_executor/cuda_graph_runner.py", line 310, in __init__\n'
    "    self.capture()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB "
    "of which 1.05 GiB is free.\n"
    "\n"
    "During handling of the above exception, another exception occurred:\n"
    "\n"
    "Traceback (most recent call last):\n"
    "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "[2025-06-09 18:16:29] Received sigquit from a child process. It usually means the child failed.\n"
)


@pytest.mark.parametrize("text", [LEGACY_EAGLE3_READY, NEW_EAGLE3_READY], ids=["legacy", "new"])
def test_eagle3_startup_to_ready_with_three_captures(tmp_path: Path, text: str):
    log = tmp_path / "eagle3.log"
    log.write_text(text)
    doc, code = summary_json(log)
    assert_shape(doc)
    assert (doc["state"], code, doc["max_total_num_tokens"], doc["error"]) == ("ready", 0, 850000, None)
    assert doc["ready_after_s"] == pytest.approx(31 if text is LEGACY_EAGLE3_READY else 17)
    for graph in ("target", "draft", "draft_extend"):
        c = capture(doc, graph)
        assert (c["status"], c["done"], c["total"]) == ("done", 4, 4), graph
    assert weights(doc, "draft")["type"] == "LlamaForCausalLMEagle3"
    assert weights(doc, "draft")["mem_usage_gb"] == 0.95


def test_port_already_in_use(tmp_path: Path):
    log = tmp_path / "port.log"
    log.write_text(PORT_IN_USE)
    doc, code = summary_json(log)
    assert (doc["state"], code, doc["error"]["kind"]) == ("failed", 1, "port_in_use")
    assert "address already in use" in doc["error"]["message"]
    assert "port" in doc["error"]["hint"].lower()


def test_cuda_oom_during_capture(tmp_path: Path):
    log = tmp_path / "oom.log"
    log.write_text(OOM_DURING_CAPTURE)
    doc, code = summary_json(log)
    assert (doc["state"], code, doc["error"]["kind"]) == ("failed", 1, "cuda_oom")
    assert doc["error"]["phase"] == "capture"
    assert "mem-fraction-static" in doc["error"]["hint"]
    assert capture(doc, "target")["status"] == "failed"


# --- plain text, stdin, errors ------------------------------------------------------------------


def test_plain_text_summary_of_a_ready_log():
    proc = log_summary(str(LOGS / "01-qwq32b-tp4-l4-v0.4.3-ready.log"))
    out = proc.stdout.decode()
    assert proc.returncode == 0, proc.stderr
    assert out.startswith("SGLang startup: READY after 29.0s")
    for heading in ("Phases", "Weights", "Captures", "KV cache", "Memory"):
        assert f"\n{heading}\n" in out
    assert "Qwen2ForCausalLM" in out and "15.54 GB" in out
    assert "13/13" in out
    assert "max_total_num_tokens  46,611" in out
    assert "time to ready" in out


def test_plain_text_puts_the_error_and_hint_first():
    proc = log_summary(str(LOGS / "h200-0.5.16-unrecognized-num-speculative-tokens.log"))
    out = proc.stdout.decode().splitlines()
    assert proc.returncode == 1
    assert out[0].startswith("SGLang startup: FAILED")
    assert out[2].startswith("!! ERROR  unrecognized_arguments")
    block = out[3 : out.index("", 3)]  # message, then hint, wrapped to the terminal's width
    at = next(i for i, line in enumerate(block) if line.startswith("   hint: "))
    assert "--num-speculative-tokens" in " ".join(block[:at])
    assert "--speculative-num-draft-tokens" in " ".join(block[at:])


def test_stdin_gives_the_same_summary_as_the_file():
    log = LOGS / "03-laguna-int4-dflash-v0.5.16-ready.log"
    from_stdin = log_summary("-", "--json", stdin=log.read_bytes())
    from_file = log_summary(str(log), "--json")
    assert from_stdin.returncode == from_file.returncode == 0
    assert json.loads(from_stdin.stdout) == json.loads(from_file.stdout)


def test_a_missing_file_is_an_error_not_a_traceback(tmp_path: Path):
    proc = log_summary(str(tmp_path / "nope.log"))
    assert proc.returncode == 2
    assert b"nope.log" in proc.stderr and b"Traceback" not in proc.stderr


# --- --follow on a file a child process is writing ----------------------------------------------

WRITER = """
import sys, time
path, source, delay, forever = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "1"
data = open(source, "rb").read()
with open(path, "ab", buffering=0) as out:
    for i in range(0, len(data), 97):  # partial chunks, cut anywhere
        out.write(data[i:i + 97])
        time.sleep(delay)
    while forever:  # the server keeps logging after ready
        out.write(b'[2026-11-29 10:42:50] INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK\\n')
        time.sleep(0.05)
"""


def start_writer(path: Path, source: Path, delay: float, forever: bool) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(source), str(delay), "1" if forever else "0"])


def test_follow_prints_changes_and_exits_at_ready(tmp_path: Path):
    log = tmp_path / "server.log"
    follower = subprocess.Popen(
        [sys.executable, "-m", "specmon", "log-summary", str(log), "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert follower.stderr is not None
    waiting = follower.stderr.readline()  # the log does not exist yet: log-summary says it waits for it
    assert b"waiting for" in waiting
    writer = start_writer(log, LOGS / "h200-0.5.16-standalone-ready.log", 0.002, forever=True)
    try:
        out, err = follower.communicate(timeout=30)
    finally:
        writer.kill()
        writer.wait()
    text = out.decode()
    assert follower.returncode == 0, err.decode()
    assert "load_weights" in text and "started" in text
    assert "READY after" in text
    assert text.index("READY after") < text.index("SGLang startup: READY")  # live lines, then the summary


def test_follow_exits_1_at_failure(tmp_path: Path):
    log = tmp_path / "server.log"
    writer = start_writer(log, LOGS / "h200-0.5.16-spec-args-assertion.log", 0.001, forever=False)
    proc = log_summary(str(log), "--follow", "--json", timeout=30)
    writer.wait()
    assert proc.returncode == 1
    lines = proc.stdout.decode().splitlines()
    final = json.loads(lines[-1])
    assert_shape(final)
    assert final["state"] == "failed" and final["error"]["kind"] == "invalid_server_args"


def test_follow_on_stdin_reads_to_the_end():
    log = LOGS / "h200-0.5.16-plain-ready.log"
    proc = log_summary("-", "--follow", stdin=log.read_bytes())
    assert proc.returncode == 0
    assert "READY after" in proc.stdout.decode()


def test_follow_interrupted_prints_the_summary_so_far(tmp_path: Path):
    log = tmp_path / "server.log"
    startup = (LOGS / "02-qwen3-14b-tp2-a4500-cutoff-during-capture.log").read_bytes()
    log.write_bytes(startup)  # never becomes ready
    proc = subprocess.Popen(
        [sys.executable, "-m", "specmon", "log-summary", str(log), "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 10
    first = proc.stdout.readline()  # the live lines have started
    assert first and time.monotonic() < deadline
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 130
    text = (first + out).decode()
    assert "SGLang startup: STARTING" in text
    assert "0/1" in text  # the capture that was running when the log stopped


# --- in-process: the change printer and fuzzing -------------------------------------------------


def test_change_printer_throttles_progress_but_not_status_changes():
    from specmon.logs.summary import ChangePrinter
    from specmon.logs.tracker import StartupTracker

    tracker = StartupTracker()
    out = io.StringIO()
    printer = ChangePrinter(out)
    frames = [f"Capturing batches (bs={bs} avail_mem=19.30 GB):  {i}%|          | {i}/200 [00:01<00:03,  1.00it/s]" for i, bs in enumerate(range(200, 0, -1))]
    tracker.feed_line("[2025-10-01 12:00:12] Capture cuda graph begin. This can take up to several minutes. avail mem=19.40 GB")
    printer.show(tracker.drain_events(), tracker.state)
    for frame in frames:
        tracker.feed_frame(frame)
        printer.show(tracker.drain_events(), tracker.state)
    tracker.feed_line("[2025-10-01 12:00:16] Capture cuda graph end. Time elapsed: 3.90 s. mem usage=0.55 GB. avail mem=18.85 GB.")
    printer.show(tracker.drain_events(), tracker.state)
    capture_lines = [line for line in out.getvalue().splitlines() if " capture " in line]
    assert 2 <= len(capture_lines) < 10, capture_lines
    assert "done" in capture_lines[-1] and "3.9s" in capture_lines[-1]


REAL_LINES = sorted(
    {line for log in LOGS.glob("*.log") for line in log.read_bytes().splitlines(keepends=True)[:400]}
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(st.sampled_from(REAL_LINES), st.binary(max_size=40), st.sampled_from([b"\r", b"\n", b"\x1b[0m"])),
        max_size=60,
    )
)
def test_no_input_makes_the_summary_raise(pieces: list[bytes]):
    from specmon.logs.summary import format_summary, summarize_stream

    state = summarize_stream(io.BytesIO(b"".join(pieces)))
    doc = json.loads(json.dumps(state.to_json()))
    assert_shape(doc)
    assert format_summary(state).startswith("SGLang startup: ")


# --- not an SGLang log; --follow on paths that can never be followed ------------------------------------


@pytest.mark.parametrize("kind", ["random-bytes", "binary", "plain-text", "empty"])
def test_a_file_with_no_sglang_line_is_said_so_with_a_non_zero_exit(tmp_path: Path, kind: str):
    data = {
        "random-bytes": bytes(range(256)) * 40 + os.urandom(4096),
        "binary": Path(sys.executable).read_bytes()[:200_000],
        "plain-text": b"Dear diary,\nToday I started a server. [it was fine]\nERROR: none\nKilled time reading.\n",
        "empty": b"",
    }[kind]
    log = tmp_path / f"{kind}.log"
    log.write_bytes(data)
    proc = log_summary(str(log))
    assert proc.returncode == 3
    assert f"no SGLang startup lines in {log}".encode() in proc.stderr
    assert b"STARTING" not in proc.stdout
    as_json = log_summary(str(log), "--json")
    assert as_json.returncode == 3
    doc = json.loads(as_json.stdout)
    assert doc["lines_recognized"] == 0
    from_stdin = log_summary("-", stdin=data)
    assert from_stdin.returncode == 3 and b"no SGLang startup lines in stdin" in from_stdin.stderr


def test_every_real_log_reports_how_many_lines_were_recognised():
    for name in EXPECTED:
        doc, _ = summary_json(LOGS / name)
        assert 0 < doc["lines_recognized"] <= doc["lines_seen"], name


def _unfollowable(tmp_path: Path, kind: str) -> Path:
    if kind == "directory":
        return tmp_path
    if kind == "symlink-loop":
        (tmp_path / "a.log").symlink_to(tmp_path / "b.log")
        (tmp_path / "b.log").symlink_to(tmp_path / "a.log")
        return tmp_path / "a.log"
    if kind == "not-a-directory":
        (tmp_path / "file").write_text("x\n")
        return tmp_path / "file" / "server.log"
    log = tmp_path / "secret.log"
    log.write_text("[2025-10-01 12:00:00] server_args=ServerArgs(model_path='m')\n")
    log.chmod(0)
    return log


@pytest.mark.parametrize("kind", ["directory", "symlink-loop", "not-a-directory", "unreadable"])
def test_follow_on_a_path_that_can_never_be_read_exits_2_at_once(tmp_path: Path, kind: str):
    if kind == "unreadable" and os.geteuid() == 0:
        pytest.skip("root reads a file whatever its mode")
    path = _unfollowable(tmp_path, kind)
    without = log_summary(str(path))
    started = time.monotonic()
    proc = log_summary(str(path), "--follow", timeout=20)
    assert (without.returncode, proc.returncode) == (2, 2)
    assert time.monotonic() - started < 15  # it did not wait for the file to appear
    assert str(path).encode() in proc.stderr and b"waiting for" not in proc.stderr
    assert b"Traceback" not in proc.stderr


def test_follow_still_waits_for_a_dangling_symlink_to_get_its_file(tmp_path: Path):
    link = tmp_path / "server.log"
    link.symlink_to(tmp_path / "later.log")
    follower = subprocess.Popen(
        [sys.executable, "-m", "specmon", "log-summary", str(link), "--follow"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        assert b"waiting for" in follower.stderr.readline()  # it waits: the file may still come
        (tmp_path / "later.log").write_bytes((LOGS / "h200-0.5.16-spec-args-assertion.log").read_bytes())
        follower.wait(timeout=30)
    finally:
        follower.kill()
        follower.wait()
    assert follower.returncode == 1


LAUNCH_KEYS = ("state", "phases", "captures", "weights", "kv_pools", "error", "ready_after_server_args_s",
               "max_total_num_tokens", "speculative_algorithm", "sglang_versions")


def test_a_restarted_server_appending_to_its_log_is_summarised_as_its_last_launch(tmp_path: Path):
    """A log holding a failed launch, then a launch to ready (a server restarted into the same log): the summary is
    the last launch's, as the log of that launch alone gives it; the earlier failure is still reported."""
    failed, ready = LOGS / "h200-0.5.16-spec-args-assertion.log", LOGS / "h200-0.5.16-standalone-ready.log"
    log = tmp_path / "server.log"
    log.write_bytes(failed.read_bytes() + ready.read_bytes())
    alone, alone_code = summary_json(ready)
    first, _ = summary_json(failed)
    doc, code = summary_json(log)
    assert_shape(doc)
    assert code == alone_code == 0
    assert {key: doc[key] for key in LAUNCH_KEYS} == {key: alone[key] for key in LAUNCH_KEYS}
    earlier = doc["earlier_launches"]
    assert earlier["count"] == 1 and earlier["failed"] == 1 and len(earlier["last"]) == 1
    assert earlier["last"][0]["state"] == "failed" and earlier["last"][0]["error"] == first["error"]
    assert earlier["last"][0]["launched_at"] == first["launched_at"]
    assert doc["lines_seen"] == first["lines_seen"] + alone["lines_seen"]
    text = log_summary(str(log)).stdout.decode()
    assert "Earlier launches in this log: 1, 1 failed" in text and "invalid_server_args" in text
    assert text.startswith("SGLang startup: " + alone["state"].upper())
    follow = log_summary("-", "--follow", "--json", stdin=log.read_bytes())
    assert follow.returncode == 0 and json.loads(follow.stdout.decode().splitlines()[-1])["state"] == "ready"


def test_a_launch_that_fails_after_a_ready_one_fails_the_summary(tmp_path: Path):
    failed = LOGS.parent / "real-sglang-0.5.16" / "oom" / "server.log"
    ready = LOGS / "h200-0.5.16-standalone-ready.log"
    log = tmp_path / "server.log"
    log.write_bytes(ready.read_bytes() + failed.read_bytes())
    alone, _ = summary_json(failed)
    doc, code = summary_json(log)
    assert code == 1 and doc["state"] == "failed" and doc["error"] == alone["error"]
    assert doc["earlier_launches"]["count"] == 1 and doc["earlier_launches"]["failed"] == 0
    assert doc["earlier_launches"]["last"][0]["state"] in ("ready", "stopped")


def test_the_earlier_launches_kept_are_the_last_ones_and_all_are_counted(tmp_path: Path):
    failed = (LOGS.parent / "real-sglang-0.5.16" / "oom" / "server.log").read_bytes()
    ready = (LOGS / "h200-0.5.16-standalone-ready.log").read_bytes()
    log = tmp_path / "server.log"
    log.write_bytes(failed * 30 + ready * 5)
    doc, code = summary_json(log)
    earlier = doc["earlier_launches"]
    assert code == 0 and earlier["count"] == 34 and earlier["failed"] == 30
    states = [launch["state"] for launch in earlier["last"]]
    assert states[:12] == ["failed"] * 12 and "failed" not in states[12:] and len(states) == 16
    assert "Earlier launches in this log: 34, 30 failed (the summary is the last launch's); the last 16" in (
        log_summary(str(log)).stdout.decode().replace("\n", " "))
