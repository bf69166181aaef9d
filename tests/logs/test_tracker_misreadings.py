"""Misreading classes seen in fresh real logs (issue 21), each fixed as a class and tested on a log of its shape:
an OOM in the attention backend's setup, a traceback whose header was cut off, Python-logging wrappers, a GPU
hardware abort while serving, a node without rank 0, the draft's weight load, a clock-only prefix, 0.4.2's KV
line without a token count, an old description-less bar after the capture's end line; and the newest versions'
lines (0.5.17-0.5.23, made from their own format strings), read with phases, capture totals and ETA."""

from __future__ import annotations

from pathlib import Path

import pytest

from specmon.logs.tracker import StartupTracker
from tests.logs.test_tracker_classes import names, track_text

MADE = Path(__file__).parents[1] / "fixtures" / "logs" / "made"

LOADED = (
    "[2026-12-01 09:00:00] server_args=ServerArgs(model_path='/m', mem_fraction_static=0.88)\n"
    "[2026-12-01 09:00:01 TP0] Init torch distributed begin.\n"
    "[2026-12-01 09:00:02 TP0] Load weight begin. avail mem=78.00 GB\n"
    "[2026-12-01 09:00:30 TP0] Load weight end. elapsed=28.00 s, type=LlamaForCausalLM, avail mem=40.00 GB, mem usage=38.00 GB.\n"
    "[2026-12-01 09:00:31 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 500000, K size: 15.00 GB, V size: 15.00 GB\n"
    "[2026-12-01 09:00:31 TP0] Memory pool end. avail mem=9.50 GB\n"
)


def test_an_oom_in_the_attention_backends_setup_is_not_blamed_on_graph_capture() -> None:
    state = track_text(
        LOADED
        + "[2026-12-01 09:00:32 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2900, in run_scheduler_process\n'
        '  File "/sgl/python/sglang/srt/model_executor/model_runner.py", line 410, in initialize\n'
        "    self.init_cuda_graphs()\n"
        '  File "/sgl/python/sglang/srt/model_executor/cuda_graph_runner.py", line 380, in __init__\n'
        "    self.model_runner.attn_backend.init_cuda_graph_state(self.max_bs, self.max_num_token)\n"
        '  File "/sgl/python/sglang/srt/layers/attention/flashinfer_backend.py", line 250, in init_cuda_graph_state\n'
        "    cuda_graph_kv_indices = torch.zeros((max_num_tokens * self.max_context_len,), dtype=torch.int32)\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB. GPU 0 has a total capacity of 79.19 GiB\n"
    )
    error = state.error
    assert (error.kind, error.phase) == ("cuda_oom", "attention_backend")
    assert "capturing graphs" not in error.hint and "attention backend" in error.hint
    assert not state.captures  # no capture began


def test_a_traceback_whose_header_was_cut_off_still_gets_its_phase() -> None:
    state = track_text(
        LOADED
        + "[2026-12-01 09:00:32 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=9.40 GB\n"
        '  File "/sgl/python/sglang/srt/model_executor/model_runner.py", line 230, in load_model\n'
        "    self.model = get_model(model_config=self.model_config, load_config=self.load_config)\n"
        '  File "/sgl/python/sglang/srt/model_loader/loader.py", line 381, in load_weights_and_postprocess\n'
        "    model.load_weights(weights)\n"
        "KeyError: 'model.layers.0.mlp.experts.w13_weight'\n"
    )
    assert (state.error.kind, state.error.phase) == ("weight_load", "load_weights")


@pytest.mark.parametrize(
    "wrap",
    [
        "2026-12-01 09:00:{s},123 - sglang.srt.model_executor.model_runner - INFO - {line}",
        "INFO:sglang.srt.model_executor.model_runner:{line}",
        "INFO 12-01 09:00:{s} model_runner.py:210] {line}",
    ],
    ids=["default-format", "basic-config", "vllm-style"],
)
def test_python_logging_wrappers_around_sglangs_lines_are_unwrapped(wrap: str) -> None:
    lines = [line for line in LOADED.splitlines() if "server_args" not in line]
    text = "".join(wrap.format(s=f"{i:02d}", line=line) + "\n" for i, line in enumerate(lines))
    state = track_text(text)
    assert names(state) == ["init_distributed", "load_weights", "kv_cache"]
    (weight,) = state.weights
    assert (weight.type, weight.avail_gb, weight.elapsed_s) == ("LlamaForCausalLM", 40.0, 28.0)
    assert state.kv_pools[0].tokens == 500000 and state.first_ts is not None
    assert state.first_ts.year == 2026  # SGLang's own timestamp, inside the wrapper


