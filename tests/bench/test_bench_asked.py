"""`specmon bench` says when SGLang runs a speculative setting otherwise than asked (real 0.5.16: 16 draft tokens
asked with 1 step and topk 1, 2 run), from /server_info against the preset, or against the server's own launch
command (0.5.23+) when no preset is named."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.serving_replay import ReplayServer

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "fixtures" / "real-sglang-0.5.16"
TOPK1_INFO = REAL / "topk1-rewrite" / "server-info.json"


def bench(tmp_path: Path, url: str, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "specmon", "bench", "--url", url, "--requests", "2", "--warmup", "0",
         "--max-new-tokens", "16", "--json", *args],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"),
             "SPECMON_STATE_DIR": str(tmp_path / "state")},
    )
    assert "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout)


def rewrites(result: dict) -> list[str]:
    return [note for note in result["notes"] if note.startswith("SGLang runs ")]


def test_bench_says_the_real_topk1_server_runs_2_draft_tokens_not_the_16_its_preset_asked(tmp_path):
    with ReplayServer(server_info=str(TOPK1_INFO), metrics=str(REAL / "topk1-rewrite" / "metrics.txt")) as server:
        named = bench(tmp_path, server.url, "--preset", "h200-topk1-16", "--presets", str(REAL / "presets"))
        unnamed = bench(tmp_path, server.url)
    assert rewrites(named) == [
        "SGLang runs speculative_num_draft_tokens 2, not the 16 the preset asked (with topk 1 SGLang runs "
        "num_steps + 1 = 2 draft tokens): these figures are for what it runs"]
    assert rewrites(unnamed) == []  # 0.5.16 reports no launch command: nobody's ask is known


@pytest.mark.parametrize(("flag", "asked", "key", "runs"), [
    ("speculative-num-draft-tokens", 16, "speculative_num_draft_tokens", 2),
    ("speculative-num-steps", 4, "speculative_num_steps", 1),
    ("speculative-eagle-topk", 8, "speculative_eagle_topk", 1),
    ("speculative-algorithm", "EAGLE", "speculative_algorithm", "EAGLE3"),
])
def test_every_speculative_setting_run_otherwise_than_asked_is_said(tmp_path, flag, asked, key, runs):
    """Through a preset, and through the launch command a 0.5.23 server reports."""
    info = json.loads(TOPK1_INFO.read_text())
    presets = tmp_path / "presets"
    presets.mkdir()
    value = json.dumps(asked)
    (presets / "asks.toml").write_text(f'[server.args]\nmodel-path = "/tmp/tiny/target"\n{flag} = {value}\n')
    launch = tmp_path / "launch-info.json"
    launch.write_text(json.dumps(info | {"launch_command": f"python3 -m sglang.launch_server --model-path "
                                                           f"/tmp/tiny/target --{flag} {asked}"}))
    with ReplayServer(server_info=str(TOPK1_INFO)) as server:
        named = bench(tmp_path, server.url, "--preset", "asks", "--presets", str(presets))
    with ReplayServer(server_info=str(launch)) as server:
        unnamed = bench(tmp_path, server.url)
    assert [n.split(" (")[0] for n in rewrites(named)] == [f"SGLang runs {key} {runs}, not the {asked} the preset asked"]
    assert [n.split(" (")[0] for n in rewrites(unnamed)] == [
        f"SGLang runs {key} {runs}, not the {asked} its launch command asked"]


def test_a_preset_that_asks_what_runs_gives_no_such_note(tmp_path):
    presets = tmp_path / "presets"
    presets.mkdir()
    (presets / "same.toml").write_text('[server.args]\nmodel-path = "/tmp/tiny/target"\nspeculative-algorithm = '
                                       '"EAGLE3"\nspeculative-num-steps = 1\nspeculative-eagle-topk = 1\n'
                                       'speculative-num-draft-tokens = 2\n')
    with ReplayServer(server_info=str(TOPK1_INFO)) as server:
        assert rewrites(bench(tmp_path, server.url, "--preset", "same", "--presets", str(presets))) == []
