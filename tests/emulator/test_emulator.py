"""The SGLang emulator as a real child process: its flags, its log, and its HTTP API over real sockets."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specmon.emulator.speed_model import SpecShape, SpeedModel
from specmon.gpu.model import GpuSnapshot
from specmon.logs.follower import LineSplitter
from specmon.logs.tracker import StartupTracker
from specmon.ports import free_port_pair

pytestmark = pytest.mark.timeout(60)

FIXTURES = Path(__file__).parents[1] / "fixtures"
EAGLE3 = [
    "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/eagle3-8b",
    "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
]
FAST = ["--emulator-speed", "50", "--emulator-decode-speed", "20"]


@dataclass
class Emulator:
    proc: subprocess.Popen
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def gpu_url(self) -> str:
        return f"http://127.0.0.1:{self.port + 1}/_emulator/gpus"

    def log(self) -> str:
        return self.log_path.read_bytes().decode("utf-8", "replace")  # keeps tqdm's \r frames

    def wait_ready(self, timeout: float = 30.0, headers: dict | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"emulator exited {self.proc.returncode}:\n{self.log()[-3000:]}"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.05)
        raise AssertionError(f"emulator not ready:\n{self.log()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def launch(tmp_path: Path, *flags: str, port: int | None = None, name: str = "server.log") -> Emulator:
    port = port or free_port_pair()
    log_path = tmp_path / name
    with log_path.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "specmon.emulator", "--model-path", "/models/llama-8b", "--port", str(port), *flags],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    return Emulator(proc, port, log_path)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """One EAGLE3 server (with metrics) and one plain server, shared by the API tests."""
    tmp = tmp_path_factory.mktemp("emulators")
    spec = launch(tmp, *EAGLE3, *FAST, "--enable-metrics", name="eagle3.log")
    plain = launch(tmp, *FAST, name="plain.log")
    try:
        spec.wait_ready()
        plain.wait_ready()
        yield spec, plain
    finally:
        spec.stop()
        plain.stop()


def sse_chunks(response: httpx.Response) -> list[str]:
    return [line[len("data: "):] for line in response.iter_lines() if line.startswith("data: ")]


def stream(url: str, body: dict, headers: dict | None = None) -> list:
    with httpx.stream("POST", url + "/generate", json={**body, "stream": True}, headers=headers, timeout=30) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = sse_chunks(r)
    assert raw[-1] == "[DONE]"
    return [json.loads(c) for c in raw[:-1]]


def fixture_chunks(name: str) -> list[dict]:
    lines = (FIXTURES / "api" / name).read_text().splitlines()
    return [json.loads(x[6:]) for x in lines if x.startswith("data: ") and x != "data: [DONE]"]


# --- flags ---------------------------------------------------------------------------------------


def run_flags(*flags: str, columns: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run(
        [sys.executable, "-m", "specmon.emulator", *flags], capture_output=True, text=True, timeout=30, env=env
    )


USAGE_PART = re.compile(r"\(.*?\)+(?=\s|$)|\[.*?\]+(?=\s|$)|\S+")
"""How argparse cuts a usage into the parts it wraps (argparse's own pattern)."""


# The recording's SGLang wrote to a file, so argparse wrapped its usage at 80 columns; with COLUMNS set, SGLang's
# argparse wraps the same parts at that width, and so must the emulator.
@pytest.mark.parametrize("columns", [None, "80", "200", "300"])
def test_unknown_flag_fails_with_sglangs_exact_usage_and_exit_2(columns):
    done = run_flags("--model-path", "/m", "--num-speculative-tokens", "16", columns=columns)
    assert done.returncode == 2
    real = (FIXTURES / "logs/h200-0.5.16-unrecognized-num-speculative-tokens.log").read_text()
    expected = real[real.index("usage: sglang serve"):]
    assert "'python -m sglang.launch_server' is still supported" in done.stderr
    if columns in (None, "80"):
        assert done.stderr.endswith(expected)
        return
    ours = done.stderr[done.stderr.index("usage: sglang serve"):]
    assert ours.split() == expected.split()
    *usage, error = ours.splitlines()
    assert error == expected.splitlines()[-1]
    width, indent = int(columns) - 2, " " * len("usage: sglang serve ")
    assert len(usage) < len(expected.splitlines()) - 1, "wrapped wider than the recording"
    for line, following in zip(usage, [*usage[1:], None], strict=True):
        parts = USAGE_PART.findall(line.removeprefix("usage: sglang serve"))
        assert len(line) <= width or len(parts) == 1, line
        if following is not None:
            assert following.startswith(indent) and not following.startswith(indent + " "), following
            assert len(line) + 1 + len(USAGE_PART.match(following.lstrip()).group()) > width, (line, following)


def test_unknown_flag_in_legacy_family_names_launch_server():
    done = run_flags("--emulator-log-family", "legacy", "--model-path", "/m", "--bogus", "1")
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == "launch_server.py: error: unrecognized arguments: --bogus 1"
    assert done.stderr.startswith("usage: launch_server.py [-h] --model-path MODEL_PATH")


def test_draft_tokens_without_steps_raise_sglangs_bare_assertion():
    done = run_flags(
        "--model-path", "/m", "--speculative-algorithm", "EAGLE3", "--speculative-num-draft-tokens", "16"
    )
    assert done.returncode == 1
    real = (FIXTURES / "logs/h200-0.5.16-spec-args-assertion.log").read_text()
    real_tb = real[real.index("Traceback"):].replace("/tmp/site/", "SITE/")
    ours = done.stderr[done.stderr.index("Traceback"):]
    ours = ours.replace("/usr/local/lib/python3.12/dist-packages/", "SITE/")
    assert ours == real_tb
    assert "Max running requests is reset to 48 for speculative decoding." in done.stderr


def test_topk_1_rewrites_draft_tokens_with_sglangs_warning(tmp_path):
    emu = launch(
        tmp_path, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/d",
        "--speculative-num-steps", "1", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "16",
        *FAST,
    )
    try:
        emu.wait_ready()
        info = httpx.get(emu.url + "/server_info").json()
    finally:
        emu.stop()
    real = json.loads((FIXTURES / "api/h200-0.5.16-topk1-server-info.json").read_text())
    assert info["speculative_num_draft_tokens"] == real["speculative_num_draft_tokens"] == 2
    assert re.search(
        r"^\[[\d\- :]+\] speculative_num_draft_tokens is adjusted to speculative_num_steps \+ 1 when "
        r"speculative_eagle_topk == 1$",
        emu.log(),
        re.M,
    )
    assert "Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=2," in emu.log()


# --- the log -------------------------------------------------------------------------------------


def track(log_text: str) -> StartupTracker:
    tracker = StartupTracker()
    tracker.feed_items(LineSplitter().feed(log_text.encode()))
    return tracker


def test_tracker_reads_the_eagle3_log_as_ready_with_all_captures(servers):
    spec, _plain = servers
    state = track(spec.log()).state
    assert state.state == "ready"
    graphs = [c.graph for c in state.captures if c.status == "done"]
    for graph in ("target", "draft", "draft_extend"):
        assert graph in graphs
    assert state.max_total_num_tokens and state.max_total_num_tokens > 100_000
    assert [w.type for w in state.weights] == ["LlamaForCausalLM", "LlamaForCausalLMEagle3"]


def test_log_has_real_milestones_frames_and_access_lines(servers):
    spec, plain = servers
    text = spec.log()
    order = [
        "server_args=ServerArgs(model_path='/models/llama-8b'",
        "Load weight begin. avail mem=",
        "type=LlamaForCausalLMEagle3",
        "KV Cache is allocated. dtype: torch.bfloat16, #tokens: ",
        "Capture target prefill CUDA graph begin. backend=breakable",
        "Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=4",
        "Capture draft decode CUDA graph begin.",
        "Capture draft extend CUDA graph begin.",
        "max_total_num_tokens=",
        "INFO:     Uvicorn running on http://127.0.0.1:",
        '"GET /model_info HTTP/1.1" 200 OK',
        "The server is fired up and ready to roll!",
    ]
    positions = [text.index(marker) for marker in order]
    assert positions == sorted(positions)
    assert re.search(r"\rCapturing batches \(bs=\d+ avail_mem=[\d.]+ GB\):\s+\d+%\|[^|]*\| \d+/\d+ \[", text)
    assert "Capture target decode CUDA graph begin." in plain.log()
    assert "Capture draft" not in plain.log()


def test_decode_batch_lines_every_40_steps_with_accept_len(servers):
    spec, _plain = servers
    chunks = stream(spec.url, {"text": "decode lines", "sampling_params": {"max_new_tokens": 300, "ignore_eos": True}})
    steps = chunks[-1]["meta_info"]["spec_verify_ct"]
    time.sleep(0.2)
    pattern = re.compile(
        r"^\[[\d\- :]+\] Decode batch, #running-req: 1, #token: \d+, token usage: [\d.]+, accept len: ([\d.]+), "
        r"accept rate: [\d.]+, cuda graph: True, gen throughput \(token/s\): [\d.]+, #queue-req: 0$",
        re.M,
    )
    assert len(pattern.findall(spec.log())) >= steps // 40


# --- HTTP API ------------------------------------------------------------------------------------


def test_health_is_503_until_warmup_then_200(tmp_path):
    emu = launch(tmp_path, *FAST, "--emulator-warmup-delay", "1.5")
    try:
        deadline = time.monotonic() + 20
        first = None
        while first is None and time.monotonic() < deadline:
            with contextlib.suppress(httpx.ConnectError):
                first = httpx.get(emu.url + "/health", timeout=2).status_code
            time.sleep(0.02)
        assert first == 503
        assert httpx.get(emu.url + "/health_generate").status_code == 503
        emu.wait_ready()
        assert httpx.get(emu.url + "/health_generate").status_code == 200
    finally:
        emu.stop()
    assert '"GET /health HTTP/1.1" 503 Service Unavailable' in emu.log()


def test_generate_stream_matches_real_sglang_shape(servers):
    spec, _plain = servers
    chunks = stream(spec.url, {"text": "Say something", "sampling_params": {"max_new_tokens": 48, "ignore_eos": True}})
    real = fixture_chunks("h200-0.5.16-generate-eagle3.txt")
    real_final = next(c for c in real if c["meta_info"]["finish_reason"])
    assert set(chunks[0]) == set(real[0]) == {"text", "output_ids", "meta_info"}
    assert set(chunks[0]["meta_info"]) == set(real[0]["meta_info"])
    assert set(chunks[1]["meta_info"]) == set(real[1]["meta_info"])
    final = chunks[-1]["meta_info"]
    assert set(final) == set(real_final["meta_info"])
    assert final["finish_reason"] == {"type": "length", "length": 48}
    assert final["completion_tokens"] == 48 == len(chunks[-1]["output_ids"])
    assert final["spec_accept_length"] == pytest.approx(48 / final["spec_verify_ct"])
    assert sum(final["spec_accept_histogram"]) == final["spec_verify_ct"]
    texts = [c["text"] for c in chunks]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts) and counts[0] == 1
    assert max(b - a for a, b in zip(counts, counts[1:], strict=False)) > 1  # several tokens per verify step


