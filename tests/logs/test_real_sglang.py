"""What a real SGLang 0.5.16 on an H200 produced, replayed through specmon's real code paths (no GPU needed).

`tests/fixtures/real-sglang-0.5.16/` holds the runs of `scripts/real-sglang-h200.sh ready|failures` (its
README says which flags each had). Expected values are read from the logs themselves with the regexes below,
independently of the tracker, plus a few facts read by hand and written here (noted where they are).
"""

from __future__ import annotations

import csv
import io
import json
import re
import statistics
import subprocess
import sys
from datetime import datetime
from functools import cache
from pathlib import Path

import pytest

from specmon.gpu.model import GpuSnapshot
from specmon.logs.follower import LogFollower
from specmon.logs.summary import ChangePrinter
from specmon.logs.tracker import StartupTracker
from specmon.serving.metrics import parse_metrics
from specmon.serving.spec import spec_settings
from specmon.units import format_seconds
from tests.support.serving_replay import ReplayServer

ROOT = Path(__file__).resolve().parents[2]
REAL = Path(__file__).parents[1] / "fixtures" / "real-sglang-0.5.16"
READY = ("plain", "eagle3", "standalone", "topk1-rewrite")
FAILED = ("unrecognized", "spec-assertion", "port-taken", "oom")
WITH_METRICS = ("eagle3", "topk1-rewrite")

TS = r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] "
CAPTURE_END = re.compile(TS + r"Capture (\w+ [\w ]+?) CUDA graph end\. elapsed=([\d.]+) s")
WEIGHT_END = re.compile(TS + r"Load weight end\. .*?type=(\w+)")
MAX_TOKENS = re.compile(TS + r"max_total_num_tokens=(\d+)")
KV_TOKENS = re.compile(TS + r"KV Cache is allocated\. .*?#tokens: (\d+)")
FIRST_TS = re.compile(r"^" + TS, re.M)
SERVER_ARGS = re.compile(TS + r"server_args=ServerArgs\(")
FIRED_UP = re.compile(TS + r"The server is fired up and ready to roll!")
SIGTERM = re.compile(TS + r"SIGTERM received\.")


def log_text(config: str) -> str:
    return (REAL / config / "server.log").read_text(errors="replace")


def stamp(text: str) -> str:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S").isoformat()


@cache
def summary(config: str) -> tuple[int, dict]:
    """`specmon log-summary --json` on the real log, as a process: (exit code, JSON)."""
    done = subprocess.run(
        [sys.executable, "-m", "specmon", "log-summary", "--json", str(REAL / config / "server.log")],
        capture_output=True, timeout=60, cwd=ROOT, check=False,
    )
    return done.returncode, json.loads(done.stdout)


def read_json(config: str, name: str) -> dict:
    return json.loads((REAL / config / name).read_text())


def smi_csv(config: str, name: str) -> list[dict[str, str]]:
    """nvidia-smi's `--format=csv` rows as dicts keyed by its header."""
    with (REAL / config / name).open(newline="") as fh:
        reader = csv.reader(fh, skipinitialspace=True)
        header = next(reader)
        return [dict(zip(header, row, strict=True)) for row in reader if row]


def mib(cell: str) -> float:
    value, _, unit = cell.partition(" ")
    assert unit == "MiB", cell
    return float(value)


def procs(config: str) -> dict[int, tuple[int, str]]:
    """procs.txt (`ps -eo pid,ppid,pgid,cmd`) as pid -> (ppid, command)."""
    rows = {}
    for line in (REAL / config / "procs.txt").read_text().splitlines():
        pid, ppid, _pgid, cmd = line.split(None, 3)
        rows[int(pid)] = (int(ppid), cmd)
    return rows


# --- the logs through `specmon log-summary --json` ------------------------------------------------------