READY = LOADED + (
    "[2026-12-01 09:00:40] max_total_num_tokens=500000, chunked_prefill_size=8192\n"
    "[2026-12-01 09:00:41] The server is fired up and ready to roll!\n"
    "[2026-12-01 09:05:00 TP0] Decode batch, #running-req: 12, #token: 9000, token usage: 0.02, gen throughput (token/s): 900.00\n"
)


@pytest.mark.parametrize(
    "abort",
    [
        ":0:rocdevice.cpp            :2982: 1234567890 us: [pid:811   tid:0x7f] Callback: Queue 0x7f2c aborting with "
        "error : HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception. code: 0x1016",
        "[2026-12-01 09:05:01 TP0] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus.",
        "Fatal Python error: Aborted\n"
        "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the largest legal "
        "address. code: 0x29",
    ],
    ids=["hsa-exception", "nvidia-xid", "hsa-aperture"],
)
def test_a_gpu_hardware_abort_while_serving_is_a_gpu_fault_not_a_plain_death(abort: str) -> None:
    state = track_text(READY + abort + "\n")
    assert state.state == "failed" and state.ready_at is not None
    error = state.error
    assert (error.kind, error.phase) == ("cuda_error", "serving")
    assert "GPU itself faulted" in error.hint


NODE = "".join(
    f"[2026-12-01 09:00:{i:02d} TP{rank}] {what}\n"
    for i, (rank, what) in enumerate(
        [(r, "Load weight begin. avail mem=78.00 GB") for r in range(8, 16)]
        + [(r, "Load weight end. elapsed=20.00 s, type=Qwen3ForCausalLM, avail mem=40.00 GB, mem usage=38.00 GB.")
           for r in range(8, 16)]
        + [(r, "Load weight begin. avail mem=40.00 GB") for r in range(8, 16)]
        + [(r, "Load weight end. elapsed=2.00 s, type=LlamaForCausalLMEagle3, avail mem=38.00 GB, mem usage=2.00 GB.")
           for r in range(8, 16)]
        + [(r, "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 300000, K size: 9.00 GB, V size: 9.00 GB")
           for r in range(8, 16)]
        + [(r, "Memory pool end. avail mem=20.00 GB") for r in range(8, 16)]
        + [(r, "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 300000, K size: 0.50 GB, V size: 0.50 GB")
           for r in range(8, 16)]
        + [(r, "Memory pool end. avail mem=19.00 GB") for r in range(8, 16)]
    )
)


def test_a_node_without_rank_0_keeps_one_ranks_pools_and_the_drafts() -> None:
    state = track_text(NODE)
    assert [(p.model, p.k_size_gb) for p in state.kv_pools] == [("target", 9.0), ("draft", 0.5)]
    assert [w.model for w in state.weights] == ["target", "draft"]


def test_the_drafts_weight_load_is_the_drafts_even_when_the_targets_begin_line_was_cut_off() -> None:
    state = track_text(
        "[2026-12-01 09:00:30 TP0] Load weight end. elapsed=28.00 s, type=LlamaForCausalLM, avail mem=40.00 GB, mem usage=38.00 GB.\n"
        "[2026-12-01 09:00:31 TP0] Init torch distributed begin.\n"
        "[2026-12-01 09:00:31 TP0] Load weight begin. avail mem=40.00 GB\n"
        "[2026-12-01 09:00:33 TP0] Load weight end. elapsed=2.00 s, type=LlamaForCausalLM, avail mem=39.00 GB, mem usage=1.00 GB.\n"
    )
    target, draft = state.weights
    assert (target.model, target.avail_gb, target.mem_usage_gb) == ("target", 40.0, 38.0)
    assert (draft.model, draft.avail_gb, draft.mem_usage_gb, draft.status) == ("draft", 39.0, 1.0, "done")
    assert names(state) == ["load_weights", "load_draft_weights"]


