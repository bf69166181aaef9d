"""`specmon check` against the replay server (real HTTP) and as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

import pytest

from specmon.cli import main
from specmon.ports import free_port
from tests.support.serving_replay import ReplayServer


def _check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["check", *args])
    return code, capsys.readouterr().out


def test_real_tiny_eagle3_answer_warns_about_acceptance_near_one(capsys: pytest.CaptureFixture[str]) -> None:
    # The recorded 0.5.16 server ran a random tiny draft: 48 tokens in 47 verify steps.
    with ReplayServer() as server:
        code, out = _check(capsys, "--url", server.url)
        body = next(json.loads(r["body"]) for r in server.behaviour.requests if r["path"] == "/generate")
    assert code == 1
    assert "[WARN] acceptance" in out and "1.02 tokens per verify step" in out
    assert "EAGLE3, draft /tmp/tiny/eagle3, steps 3, topk 1, draft tokens 4" in out
    assert "SGLang 0.5.16" in out
    assert "Δgeneration_tokens / Δspec_verify_calls = 1.02" in out
    assert body["sampling_params"] == {"max_new_tokens": 64, "temperature": 0.0, "ignore_eos": True}


def test_good_acceptance_passes_with_json(capsys: pytest.CaptureFixture[str]) -> None:
    with ReplayServer(meta_overrides={"spec_verify_ct": 16}) as server:
        code, out = _check(capsys, "--url", server.url, "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] is True and report["exit_code"] == 0
    assert report["generation"]["accept_length"] == 3.0  # 48 tokens / 16 verify steps
    assert report["generation"]["completion_tokens"] == 48
    assert report["spec"]["algorithm"] == "EAGLE3" and report["spec"]["num_draft_tokens"] == 4
    assert report["health"]["state"] == "ready"
    assert report["metrics_accept_length"] == 3.0  # the replay server counts like a live one
    assert {c["level"] for c in report["checks"]} <= {"ok", "info"}


def test_plain_server_has_no_acceptance_check(capsys: pytest.CaptureFixture[str]) -> None:
    plain = {"server_info": "h200-0.5.16-server-info-plain.json", "generate": "h200-0.5.16-generate-plain.txt"}
    with ReplayServer(**plain) as server:
        code, out = _check(capsys, "--url", server.url)
    assert code == 0
    assert "speculation  off" in out and "acceptance" not in out and "all good" in out


def test_topk1_server_is_flagged(capsys: pytest.CaptureFixture[str]) -> None:
    with ReplayServer(server_info="h200-0.5.16-topk1-server-info.json", meta_overrides={"spec_verify_ct": 24}) as s:
        code, out = _check(capsys, "--url", s.url)
    assert code == 0
    assert "[info] topk 1" in out and "num_draft_tokens = num_steps + 1 = 2" in out


def test_launch_command_differences_are_listed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fixtures = Path(__file__).parents[1] / "fixtures" / "api"
    info = json.loads((fixtures / "h200-0.5.16-topk1-server-info.json").read_text())
    info["launch_command"] = (
        "python -m sglang.launch_server --model-path /tmp/tiny/target --speculative-algorithm EAGLE3 "
        "--speculative-num-steps 1 --speculative-eagle-topk 1 --speculative-num-draft-tokens 16"
    )
    (tmp_path / "info.json").write_text(json.dumps(info))
    with ReplayServer(server_info=str(tmp_path / "info.json"), meta_overrides={"spec_verify_ct": 24}) as server:
        code, out = _check(capsys, "--url", server.url)
    assert code == 0
    assert "speculative_num_draft_tokens: 16 asked, 2 effective" in out


def test_preset_asked_values_are_compared_with_what_runs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # The real 0.5.16 server launched with steps 1, topk 1, 16 draft tokens runs 2 draft tokens.
    presets = tmp_path / "presets"
    presets.mkdir()
    (presets / "topk1-16.toml").write_text(
        'description = "asks 16 draft tokens with one step"\n'
        "[server.args]\n"
        'model-path = "/tmp/tiny/target"\n'
        'speculative-algorithm = "EAGLE3"\n'
        'speculative-draft-model-path = "/tmp/tiny/eagle3"\n'
        "speculative-num-steps = 1\n"
        "speculative-eagle-topk = 1\n"
        "speculative-num-draft-tokens = 16\n"
    )
    with ReplayServer(server_info="h200-0.5.16-topk1-server-info.json", meta_overrides={"spec_verify_ct": 24}) as s:
        code, out = _check(capsys, "--url", s.url, "--preset", "topk1-16", "--presets", str(presets))
        unknown, _ = _check(capsys, "--url", s.url, "--preset", "no-such-preset", "--presets", str(presets))
    assert code == 1
    assert "[WARN] preset" in out and "speculative_num_draft_tokens: 16 asked, 2 effective" in out
    assert "speculative_num_steps" not in out  # steps and topk run as asked
    assert unknown == 2  # an unknown preset is bad usage, as in every command (require_preset)


def test_server_still_warming_up_fails(capsys: pytest.CaptureFixture[str]) -> None:
    with ReplayServer(health_codes=deque([503] * 5)) as server:
        code, out = _check(capsys, "--url", server.url)
    assert code == 1 and "[FAIL] health" in out and "503" in out


def test_api_key_from_environment_and_file_is_used_and_never_printed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret = "sk-check-5d1e"
    key_file = tmp_path / "key"
    key_file.write_text(secret + "\n")
    with ReplayServer(api_key=secret, meta_overrides={"spec_verify_ct": 16}) as server:
        monkeypatch.delenv("SPECMON_API_KEY", raising=False)
        denied, denied_out = _check(capsys, "--url", server.url)
        monkeypatch.setenv("SPECMON_API_KEY", secret)
        from_env, env_out = _check(capsys, "--url", server.url, "--json")
        monkeypatch.delenv("SPECMON_API_KEY")
        from_file, file_out = _check(capsys, "--url", server.url, "--api-key-file", str(key_file))
    assert denied == 1 and "[FAIL] api key" in denied_out
    assert from_env == 0 and from_file == 0
    assert all(secret not in out for out in (denied_out, env_out, file_out))


def test_missing_key_file_fails(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["check", "--url", "http://127.0.0.1:9", "--api-key-file", str(tmp_path / "nope")])
    assert code == 1 and "cannot read the API key file" in capsys.readouterr().err
    code, out = _check(capsys, "--url", "http://127.0.0.1:9", "--api-key-file", str(tmp_path / "nope"), "--json")
    assert code == 1 and json.loads(out)["ok"] is False


def test_unreachable_server_exits_2_as_a_process() -> None:
    env = {**os.environ, "SPECMON_API_KEY": "sk-never-shown"}
    proc = subprocess.run(
        [sys.executable, "-m", "specmon", "check", "--url", f"http://localhost:{free_port()}", "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    assert proc.returncode == 2, proc.stderr
    report = json.loads(proc.stdout)
    assert report["health"]["state"] == "unreachable" and report["exit_code"] == 2
    assert "sk-never-shown" not in proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("version", "names_the_key_mismatch"),
    [("0.5.3", True), ("0.4.10.post2", True), ("0.5.9", True), ("0.4.6.post5", False), ("0.5.16", False),
     ("0.5.16-emulated", False)],
)
def test_low_acceptance_hint_names_the_key_mismatch_only_where_sglang_skips_keys(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, version: str, names_the_key_mismatch: bool
) -> None:
    fixtures = Path(__file__).parents[1] / "fixtures" / "api"
    info = json.loads((fixtures / "h200-0.5.16-server-info-eagle3.json").read_text())
    info["version"] = version
    (tmp_path / "info.json").write_text(json.dumps(info))
    with ReplayServer(server_info=str(tmp_path / "info.json")) as server:
        code, out = _check(capsys, "--url", server.url)
    assert code == 1 and "[WARN] acceptance" in out
    assert ("layers.0.*" in out and "midlayer.*" in out) is names_the_key_mismatch


def test_check_against_the_emulator_flags_a_draft_that_accepts_nothing(tmp_path: Path) -> None:
    port, gpu_port = free_port(), free_port()
    emulator = subprocess.Popen(
        [sys.executable, "-m", "specmon.emulator", "--model-path", "/tmp/tiny/target", "--port", str(port),
         "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/tmp/tiny/eagle3",
         "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
         "--enable-metrics", "--emulator-speed", "100", "--emulator-accept-prob", "0",
         "--emulator-gpu-port", str(gpu_port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            check = subprocess.run(
                [sys.executable, "-m", "specmon", "check", "--url", f"http://127.0.0.1:{port}", "--json"],
                capture_output=True, text=True, timeout=60,
            )
            if check.returncode != 2 and json.loads(check.stdout)["health"]["state"] == "ready":
                break
            assert time.monotonic() < deadline, check.stdout
            time.sleep(0.2)
    finally:
        emulator.terminate()
        emulator.wait(10)
    report = json.loads(check.stdout)
    assert check.returncode == 1
    assert report["spec"]["algorithm"] == "EAGLE3" and report["spec"]["num_draft_tokens"] == 4
    assert report["generation"]["completion_tokens"] == 64
    assert report["generation"]["accept_length"] < 1.1
    assert [c["level"] for c in report["checks"] if c["name"] == "acceptance"] == ["warn"]
    assert report["metrics_accept_length"] == pytest.approx(report["generation"]["accept_length"])


def test_check_preset_flags_a_preset_binding_a_non_loopback_host(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    presets = tmp_path / "presets"
    presets.mkdir()
    (presets / "open.toml").write_text('extends = "eagle3-10"\n[server.args]\nhost = "0.0.0.0"\n')
    with ReplayServer() as s:
        main(["check", "--url", s.url, "--preset", "open", "--presets", str(presets)])
    err = capsys.readouterr().err
    assert "specmon check: warning: preset open: the server binds 0.0.0.0 (--host)" in err