@pytest.mark.parametrize("config", READY)
def test_ready_log_summary_matches_what_the_log_says(config: str) -> None:
    code, got = summary(config)
    text = log_text(config)
    assert code == 0
    # The whole log ends with the script's kill: ready, then stopped (not failed).
    assert got["state"] == "stopped" and got["error"] is None and got["log_family"] == "new"
    (stopped,) = SIGTERM.findall(text)
    assert got["stopped_at"] == stamp(stopped)
    steps = (REAL / config / "steps.txt").read_text()
    assert f"[{stamp(stopped)[11:]}] {config}: stopping " in steps  # the script's clock and the log's agree
    names = [p["name"] for p in got["phases"]]
    assert names[0] == "server_args" and names[-2:] == ["ready", "shutdown"]
    assert all(p["status"] == "done" for p in got["phases"][:-1])
    assert got["phases"][-1]["started"] == got["stopped_at"]

    ends = CAPTURE_END.findall(text)
    assert [c["label"] for c in got["captures"]] == [label for _, label, _ in ends]
    for capture, (at, _, elapsed) in zip(got["captures"], ends, strict=True):
        assert capture["status"] == "done" and capture["done"] == capture["total"] == len(capture["batch_sizes"])
        assert capture["elapsed_s"] == float(elapsed) and capture["ended"] == stamp(at)

    assert [(w["type"], w["status"]) for w in got["weights"]] == [(t, "done") for _, t in WEIGHT_END.findall(text)]
    ((_, tokens),) = MAX_TOKENS.findall(text)
    assert got["max_total_num_tokens"] == int(tokens)
    assert [k["tokens"] for k in got["kv_pools"]] == [int(t) for _, t in KV_TOKENS.findall(text)]

    first = stamp(FIRST_TS.search(text)[1])
    (ready,) = FIRED_UP.findall(text)
    launched = stamp(SERVER_ARGS.search(text)[1])
    assert (got["first_ts"], got["ready_at"], got["launched_at"]) == (first, stamp(ready), launched)
    ready_at = datetime.fromisoformat(got["ready_at"])
    assert got["ready_after_s"] == (ready_at - datetime.fromisoformat(first)).total_seconds()
    assert got["ready_after_server_args_s"] == (ready_at - datetime.fromisoformat(launched)).total_seconds()
    # The H200 run's own summary, taken while the server ran, said ready with the same figures.
    saved = read_json(config, "summary.json")
    assert saved["state"] == "ready" and saved["stopped_at"] is None
    assert got["phases"][:-1] == saved["phases"]
    for key in ("captures", "weights", "max_total_num_tokens", "ready_after_s", "ready_at", "first_ts"):
        assert got[key] == saved[key], key


def test_the_graphs_each_config_captured() -> None:
    """Read by hand from the logs: which graphs each configuration captured, with which batch sizes."""
    labels = {c: [(g["label"], g["total"]) for g in summary(c)[1]["captures"]] for c in READY}
    assert labels["plain"] == [("target prefill", 58), ("target decode", 4)]  # --cuda-graph-max-bs 8: 1, 2, 4, 8
    spec = [("target prefill", 58), ("target verify", 8), ("draft prefill", 58), ("draft decode", 8),
            ("draft extend", 8)]
    assert labels["eagle3"] == labels["standalone"] == spec
    # One draft step: SGLang captures no draft decode graph.
    assert labels["topk1-rewrite"] == [c for c in spec if c[0] != "draft decode"]
    weights = {c: [w["type"] for w in summary(c)[1]["weights"]] for c in READY}
    assert weights["plain"] == ["LlamaForCausalLM"]
    assert weights["eagle3"] == weights["topk1-rewrite"] == ["LlamaForCausalLM", "LlamaForCausalLMEagle3"]
    assert weights["standalone"] == ["LlamaForCausalLM", "LlamaForCausalLM"]  # the target is its own draft
    assert {c: summary(c)[1]["speculative_algorithm"] for c in READY} == {
        "plain": None, "eagle3": "EAGLE3", "standalone": "STANDALONE", "topk1-rewrite": "EAGLE3"}


def test_unrecognized_flag_names_the_right_one() -> None:
    code, got = summary("unrecognized")
    last = log_text("unrecognized").rstrip().splitlines()[-1]
    assert last == "sglang serve: error: unrecognized arguments: --num-speculative-tokens 16"
    assert code == 1 and got["state"] == "failed"
    error = got["error"]
    assert (error["kind"], error["phase"]) == ("unrecognized_arguments", "server_args")
    assert error["message"] == last
    assert "--speculative-num-draft-tokens" in error["hint"]
    assert (REAL / "unrecognized" / "exit-code.txt").read_text().strip() == "2"  # argparse's exit status


def test_draft_tokens_without_steps_is_invalid_server_args_with_the_give_all_three_rule() -> None:
    code, got = summary("spec-assertion")
    text = log_text("spec-assertion")
    assert text.rstrip().endswith("AssertionError") and "_handle_eagle_family" in text
    assert code == 1 and got["state"] == "failed"
    error = got["error"]
    assert (error["kind"], error["phase"]) == ("invalid_server_args", "server_args")
    for flag in ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"):
        assert flag in error["hint"]
    assert "together, or none" in error["hint"]
    assert (REAL / "spec-assertion" / "exit-code.txt").read_text().strip() == "1"