def test_a_clock_only_prefix_is_never_dated_1900() -> None:
    state = track_text(
        "[09:00:01] Load weight begin. avail mem=78.00 GB\n"
        "[09:00:30] Load weight end. type=LlamaForCausalLM, avail mem=40.00 GB, mem usage=38.00 GB\n"
        "[09:00:41] The server is fired up and ready to roll!\n"
    )
    data = state.to_json()
    assert data["first_ts"] == "09:00:01" and data["ready_at"] == "09:00:41"
    assert state.ready_after_s == 40.0
    assert "1900" not in str(data)
    from specmon.logs.summary import format_summary

    assert "1900" not in format_summary(state)


def test_the_042_kv_line_without_a_token_count_is_a_pool() -> None:
    state = track_text(
        "[2025-01-10 10:00:00 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=40.00 GB\n"
        "[2025-01-10 10:00:01 TP0] Memory pool end. avail mem=9.00 GB\n"
        "[2025-01-10 10:00:01 TP0] KV Cache is allocated. K size: 1.42 GB, V size: 1.42 GB.\n"
    )
    (pool,) = state.kv_pools
    assert (pool.tokens, pool.k_size_gb, pool.v_size_gb) == (None, 1.42, 1.42)
    assert "kv_cache" in names(state)


def test_an_old_description_less_bar_after_the_captures_end_line_gives_its_total() -> None:
    state = track_text(
        "[2025-03-08 12:29:21 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=1.45 GB\n"
        "[2025-03-08 12:29:28 TP0] Capture cuda graph end. Time elapsed: 7.23 s. avail mem=0.53 GB. mem usage=0.93 GB.\n"
        "  0%|          | 0/13 [00:00<?, ?it/s]\r 46%|████▌     | 6/13 [00:03<00:03,  1.9it/s]\r"
        "100%|██████████| 13/13 [00:07<00:00,  1.80it/s]\n"
        "[2025-03-08 12:29:29 TP0] max_total_num_tokens=46611, chunked_prefill_size=2048\n"
    )
    (capture,) = state.captures
    assert (capture.graph, capture.status, capture.done, capture.total) == ("target", "done", 13, 13)
    assert capture.elapsed_s == 7.23 and capture.avail_gb == 0.53


# --- the newest versions' lines, from logs MADE from their own format strings ------------------------------


@pytest.mark.parametrize("version", ["0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"])
def test_made_logs_of_each_version_are_read_with_phases_totals_and_eta(version: str) -> None:
    path = MADE / f"made-sglang-{version}-standalone-ready.log"
    text = path.read_bytes().decode()  # read_text() would turn the bars' \r into \n
    assert text.startswith(f"# MADE by scripts/make_sglang_logs.py from SGLang {version}'s own format strings")
    state = track_text(text)
    assert state.state == "ready" and state.error is None
    assert names(state) == ["server_args", "init_distributed", "load_weights", "load_draft_weights", "kv_cache",
                            "capture", "capture_draft", "capture_draft_extend", "http_server", "warmup", "ready"]
    assert [(c.graph, c.done, c.total, c.batch_sizes) for c in state.captures] == [
        (graph, 4, 4, [1, 2, 4, 8]) for graph in ("target", "draft", "draft_extend")]
    assert [(w.model, w.status, w.shards_done) for w in state.weights] == [("target", "done", 3), ("draft", "done", 3)]
    assert [p.model for p in state.kv_pools] == ["target", "draft"]
    assert state.sglang_timings["load_weight"] == 2.25 and state.sglang_timings["cuda_graph.target_decode"] == 1.1
    assert version in _span(state).split()
    # mid-capture: the total and an ETA while the target graphs are captured (0.5.22+ print no sizes before the end)
    tracker = StartupTracker()
    lines = text.split("\n")  # splitlines() would split the bar's \r-redrawn frames too
    at = next(i for i, line in enumerate(lines) if "Capturing batches" in line)
    for line in lines[:at]:
        tracker.feed_line(line)
    for frame in lines[at].split("\r")[:3]:
        tracker.feed_frame(frame)
    (capture,) = tracker.state.captures
    assert (capture.status, capture.done, capture.total) == ("running", 2, 4)
    assert capture.eta_s == pytest.approx(2.0)
    assert tracker.state.phases[-1].name == "capture"


