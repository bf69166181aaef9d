"""End to end: `specmon bench --json` as a process against the SGLang emulator as a process."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from specmon.ports import free_port

ROOT = Path(__file__).parents[2]
EAGLE3 = [
    "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/eagle3-8b",
    "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
]  # fmt: skip


@pytest.fixture
def emulator(tmp_path):
    port = free_port()
    with (tmp_path / "emulator.log").open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "specmon.emulator", "--model-path", "/models/llama-8b", "--port", str(port), *EAGLE3,
             "--enable-metrics", "--emulator-speed", "50", "--emulator-decode-speed", "20"],
            stdout=sink, stderr=subprocess.STDOUT, cwd=ROOT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "emulator.log").read_text(errors="replace")[-2000:]
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2, trust_env=False).status_code == 200:
                    break
            time.sleep(0.1)
        else:
            pytest.fail("the emulator did not become ready")
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.timeout(90)
def test_bench_json_against_the_emulator(emulator, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "specmon", "bench", "--url", emulator, "--preset", "demo-eagle3-5", "--requests", "4",
         "--max-new-tokens", "48", "--warmup", "1", "--json"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "SPECMON_API_KEY": ""},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["preset"] == "demo-eagle3-5"
    assert out["server"]["speculative"] == {
        "algorithm": "EAGLE3", "draft_model_path": "/models/eagle3-8b", "num_steps": 3, "eagle_topk": 1,
        "num_draft_tokens": 4,
    }  # fmt: skip
    summary = out["summary"]
    assert summary["requests_ok"] == 4 and summary["requests_failed"] == 0
    tau = summary["accept_length"]["token_weighted"]
    assert 1.0 < tau <= 4.0
    measured = [r for r in out["requests"] if not r["warmup"]]
    assert all(r["completion_tokens"] == 48 and r["spec_verify_ct"] for r in measured)
    assert tau == pytest.approx(sum(r["completion_tokens"] for r in measured) / sum(r["spec_verify_ct"] for r in measured))
    assert out["cross_checks"]["flushed"] is True
    assert out["cross_checks"]["metrics"]["accept_length"] == pytest.approx(tau, rel=0.05)
    assert summary["decode_tok_s"]["median"] > 0
    assert "accept-mismatch-metrics" not in summary["flags"]
