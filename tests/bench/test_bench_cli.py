"""`specmon bench` and `specmon results` as real processes against the loopback server."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import msgspec
import pytest

from specmon.bench.compare import compare, compare_all
from specmon.bench.prompts import Prompt
from specmon.bench.results import ResultStore
from specmon.bench.run import BenchRun, RunSettings
from specmon.testing.loopback_server import LoopbackConfig, LoopbackServer

SECRET = "sk-test-7f3a9c1e-never-print-me"


def specmon(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specmon", *args], capture_output=True, text=True, timeout=timeout,
        env={**os.environ, **(env or {})}, cwd=Path(__file__).parents[2],
    )


@pytest.fixture
def state_env(tmp_path):
    return {"XDG_STATE_HOME": str(tmp_path / "state"), "SPECMON_API_KEY": ""}


def test_bench_json_has_the_documented_shape(state_env, tmp_path):
    with LoopbackServer(LoopbackConfig(tokens_per_s=1500)) as server:
        proc = specmon("bench", "--url", server.url.replace("127.0.0.1", "localhost"), "--requests", "3",
                       "--max-new-tokens", "24", "--warmup", "1", "--json", env=state_env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["preset"] == "EAGLE3 3/1/4"
    assert out["url"].startswith("http://127.0.0.1:")
    assert out["server"]["speculative"]["num_draft_tokens"] == 4
    assert len(out["requests"]) == 4 and sum(r["warmup"] for r in out["requests"]) == 1
    s = out["summary"]
    assert set(s["decode_tok_s"]) >= {"median", "p10", "p90", "mean", "ci95"}
    assert set(s["accept_length"]) >= {"token_weighted", "median"}
    assert set(s["ttft_s"]) == {"median", "p90"} and set(s["itl_ms"]) == {"median", "p90"}
    assert s["requests_ok"] == 3 and s["requests_failed"] == 0 and s["flags"] in ([], ["unstable"])
    assert 1200 < s["decode_tok_s"]["median"] < 1800
    saved = Path(out["saved_to"])
    assert saved.is_relative_to(tmp_path / "state" / "specmon" / "results") and saved.exists()


def test_bench_text_output_and_preset_settings(state_env):
    with LoopbackServer(LoopbackConfig(tokens_per_s=2000)) as server:
        proc = specmon("bench", "--url", server.url, "--preset", "demo-eagle3-5", "--requests", "2",
                       "--max-new-tokens", "16", "--warmup", "0", env=state_env)
        assert proc.returncode == 0, proc.stderr
        assert server.requests_seen[0]["sampling_params"]["max_new_tokens"] == 16
    assert "specmon bench: demo-eagle3-5 at http://127.0.0.1:" in proc.stdout
    assert "acceptance length:" in proc.stdout and "token-weighted" in proc.stdout
    # Two requests timed on a busy machine may differ by over 10% ("unstable"); no other flag is expected.
    flags = re.findall(r"^FLAG ([\w-]+)", proc.stdout, re.M)
    assert set(flags) <= {"unstable"} and ("flags: none" in proc.stdout) is not bool(flags), proc.stdout


@pytest.mark.parametrize("source", ["env", "file"])
def test_api_key_is_sent_as_bearer_and_never_printed_or_stored(state_env, tmp_path, source):
    env = dict(state_env)
    args = []
    if source == "env":
        env["SPECMON_API_KEY"] = SECRET
    else:
        key_file = tmp_path / "key"
        key_file.write_text(SECRET + "\n")
        args = ["--api-key-file", str(key_file)]
    with LoopbackServer(LoopbackConfig(api_key=SECRET, tokens_per_s=2000)) as server:
        proc = specmon("bench", "--url", server.url, "--requests", "2", "--max-new-tokens", "8", "--json", *args,
                       env=env)
        assert {h.get("authorization") for h in server.headers_seen} == {f"Bearer {SECRET}"}
    assert proc.returncode == 0, proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    for path in (tmp_path / "state").rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text()


def test_a_wrong_api_key_stops_at_once_with_a_message_not_a_crash(state_env):
    with LoopbackServer(LoopbackConfig(api_key=SECRET)) as server:
        proc = specmon("bench", "--url", server.url, "--requests", "8", "--max-new-tokens", "8", "--warmup", "0",
                       env={**state_env, "SPECMON_API_KEY": "wrong-key"})
        generated = server.requests_seen
    assert proc.returncode == 2 and generated == []
    assert "the server rejected the API key" in proc.stderr
    assert "wrong-key" not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (Path(state_env["XDG_STATE_HOME"]) / "specmon" / "results").exists()


def test_bad_arguments_exit_2(state_env, tmp_path):
    proc = specmon("bench", "--url", "http://127.0.0.1:9", "--requests", "0", env=state_env)
    assert proc.returncode == 2 and "--requests must be at least 1" in proc.stderr
    proc = specmon("bench", "--url", "http://127.0.0.1:9", "--api-key-file", str(tmp_path / "nope"), env=state_env)
    assert proc.returncode == 2 and "cannot read the API key file" in proc.stderr
    proc = specmon("bench", "--url", "http://127.0.0.1:9", "--prompts", str(tmp_path / "nope.jsonl"), env=state_env)
    assert proc.returncode == 2 and "cannot read prompts" in proc.stderr


class _NotSGLang(BaseHTTPRequestHandler):
    """A web server that is not SGLang: a page for every GET, 404 for every POST."""

    def do_GET(self):
        body = b"[1, 2, 3]" if self.path.endswith("server_info") and self.server.json_list else b"<html>hi</html>"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        self.send_error(404)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("kind", ["closed port", "html", "json list"])
def test_nothing_to_measure_stops_at_once_exits_2_and_saves_nothing(state_env, kind):
    server = None
    url = "http://127.0.0.1:9"
    if kind != "closed port":
        server = ThreadingHTTPServer(("127.0.0.1", 0), _NotSGLang)
        server.json_list = kind == "json list"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        for extra in ((), ("--json",)):
            proc = specmon("bench", "--url", url, "--requests", "2", "--warmup", "0", *extra, env=state_env)
            assert proc.returncode == 2, proc.stderr
            assert "specmon bench: not an SGLang server: " in proc.stderr and "Traceback" not in proc.stderr
            assert "saved:" not in proc.stdout
            if extra:
                assert json.loads(proc.stdout)["saved_to"] is None
    finally:
        if server is not None:
            server.shutdown()
    assert not (Path(state_env["XDG_STATE_HOME"]) / "specmon" / "results").exists()


def test_an_unknown_preset_exits_2(state_env):
    proc = specmon("bench", "--url", "http://127.0.0.1:9", "--preset", "NOSUCH", env=state_env)
    assert proc.returncode == 2 and "no preset named 'NOSUCH'" in proc.stderr
    proc = specmon("bench", "--url", "http://127.0.0.1:9", "--stall-timeout", "nan", env=state_env)
    assert proc.returncode == 2 and "--stall-timeout must be a positive number" in proc.stderr


def test_an_unwritable_state_directory_is_an_error_never_saved(tmp_path):
    state = tmp_path / "state"
    (state / "specmon").mkdir(parents=True)
    (state / "specmon" / "results").write_text("a file, not a directory")
    with LoopbackServer(LoopbackConfig(tokens_per_s=2000)) as server:
        proc = specmon("bench", "--url", server.url, "--requests", "2", "--max-new-tokens", "8", "--warmup", "0",
                       env={"XDG_STATE_HOME": str(state), "SPECMON_API_KEY": ""})
        generated = server.requests_seen
    assert proc.returncode == 2 and generated == []
    assert "cannot save results in" in proc.stderr and "saved:" not in proc.stdout


PROMPTS = [Prompt(id=f"p{i}", text=f"Prompt {i} about benchmarks.") for i in range(5)]


def _record_runs(results_dir: Path) -> list:
    runs = []
    for name, spec, rate in (("baseline", False, 500), ("eagle3-5", True, 1000)):
        config = LoopbackConfig(tokens_per_s=rate, speculative=spec, chunk_tokens=[3, 2] if spec else [1])
        with LoopbackServer(config) as server:
            bench = BenchRun(server.url, name, RunSettings(requests=5, max_new_tokens=40, warmup=0),
                             results_dir=str(results_dir), prompts=PROMPTS, flush_delay_s=0.01)
            runs.append(bench.run_blocking())
    return runs


def test_results_lists_compares_and_exports(tmp_path):
    base, spec = _record_runs(tmp_path)
    table = specmon("results", "--dir", str(tmp_path))
    assert table.returncode == 0, table.stderr
    assert base.run_id in table.stdout and spec.run_id in table.stdout
    speedups = re.findall(r"(\d+\.\d+)× \((\d+\.\d+)–(\d+\.\d+)\)", table.stdout)
    assert len(speedups) == 1
    value, low, high = map(float, speedups[0])
    assert value == pytest.approx(2.0, rel=0.25) and low <= value <= high  # wall-clock pacing: loose under load

    rows = list(csv.DictReader(io.StringIO(specmon("results", "--dir", str(tmp_path), "--format", "csv").stdout)))
    assert [r["preset"] for r in rows] == ["baseline", "eagle3-5"]
    assert float(rows[1]["speedup"]) == pytest.approx(2.0, rel=0.25)
    assert float(rows[1]["accept_length"]) == pytest.approx(40 / 16)
    assert rows[1]["accept_length_bound"] == "4" and rows[0]["speedup"] == ""

    data = json.loads(specmon("results", "--dir", str(tmp_path), "--format", "json").stdout)
    assert data[1]["comparison"]["baseline_run_id"] == base.run_id
    assert data[1]["comparison"]["diverged"] == []

    # A run id prefix picks runs: the shortest one that is not also the baseline's (both began in one second).
    prefix = next(spec.run_id[:n] for n in range(17, len(spec.run_id) + 1) if not base.run_id.startswith(spec.run_id[:n]))
    md = specmon("results", prefix, "--dir", str(tmp_path), "--format", "markdown").stdout.splitlines()
    assert md[0].startswith("| run | started | preset | url |") and md[1].startswith("|---|")
    assert "eagle3-5" in md[2] and not md[3].startswith("|"), "one run: one row, then which baseline (none here)"
    assert md[4] == f"no baseline run for {spec.run_id}", md

    missing = specmon("results", "no-such-run", "--dir", str(tmp_path))
    assert missing.returncode == 1 and "no run 'no-such-run'" in missing.stderr


def test_results_reads_a_run_whose_app_died(tmp_path):
    base, _ = _record_runs(tmp_path)
    path = ResultStore(tmp_path).path_for(base.run_id)
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-2]) + '\n{"kind": "request", "torn')  # no summary, a torn last line
    back = ResultStore(tmp_path).load(base.run_id)
    assert back.status == "incomplete"
    assert back.summary.requests_ok == 4
    out = specmon("results", "--dir", str(tmp_path)).stdout
    assert "incomplete" in out


def test_divergent_outputs_are_reported_against_the_baseline(tmp_path):
    """A speculative run's text that parts from the baseline's is information (other speculative settings change
    greedy numerics), not a flag; tests/bench/test_bench_divergence.py has the alarms."""
    base, spec = _record_runs(tmp_path)
    assert compare_all([base, spec])[spec.run_id].diverged == []
    spec.measured[2].output_text = " ".join(spec.measured[2].output_text.split()[:10]) + " totally different words here now"
    comparison = compare(spec, base)
    assert comparison.diverged == ["p2"] and comparison.flags == []
    assert comparison.agreement["identical"] == 4 and comparison.agreement["compared"] == 5
    spec.measured[2].output_text = base.measured[2].output_text.rsplit(" ", 2)[0] + " x y"
    assert compare(spec, base).diverged == []  # a difference in the last few words is tolerated


def test_results_baseline_can_be_chosen(tmp_path):
    _record_runs(tmp_path)
    rows = list(csv.DictReader(io.StringIO(
        specmon("results", "--dir", str(tmp_path), "--format", "csv", "--baseline", "eagle3-5").stdout
    )))
    assert float(rows[0]["speedup"]) == pytest.approx(0.5, rel=0.25)
    assert rows[1]["speedup"] == ""
    bad = specmon("results", "--dir", str(tmp_path), "--baseline", "nope")
    assert bad.returncode == 1 and "no run of preset 'nope'" in bad.stderr


def test_natural_eos_is_sent_when_asked(state_env):
    with LoopbackServer(LoopbackConfig(tokens_per_s=3000)) as server:
        proc = specmon("bench", "--url", server.url, "--requests", "1", "--warmup", "0", "--max-new-tokens", "8",
                       "--natural-eos", "--json", env=state_env)
        assert proc.returncode == 0, proc.stderr
        assert server.requests_seen[0]["sampling_params"]["ignore_eos"] is False
    assert json.loads(proc.stdout)["settings"]["ignore_eos"] is False


def test_runs_on_different_prompt_sets_are_not_paired(tmp_path):
    base, spec = _record_runs(tmp_path)
    spec.settings = msgspec.structs.replace(spec.settings, prompt_set_hash="0000000000000000")
    comparison = compare(spec, base)
    assert comparison.speedup is None and comparison.prompts_compared == 0