def _span(state) -> str:
    from specmon.sglang.loglines import load_shipped_loglines

    every = load_shipped_loglines()["versions"]
    first, _, last = state.sglang_versions.partition("-")
    return " ".join(every[every.index(first) : every.index(last or first) + 1])


def test_hints_name_the_capture_flag_of_the_version_that_wrote_the_log() -> None:
    oom = (
        "[2026-12-02 10:00:19 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl/python/sglang/srt/model_executor/runner/decode_cuda_graph_runner.py", line 900, in capture\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
    )
    for version, flag in (
        ("0.5.19", "--cuda-graph-max-bs (SGLang 0.5.20+: --cuda-graph-max-bs-decode) (e.g. 16)"),  # 0.5.18-0.5.20
        ("0.5.21", "or --cuda-graph-max-bs-decode (e.g. 16)"),
    ):
        text = (MADE / f"made-sglang-{version}-standalone-ready.log").read_bytes().decode()
        head = text[: text.index("Capturing batches")]
        state = track_text(head.rsplit("\n", 1)[0] + "\n" + oom)
        assert state.error.kind == "cuda_oom" and flag in state.error.hint, (version, state.error.hint)
    spans = track_text(LOADED + oom)  # lines 0.5.13 to 0.5.20 write: both flags, with the rename's version
    assert spans.sglang_versions == "0.5.13-0.5.20"
    assert "or --cuda-graph-max-bs (SGLang 0.5.20+: --cuda-graph-max-bs-decode) (e.g. 16)" in spans.error.hint
    older = track_text(LOADED.replace("dtype: torch.bfloat16, ", "") + oom)  # 0.5.9-0.5.12's KV line
    assert older.sglang_versions == "0.5.10-0.5.12.post1" and "or --cuda-graph-max-bs (e.g. 16)" in older.error.hint
    unknown = track_text(oom)  # nothing says which version
    assert unknown.error.phase == "capture" and unknown.sglang_versions is None
    assert "--cuda-graph-max-bs (SGLang 0.5.20+: --cuda-graph-max-bs-decode)" in unknown.error.hint


@pytest.fixture(scope="session")
def sites(tmp_path_factory) -> dict[str, Path]:
    from tests.support.sglang_installs import install

    root = tmp_path_factory.getbasetemp() / "sglang-installs"
    root.mkdir(exist_ok=True)
    return {version: install(version, root) for version in ("0.4.6.post5", "0.5.16", "0.5.23")}


@pytest.mark.parametrize("version", ["0.4.6.post5", "0.5.16", "0.5.23"])
def test_the_shipped_line_table_is_what_each_real_source_writes(sites, version: str) -> None:
    from specmon.sglang.loglines import read_loglines, templates, versions_of

    reading = read_loglines(sites[version] / "sglang")
    assert reading["version"] == version
    for name, found in reading["lines"].items():
        shipped = [t for t in templates(name) if version in versions_of(name, t)]
        assert sorted(found) == sorted(shipped), name
    assert ("Init parallel begin." in reading["lines"]["init_begin"]) == (version == "0.5.23")


def test_a_value_error_during_0521s_init_is_blamed_on_init_not_on_the_server_arguments() -> None:
    text = (MADE / "made-sglang-0.5.21-standalone-ready.log").read_bytes().decode()
    head = text[: text.index("Init parallel ends")].rsplit("\n", 1)[0] + "\n"
    state = track_text(
        head + "[2026-12-02 10:00:02 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "/sgl/python/sglang/srt/distributed/bootstrap.py", line 130, in init_parallel\n'
        "    raise ValueError(f\"unsupported world size {world_size}\")\n"
        "ValueError: unsupported world size 3\n"
    )
    assert names(state) == ["server_args", "init_distributed"]
    assert (state.error.kind, state.error.phase) == ("exception", "init_distributed")