def test_taken_port_is_port_in_use_even_though_sglang_hangs_in_warmup_afterwards() -> None:
    code, got = summary("port-taken")
    text = log_text("port-taken")
    assert "[Errno 98] error while attempting to bind on address ('127.0.0.1', 30013)" in text
    assert "Initialization failed. warmup error" in text  # 2 minutes later, after warming up the other server
    assert code == 1 and got["state"] == "failed"
    error = got["error"]
    assert (error["kind"], error["phase"]) == ("port_in_use", "http_server")
    assert "[Errno 98]" in error["message"] and "30013" in error["hint"]
    # Everything before the bind went fine, as the log says.
    assert [c["label"] for c in got["captures"]] == [label for _, label, _ in CAPTURE_END.findall(text)]
    assert all(c["status"] == "done" for c in got["captures"])
    ((_, tokens),) = MAX_TOKENS.findall(text)
    assert got["max_total_num_tokens"] == int(tokens)
    assert [p["name"] for p in got["phases"] if p["status"] == "failed"] == ["http_server"]
    assert (REAL / "port-taken" / "exit-code.txt").read_text().strip() == "137"  # SGLang kills its own tree


def test_mem_fraction_0995_is_cuda_oom_with_the_lower_mem_fraction_hint() -> None:
    code, got = summary("oom")
    text = log_text("oom")
    assert "mem_fraction_static=0.995" in text
    assert code == 1 and got["state"] == "failed"
    error = got["error"]
    assert (error["kind"], error["phase"]) == ("cuda_oom", "capture")
    assert error["message"].startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 140.00 MiB.")
    assert "lower --mem-fraction-static (now 0.995; e.g. 0.94)" in error["hint"]  # the value its server_args show
    assert [k["tokens"] for k in got["kv_pools"]] == [int(t) for _, t in KV_TOKENS.findall(text)] == [18130898]
    assert got["captures"] == [] and got["max_total_num_tokens"] is None


def test_oom_fails_only_the_phase_it_happened_in() -> None:
    _, got = summary("oom")
    assert "Memory pool end. avail mem=0.48 GB" in log_text("oom")
    assert [p["name"] for p in got["phases"] if p["status"] == "failed"] == ["capture"]


# --- the same logs the way --follow sees them: a file written in chunks ---------------------------------


@pytest.mark.parametrize("config", READY + FAILED)
def test_follower_on_a_growing_file_reaches_the_same_state(config: str, tmp_path: Path) -> None:
    data = (REAL / config / "server.log").read_bytes()
    path = tmp_path / "server.log"
    tracker = StartupTracker()
    with path.open("ab", buffering=0) as out, LogFollower(path) as follower:
        for i in range(0, len(data), 1531):  # cut anywhere: inside lines, inside progress frames
            out.write(data[i : i + 1531])
            tracker.feed_items(follower.poll())
            tracker.drain_events()
        tracker.feed_items(follower.poll())
    summarised = summary(config)[1]
    summarised.pop("acceptance")  # log-summary's reading of the served decode lines, beside the startup's state
    assert tracker.state.to_json() == summarised


def test_live_follow_output_agrees_with_the_summary() -> None:
    """The H200 run's `log-summary --follow` output ended on the state log-summary reads from the file."""
    for config in READY:
        follow = (REAL / config / "follow.txt").read_text()
        got = summary(config)[1]
        assert f"READY after {format_seconds(got['ready_after_s'])}" in follow
        assert follow.rstrip().endswith("log-summary --follow exit: 0")
    for config in FAILED:
        follow = (REAL / config / "follow.txt").read_text()
        assert f"!! ERROR  {summary(config)[1]['error']['kind']} during" in follow


def test_follow_shows_each_captures_time_as_the_log_gives_it(tmp_path: Path) -> None:
    """--follow's printer fed as it is live: the log written one line or progress frame at a time."""
    path = tmp_path / "server.log"
    tracker, out = StartupTracker(), io.StringIO()
    printer = ChangePrinter(out)
    with path.open("ab", buffering=0) as log, LogFollower(path) as follower:
        for piece in re.split(rb"(?<=[\r\n])", (REAL / "eagle3" / "server.log").read_bytes()):
            log.write(piece)
            tracker.feed_items(follower.poll())
            printer.show(tracker.drain_events(), tracker.state)
    follow = out.getvalue()
    assert "READY after 51.0s" in follow
    for _, label, elapsed in CAPTURE_END.findall(log_text("eagle3")):
        line = next(x for x in follow.splitlines() if f"capture {label}" in x and " done " in x)
        assert f"({float(elapsed):.1f}s)" in line, line