def test_speculation_does_not_change_text_and_prompts_differ(servers):
    spec, plain = servers
    body = {"text": "Tell me about rivers", "sampling_params": {"temperature": 0, "max_new_tokens": 40}}
    a = httpx.post(spec.url + "/generate", json=body, timeout=30).json()
    b = httpx.post(plain.url + "/generate", json=body, timeout=30).json()
    assert a["text"] == b["text"] and a["output_ids"] == b["output_ids"]
    assert "spec_verify_ct" in a["meta_info"] and "spec_verify_ct" not in b["meta_info"]
    other = httpx.post(plain.url + "/generate", json={**body, "text": "Tell me about bridges"}, timeout=30).json()
    assert other["text"] != b["text"]


def test_without_ignore_eos_a_request_can_stop_early(servers):
    _spec, plain = servers
    body = {"text": "short answer", "sampling_params": {"max_new_tokens": 2000}}
    result = httpx.post(plain.url + "/generate", json=body, timeout=30).json()
    assert result["meta_info"]["finish_reason"]["type"] == "stop"
    assert result["meta_info"]["completion_tokens"] < 2000


def test_acceptance_follows_the_per_position_probability(tmp_path):
    emu = launch(
        tmp_path, *EAGLE3, "--emulator-speed", "50", "--emulator-decode-speed", "50",
        "--emulator-accept-prob", "0.6",
    )
    try:
        emu.wait_ready()
        tokens = verifies = 0
        for i in range(4):
            body = {"text": f"acceptance {i}", "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}
            meta = httpx.post(emu.url + "/generate", json=body, timeout=30).json()["meta_info"]
            tokens += meta["completion_tokens"]
            verifies += meta["spec_verify_ct"]
    finally:
        emu.stop()
    expected = SpeedModel(SpecShape(3, 1, 4), 0.6).expected_accept_length()
    assert tokens / verifies == pytest.approx(expected, abs=0.12)
    assert expected < SpeedModel(SpecShape(3, 1, 4), 0.75).expected_accept_length()


def test_flush_cache_resets_avg_accept_length_and_refuses_while_busy(servers):
    spec, _plain = servers
    body = {"text": "fill a window", "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}}
    httpx.post(spec.url + "/generate", json=body, timeout=30)
    state = httpx.get(spec.url + "/get_server_info").json()["internal_states"][0]
    assert 1.5 < state["avg_spec_accept_length"] < 3.5
    assert state["last_gen_throughput"] > 0
    result: dict = {}

    def long_request():
        result["r"] = httpx.post(
            spec.url + "/generate",
            json={"text": "busy", "sampling_params": {"max_new_tokens": 3000, "ignore_eos": True}},
            timeout=30,
        )

    worker = threading.Thread(target=long_request)
    worker.start()
    time.sleep(0.15)
    busy = httpx.post(spec.url + "/flush_cache")
    worker.join()
    assert busy.status_code == 400
    assert busy.text.startswith("Cache flushed.\nPlease check backend logs")
    ok = httpx.post(spec.url + "/flush_cache")
    assert ok.status_code == 200
    assert "avg_spec_accept_length" not in httpx.get(spec.url + "/server_info").json()["internal_states"][0]
    assert "Cache flushed successfully!" in spec.log()
    assert re.search(r"Cache not flushed because there are pending requests\. #queue-req: \d+, #running-req: \d+$",
                     spec.log(), re.M)


def _samples(text: str) -> dict[str, float]:
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def test_metrics_count_tokens_and_verify_calls(servers):
    spec, plain = servers
    assert httpx.get(plain.url + "/metrics").status_code == 404
    before = _samples(httpx.get(spec.url + "/metrics").text)
    meta = stream(spec.url, {"text": "metrics", "sampling_params": {"max_new_tokens": 64, "ignore_eos": True}})[-1][
        "meta_info"
    ]
    after = _samples(httpx.get(spec.url + "/metrics").text)
    assert after["sglang:generation_tokens_total"] - before["sglang:generation_tokens_total"] == 64
    assert after["sglang:spec_verify_calls_total"] - before["sglang:spec_verify_calls_total"] == meta["spec_verify_ct"]
    assert after["sglang:num_requests_total"] - before["sglang:num_requests_total"] == 1
    real = _samples((FIXTURES / "api/h200-0.5.16-metrics-eagle3.txt").read_text())
    for name in ("sglang:prompt_tokens_total", "sglang:spec_accept_length", "sglang:num_running_reqs",
                 "sglang:gen_throughput", "sglang:max_total_num_tokens", "sglang:time_to_first_token_seconds_count"):
        assert name in real and name in after


def test_server_and_model_info_are_labelled_as_emulator(servers):
    spec, _plain = servers
    info = httpx.get(spec.url + "/server_info").json()
    real = json.loads((FIXTURES / "api/h200-0.5.16-server-info-eagle3.json").read_text())
    missing = set(real) - set(info)
    assert not missing, missing
    assert info["emulator"] is True and info["version"] == "0.5.16-emulated"
    assert info["speculative_algorithm"] == "EAGLE3" and info["speculative_num_draft_tokens"] == 4
    model = httpx.get(spec.url + "/model_info").json()
    assert model["emulator"] is True and model["model_path"] == "/models/llama-8b"
    httpx.get(spec.url + "/get_model_info")
    assert "Endpoint '/get_model_info' is deprecated" in spec.log()


def test_openai_endpoints(servers):
    _spec, plain = servers
    r = httpx.post(plain.url + "/v1/completions", json={"prompt": "hi", "max_tokens": 5}, timeout=30).json()
    assert r["object"] == "text_completion" and r["usage"]["completion_tokens"] == 5
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "stream": True, "temperature": 0,
            "stream_options": {"include_usage": True}}
    with httpx.stream("POST", plain.url + "/v1/chat/completions", json=body, timeout=30) as resp:
        raw = sse_chunks(resp)
    assert raw[-1] == "[DONE]"
    chunks = [json.loads(c) for c in raw[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert chunks[-1]["usage"]["completion_tokens"] == 6
    final = httpx.post(plain.url + "/v1/chat/completions", json={**body, "stream": False}, timeout=30).json()
    assert final["choices"][0]["message"]["content"] == text


def test_concurrent_streams_all_finish(servers):
    spec, _plain = servers
    results = [None] * 4

    def one(i):
        results[i] = stream(spec.url, {"text": f"c{i}", "sampling_params": {"max_new_tokens": 60, "ignore_eos": True}})

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert all(r and r[-1]["meta_info"]["completion_tokens"] == 60 for r in results)
    # Batched: either several sequences in one prefill, or a prefill while others were decoding.
    assert re.search(r"Prefill batch, (?:#new-seq: [2-4],|#new-seq: 1, .*#running-req: [1-3],)", spec.log())


def test_api_key_is_required_except_for_health_and_never_logged(tmp_path):
    emu = launch(tmp_path, *FAST, "--api-key", "s3cret-key", "--enable-metrics")
    auth = {"Authorization": "Bearer s3cret-key"}
    try:
        emu.wait_ready()
        denied = httpx.post(emu.url + "/generate", json={"text": "x"})
        assert denied.status_code == 401 and denied.json() == {"error": "Unauthorized"}
        assert httpx.get(emu.url + "/server_info", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert httpx.get(emu.url + "/metrics").status_code == 200
        ok = httpx.post(emu.url + "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 3}},
                        headers=auth)
        assert ok.status_code == 200
        info = httpx.get(emu.url + "/server_info", headers=auth).json()
    finally:
        emu.stop()
    assert info["api_key"] != "s3cret-key"
    assert "s3cret-key" not in emu.log()


def test_bodies_that_are_not_a_json_object_are_answered_400(servers):
    spec, _plain = servers
    for path in ("/generate", "/v1/completions", "/v1/chat/completions"):
        bad = httpx.post(spec.url + path, content=b"{not json", headers={"Content-Type": "application/json"})
        assert (bad.status_code, bad.json()) == (400, {"error": {"message": "The request body must be JSON."}})
        listed = httpx.post(spec.url + path, json=["a list"])
        assert (listed.status_code, listed.json()) == (400, {"error": {"message": "The request body must be a JSON object."}})


def test_gpu_endpoint_shows_memory_and_utilization(servers):
    spec, _plain = servers
    snapshot = GpuSnapshot.from_json(httpx.get(spec.gpu_url).json())
    assert snapshot.available and len(snapshot.gpus) == 1
    gpu = snapshot.gpus[0]
    assert "Emulated" in gpu.name
    assert gpu.memory_used_mib > 0.8 * gpu.memory_total_mib
    assert gpu.processes and gpu.processes[0].pid == spec.proc.pid
    seen = []

    def sample():
        for _ in range(20):
            seen.append(httpx.get(spec.gpu_url).json()["gpus"][0]["util_gpu_pct"])
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    stream(spec.url, {"text": "busy gpu", "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True}})
    sampler.join()
    assert max(seen) > 50


def test_gpu_memory_rises_during_startup(tmp_path):
    emu = launch(tmp_path, "--tp-size", "2", "--emulator-speed", "8")
    readings = []
    try:
        deadline = time.monotonic() + 20
        # One client for every read: httpx.get builds a client (and an SSL context) per call, which on a busy
        # host took most of a second, so a phase's level could pass between two reads.
        with httpx.Client(timeout=2) as client:
            while time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError):
                    data = client.get(emu.gpu_url).json()
                    readings.append(data["gpus"][0]["memory_used_mib"])
                    if client.get(emu.url + "/health").status_code == 200:
                        break
                time.sleep(0.05)
    finally:
        emu.stop()
    assert len(data["gpus"]) == 2
    assert readings[0] < 2000 and readings[-1] > 100_000
    assert len(set(readings)) >= 4
    assert readings == sorted(readings)
    assert "[" in emu.log() and " TP1] Load weight begin." in emu.log()


# --- failures ------------------------------------------------------------------------------------


def test_port_in_use_fails_after_the_whole_load_like_uvicorn(tmp_path):
    port = free_port_pair()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        emu = launch(tmp_path, *FAST, port=port)
        assert emu.proc.wait(30) == 3
    text = emu.log()
    assert f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): address already in use" in text
    assert text.index("max_total_num_tokens=") < text.index("Application startup complete.") < text.index("[Errno 98]")


@pytest.mark.parametrize(
    ("kind", "message", "phase"),
    [
        ("oom-during-capture", "Exception: Capture cuda graph failed: CUDA out of memory.", "capture"),
        ("not-enough-memory", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
         "kv_cache"),
        ("weight-keyerror", "KeyError: 'model.layers.0.self_attn.qkv_proj.weight'", "load_draft_weights"),
    ],
)
def test_failures_end_like_sglang_and_the_tracker_classifies_them(tmp_path, kind, message, phase):
    emu = launch(tmp_path, *EAGLE3, *FAST, "--emulator-fail", kind)
    assert emu.proc.wait(30) == -signal.SIGKILL
    text = emu.log()
    assert message in text
    assert "Scheduler hit an exception: Traceback (most recent call last):" in text
    assert "Received sigquit from a child process. It usually means the child failed." in text
    state = track(text).state
    assert state.state == "failed"
    assert state.error is not None and state.error.phase == phase


def test_legacy_family_log_and_endpoints(tmp_path):
    emu = launch(tmp_path, *EAGLE3, *FAST, "--emulator-log-family", "legacy")
    try:
        emu.wait_ready()
        assert httpx.get(emu.url + "/server_info").status_code == 404
        info = httpx.get(emu.url + "/get_server_info").json()
        chunks = stream(emu.url, {"text": "legacy", "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}})
        state = track(emu.log()).state
    finally:
        emu.stop()
    assert info["version"] == "0.5.3-emulated"
    assert "spec_verify_ct" in chunks[-1]["meta_info"] and "spec_accept_length" not in chunks[-1]["meta_info"]
    text = emu.log()
    assert "Overlap scheduler is disabled because of using eagle speculative decoding.\n" in text
    assert "Capture cuda graph bs [" in text and "Capture draft extend cuda graph end. Time elapsed:" in text
    assert re.search(r"Decode batch\. #running-req: 1, .*accept len: [\d.]+, cuda graph: True, .*#queue-req: 0, $",
                     text, re.M)
    assert state.state == "ready"
    assert {"target", "draft", "draft_extend"} <= {c.graph for c in state.captures}


def test_specmon_emulate_runs_the_same_emulator():
    done = subprocess.run(
        [sys.executable, "-m", "specmon", "emulate", "--model-path", "/m", "--bogus"],
        capture_output=True, text=True, timeout=30,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == "sglang serve: error: unrecognized arguments: --bogus"
    assert "is still supported" not in done.stderr


def test_log_level_warning_hides_milestones_like_sglang(tmp_path):
    emu = launch(
        tmp_path, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/d",
        "--speculative-num-steps", "2", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "8",
        "--log-level", "warning", *FAST,
    )
    try:
        emu.wait_ready()
        assert httpx.get(emu.url + "/get_server_info").json()["speculative_num_draft_tokens"] == 3
    finally:
        emu.stop()
    text = emu.log()
    assert "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1" in text
    assert "Endpoint '/get_server_info' is deprecated" in text
    for hidden in ("Load weight begin", "max_total_num_tokens=", "Uvicorn running", "ready to roll", '"GET /health'):
        assert hidden not in text


def test_a_burst_of_sigterms_under_load_ends_the_server_gracefully(tmp_path):
    emu = launch(tmp_path, *FAST)
    emu.wait_ready()
    stop = threading.Event()

    def poll() -> None:  # each answer writes an access line, under the log's lock
        with httpx.Client(timeout=2) as client:
            while not stop.is_set():
                with contextlib.suppress(httpx.HTTPError):
                    client.get(emu.url + "/health")

    pollers = [threading.Thread(target=poll, daemon=True) for _ in range(4)]
    for poller in pollers:
        poller.start()
    try:
        while emu.proc.poll() is None and not emu.log().count("GET /health") > 200:
            time.sleep(0.01)
        sent = 0
        while emu.proc.poll() is None and sent < 500:  # signals that land inside an earlier one's handler
            emu.proc.send_signal(signal.SIGTERM)
            sent += 1
        code = emu.proc.wait(15)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running 15 s after {sent} SIGTERMs:\n{emu.log()[-2000:]}") from None
    finally:
        stop.set()
        emu.stop()
    assert code == 0, emu.log()[-2000:]
    assert emu.log().count("SIGTERM received.") == 1 and "Gracefully exiting" in emu.log()