# --- the topk-1 server: asked 16 draft tokens, runs 2 ---------------------------------------------------


def test_check_against_the_real_topk1_server_info_says_16_asked_2_effective() -> None:
    info = REAL / "topk1-rewrite" / "server-info.json"
    assert json.loads(info.read_text())["speculative_num_draft_tokens"] == 2
    with ReplayServer(server_info=str(info), metrics=str(REAL / "topk1-rewrite" / "metrics.txt")) as server:
        done = subprocess.run(
            [sys.executable, "-m", "specmon", "check", "--url", server.url, "--preset", "h200-topk1-16",
             "--presets", str(REAL / "presets"), "--json"],
            capture_output=True, timeout=60, cwd=ROOT, check=False,
        )
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["ok"] is False
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["preset"]["level"] == "warn"
    assert checks["preset"]["detail"].startswith("speculative_num_draft_tokens: 16 asked, 2 effective")
    assert checks["speculation"]["detail"] == "EAGLE3, draft /tmp/tiny/eagle3, steps 1, topk 1, draft tokens 2"
    assert (report["spec"]["num_steps"], report["spec"]["eagle_topk"], report["spec"]["num_draft_tokens"]) == (1, 1, 2)
    # What the live server answered on the H200, check for check.
    saved = read_json("topk1-rewrite", "check.json")
    saved_checks = {c["name"]: c for c in saved["checks"]}
    for name in ("server", "speculation", "preset"):
        assert checks[name] == saved_checks[name]
    static = ("algorithm", "draft_model_path", "num_steps", "eagle_topk", "num_draft_tokens", "version",
              "max_total_num_tokens", "model_path")
    assert {k: report["spec"][k] for k in static} == {k: saved["spec"][k] for k in static}


def test_sglang_logged_the_rewrite_the_preset_check_reports() -> None:
    assert "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1" in log_text("topk1-rewrite")
    assert "speculative_num_draft_tokens=2" in log_text("topk1-rewrite")


# --- GPUs: specmon's NVML reading against nvidia-smi at the same moment ----------------------------------


@pytest.mark.parametrize("config", READY)
def test_live_gpu_reading_agrees_with_nvidia_smi_and_names_the_scheduler(config: str) -> None:
    snapshot = GpuSnapshot.from_json(read_json(config, "live-specmon-gpus.json"))
    (smi_gpu,) = smi_csv(config, "live-smi-gpus.csv")
    (smi_app,) = smi_csv(config, "live-smi-apps.csv")
    (gpu,) = snapshot.gpus
    assert snapshot.available and gpu.name == "NVIDIA H200"
    assert abs(gpu.memory_used_mib - mib(smi_gpu["memory.used [MiB]"])) <= 64
    assert gpu.memory_total_mib == mib(smi_gpu["memory.total [MiB]"])
    assert 20 * 1024 < gpu.memory_used_mib < 40 * 1024  # --mem-fraction-static 0.2 of 140 GiB, plus graphs
    (proc,) = snapshot.processes
    assert proc.pid == int(smi_app["pid"]) and proc.gpu_index == 0 and proc.alive and proc.state == "running"
    assert abs(proc.used_mib - mib(smi_app["used_gpu_memory [MiB]"])) <= 64
    # The pid holding the GPU is SGLang's scheduler, a child of the server process the script started.
    server_pid = int((REAL / config / "server.pid").read_text())
    table = procs(config)
    ppid, command = table[proc.pid]
    assert command == "sglang::scheduler" and ppid == server_pid
    assert table[server_pid][1].startswith("python3 -m sglang.launch_server")
    assert proc.name.strip() == "sglang::scheduler"
    assert 0 < read_json(config, "live-specmon-gpus.json")["poll_ms"] < 1000


@pytest.mark.parametrize("config", READY)
def test_after_the_server_stopped_no_process_is_left_and_the_memory_is_back(config: str) -> None:
    snapshot = GpuSnapshot.from_json(read_json(config, "stopped-specmon-gpus.json"))
    (smi_gpu,) = smi_csv(config, "stopped-smi-gpus.csv")
    assert smi_csv(config, "stopped-smi-apps.csv") == []
    assert snapshot.processes == []
    (gpu,) = snapshot.gpus
    assert gpu.memory_used_mib == mib(smi_gpu["memory.used [MiB]"]) == 0.0
    assert "idle" in gpu.throttle_reasons


# --- bench.json: internally consistent, and the settings are the ones that ran ---------------------------


@pytest.mark.parametrize("config", READY)
def test_bench_result_is_internally_consistent(config: str) -> None:
    bench = read_json(config, "bench.json")
    measured = [r for r in bench["requests"] if not r["warmup"]]
    assert bench["status"] == "finished" and bench["settings"]["requests"] == 8
    assert len(measured) == 8 and all(r["ok"] for r in measured)
    summary_ = bench["summary"]
    assert summary_["requests_ok"] == 8 and summary_["requests_failed"] == 0
    assert all(r["completion_tokens"] == bench["settings"]["max_new_tokens"] == 64 for r in measured)
    decode = summary_["decode_tok_s"]
    assert decode["n"] == 8 and decode["median"] == pytest.approx(statistics.median(r["decode_tok_s"] for r in measured))
    assert decode["ci95"][0] <= decode["median"] <= decode["ci95"][1]
    assert summary_["ttft_s"]["median"] == pytest.approx(statistics.median(r["ttft_s"] for r in measured))
    completion = sum(r["completion_tokens"] for r in measured)
    metrics = bench["cross_checks"]["metrics"]
    assert metrics["client_completion_tokens"] == completion == metrics["generation_tokens"] and not metrics["reset"]
    accept = summary_["accept_length"]
    if bench["server"]["speculative"]["algorithm"] is None:
        assert accept["token_weighted"] is None and metrics["spec_verify_calls"] is None
        return
    verify = sum(r["spec_verify_ct"] for r in measured)
    assert (accept["completion_tokens"], accept["spec_verify_ct"]) == (completion, verify)
    assert accept["token_weighted"] == pytest.approx(completion / verify)
    assert metrics["spec_verify_calls"] == verify and metrics["accept_length"] == pytest.approx(completion / verify)
    assert bench["cross_checks"]["mismatches"] == {}
    if bench["server"]["speculative"]["algorithm"] == "EAGLE3":
        assert 1.0 <= accept["token_weighted"] < 1.1  # a random EAGLE-3 head is (almost) never right


@pytest.mark.parametrize("config", READY)
def test_bench_records_the_settings_the_server_ran(config: str) -> None:
    bench = read_json(config, "bench.json")
    effective = spec_settings(read_json(config, "server-info.json"))
    recorded = bench["server"]["speculative"]
    assert recorded == {"algorithm": effective.algorithm, "draft_model_path": effective.draft_model_path,
                        "num_steps": effective.num_steps, "eagle_topk": effective.eagle_topk,
                        "num_draft_tokens": effective.num_draft_tokens}
    assert bench["server"]["version"] == effective.version == "0.5.16"


def test_topk1_bench_records_2_draft_tokens_not_the_16_asked() -> None:
    bench = read_json("topk1-rewrite", "bench.json")
    assert bench["preset"] == "h200-topk1-16"
    assert "--speculative-num-draft-tokens 16" in procs("topk1-rewrite")[int(
        (REAL / "topk1-rewrite" / "server.pid").read_text())][1]
    assert (bench["server"]["speculative"]["num_steps"], bench["server"]["speculative"]["num_draft_tokens"]) == (1, 2)


@pytest.mark.parametrize("config", WITH_METRICS)
def test_metrics_after_the_bench_cover_its_delta_and_show_the_effective_draft_tokens(config: str) -> None:
    bench = read_json(config, "bench.json")
    after = parse_metrics((REAL / config / "metrics.txt").read_text())
    delta = bench["cross_checks"]["metrics"]
    assert after.generation_tokens >= delta["generation_tokens"] > 0
    assert after.spec_verify_calls >= delta["spec_verify_calls"] > 0
    # Counted since start: SGLang's warmup, two checks and nine bench requests (all 64 tokens but the warmup's).
    assert after.num_requests == 12
    assert after.totals["sglang:spec_num_draft_tokens"] == bench["server"]["speculative"]["num_draft_tokens"]


@pytest.mark.parametrize("config", READY)
def test_shutdown_ends_with_sglangs_kill_process_tree_line(config: str) -> None:
    _, got = summary(config)
    assert log_text(config).rstrip().splitlines()[-1].split("] ", 1)[1].startswith("kill_process_tree called")
    (shutdown,) = [p for p in got["phases"] if p["name"] == "shutdown"]
    assert shutdown["status"] == "done" and shutdown["ended"] is not None
