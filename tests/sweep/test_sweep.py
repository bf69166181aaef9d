"""`specmon sweep` against the emulator: a full sweep of four presets, a resume after kill -9, a preset that fails
to start, and the prediction from the longest chain against the measured shorter ones."""

from __future__ import annotations

import json
import signal
import tomllib
from pathlib import Path

import pytest

from specmon.ports import free_port_pair
from tests.support.oncall import Oncall, wait_for, write_preset

BENCH = "[bench]\nrequests = 6\nmax-new-tokens = 96\nwarmup = 0\n"  # 5+ requests: a CI


def _measurable(preset: str) -> str:
    """A decode slow enough that what a sweep compares is the emulator's speed model, not how much CPU a busy
    machine leaves it (at 20x a baseline step is ~1 ms, and a loaded host measured speculation slower)."""
    return preset.replace("emulator-decode-speed = 20", "emulator-decode-speed = 4")


@pytest.fixture
def oncall(tmp_path: Path):
    env = Oncall(tmp_path)
    presets = env.presets
    write_preset(presets, "fast-base", "demo-baseline")
    for tokens in (16, 10, 5):
        write_preset(presets, f"fast-{tokens}", f"demo-eagle3-{tokens}")
    write_preset(presets, "fast-broken", "demo-eagle3-10", 'emulator-fail = "oom-during-capture"')
    port = free_port_pair()  # never SGLang's default 30000: another server may hold it
    for path in presets.glob("fast-*.toml"):
        path.write_text(_measurable(path.read_text()).split("[bench]")[0] + f"port = {port}\n" + BENCH)
    yield env
    env.cleanup()


def results(oncall: Oncall) -> list[dict]:
    done = oncall.run("results", "--format", "json", presets=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def sweep(oncall: Oncall, *args: str, expect: int | None = 0, timeout: float = 240.0) -> dict:
    return oncall.json("sweep", "--presets", str(oncall.presets), *args, expect=expect, timeout=timeout)


def test_a_full_sweep_of_four_presets_reports_predicts_and_recommends(oncall: Oncall) -> None:
    report = sweep(oncall, "fast-base", "fast-16", "fast-10", "fast-5")
    rows = report["presets"]
    assert [r["preset"] for r in rows] == ["fast-base", "fast-16", "fast-10", "fast-5", "fast-base"]
    assert all(r["state"] == "measured" for r in rows)
    assert all(r["decode_tok_s"] and r["ci95"] and r["startup_s"] and r["measure_s"] for r in rows)
    speculative = {r["preset"]: r for r in rows if not r["baseline"]}
    for row in speculative.values():
        assert row["speedup"] > 1.0 and row["speedup_ci95"][0] <= row["speedup"] <= row["speedup_ci95"][1]
        assert row["accept_length"] > 2.0
        profile = row["accept_profile"]  # share of steps accepting at least 1, 2, ... drafts: falls with depth
        assert profile and 0 <= profile[-1] <= profile[0] <= 1 and profile == sorted(profile, reverse=True)
    for name in ("fast-10", "fast-5"):  # predicted from the 16-token run, measured by its own
        row = speculative[name]
        assert row["predicted_accept_length"] == pytest.approx(row["accept_length"], rel=0.05), name
    assert report["baseline_drift_pct"] is not None  # its size depends on the machine's load
    assert report["recommended"] in speculative
    assert report["left_serving"] == report["recommended"]
    served = [s for s in oncall.json("ps")["servers"] if s["alive"] and s["launched_by_specmon"]]
    assert [s["preset"] for s in served] == [report["recommended"]]
    runs = results(oncall)
    assert len(runs) == 5 and all(r["status"] == "finished" for r in runs)


def test_a_preset_that_fails_to_start_is_recorded_and_the_sweep_goes_on(oncall: Oncall) -> None:
    report = sweep(oncall, "fast-base", "fast-broken", "fast-5", "--leave", "none", expect=1)
    states = {r["preset"]: r for r in report["presets"]}
    broken = states["fast-broken"]
    assert broken["state"] == "failed" and broken["decode_tok_s"] is None
    assert "out of memory" in broken["error"].lower() or "oom" in broken["error"].lower(), broken["error"]
    assert states["fast-5"]["state"] == "measured"
    assert report["left_serving"] is None
    assert not [s for s in oncall.json("ps")["servers"] if s["alive"] and s["launched_by_specmon"]]


def test_a_sweep_killed_mid_run_resumes_without_measuring_anything_twice(oncall: Oncall) -> None:
    proc = oncall.popen("sweep", "--presets", str(oncall.presets), "fast-base", "fast-10", "fast-5", "--json")
    sweeps = oncall.state / "sweeps"

    def second_step_measuring() -> dict | None:
        for path in sweeps.glob("*.json") if sweeps.is_dir() else []:
            data = json.loads(path.read_text())
            steps = data["steps"]
            if steps[0]["state"] == "measured" and steps[1]["bench_run_id"] and steps[1]["state"] == "pending":
                return data
        return None

    before = wait_for(second_step_measuring, timeout=120, what="the sweep measuring its second preset")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    report = sweep(oncall, "--resume", "--yes")  # it replaces the server the killed sweep left
    assert report["run_id"] == before["run_id"]
    rows = report["presets"]
    assert [r["state"] for r in rows] == ["measured"] * 4
    assert rows[0]["run_id"] == before["steps"][0]["bench_run_id"]  # kept, not measured again
    runs = results(oncall)
    by_preset: dict[str, int] = {}
    for run in runs:
        if run["status"] == "finished":
            by_preset[run["preset"]] = by_preset.get(run["preset"], 0) + 1
    assert by_preset == {"fast-base": 2, "fast-10": 1, "fast-5": 1}
    assert oncall.run("sweep", "--resume", presets=False).returncode == 2  # nothing left to resume


def test_predict_only_measures_the_longest_chain_alone(oncall: Oncall) -> None:
    data = sweep(oncall, "fast-base", "fast-16", "fast-5", "--predict-only", "--leave", "none")
    assert data["from_preset"] == "fast-16" and data["from_draft_tokens"] == 16
    assert data["requests_used"] == 6 and data["requests_skipped"] == 0
    predicted = {p["draft_tokens"]: p for p in data["predictions"]}
    assert sorted(predicted) == list(range(2, 17))
    assert predicted[2]["accept_length"] < predicted[5]["accept_length"] <= predicted[16]["accept_length"]
    assert all(p["decode_tok_s"] is None for p in predicted.values())  # no cost model from one preset
    runs = results(oncall)
    assert [r["preset"] for r in runs] == ["fast-16"]


def test_skip_predicted_worse_skips_a_chain_the_measured_ones_predict_clearly_slower(oncall: Oncall) -> None:
    write_preset(
        oncall.presets, "fast-2", "demo-eagle3-5",
        "speculative-num-steps = 1\nspeculative-num-draft-tokens = 2",
    )  # fmt: skip
    path = oncall.presets / "fast-2.toml"
    port = tomllib.loads((oncall.presets / "fast-5.toml").read_text())["server"]["args"]["port"]
    path.write_text(_measurable(path.read_text()).split("[bench]")[0] + f"port = {port}\n" + BENCH)
    report = sweep(
        oncall, "fast-base", "fast-16", "fast-5", "fast-2", "--skip-predicted-worse", "--leave", "none", expect=1
    )
    rows = {r["preset"]: r for r in report["presets"]}
    assert rows["fast-2"]["state"] == "skipped" and "predicted" in rows["fast-2"]["error"]
    assert rows["fast-2"]["predicted_decode_tok_s"] < rows["fast-5"]["decode_tok_s"]
    assert [rows[p]["state"] for p in ("fast-16", "fast-5")] == ["measured", "measured"]


def test_a_tree_with_the_longest_chains_draft_tokens_predicts_no_chain(oncall: Oncall) -> None:
    """Measured after the 16-chain, a 16-token tree neither replaces it as the source of τ pred nor gets a chain's
    prediction: the 10-chain is predicted from the 16-chain and lands on its measured figure. `specmon results`
    then computes each speedup against the same baseline run as the sweep."""
    write_preset(oncall.presets, "fast-tree16", "demo-eagle3-16",
                 "speculative-num-steps = 5\nspeculative-eagle-topk = 8\nspeculative-num-draft-tokens = 16")
    path = oncall.presets / "fast-tree16.toml"
    port = tomllib.loads((oncall.presets / "fast-16.toml").read_text())["server"]["args"]["port"]
    path.write_text(_measurable(path.read_text()).split("[bench]")[0] + f"port = {port}\n" + BENCH)
    report = sweep(oncall, "fast-base", "fast-16", "fast-tree16", "fast-10", "--leave", "none")
    rows = {r["preset"]: r for r in report["presets"] if not r["baseline"]}
    assert [r["preset"] for r in report["presets"]][1:3] == ["fast-16", "fast-tree16"], "the tree is measured after"
    tree, chain16, chain10 = rows["fast-tree16"], rows["fast-16"], rows["fast-10"]
    assert tree["state"] == "measured" and tree["eagle_topk"] == 8 and "tree" in tree["drafting"], tree
    assert tree["predicted_accept_length"] is None and tree["predicted_decode_tok_s"] is None
    assert chain16["predicted_accept_length"] == pytest.approx(chain16["accept_length"], rel=0.01)
    assert chain10["predicted_accept_length"] == pytest.approx(chain10["accept_length"], rel=0.05)
    assert report["predicted_from"] == [f"run {chain16['run_id']} (EAGLE3 chain of 16)"], report["predicted_from"]
    # `specmon results` gives each run the sweep's baseline and speedup (one rule): the first baseline run
    stored = {r["run_id"]: r for r in results(oncall)}
    first_baseline = report["presets"][0]["run_id"]
    for row in rows.values():
        comparison = stored[row["run_id"]]["comparison"]
        assert comparison["baseline_run_id"] == first_baseline, (row["preset"], comparison)
        assert comparison["speedup"]["geomean"] == pytest.approx(row["speedup"]), row["preset"]


def test_a_sweep_with_1150_token_prompts_keeps_every_request_and_recommends(oncall: Oncall) -> None:
    prompts = oncall.root / "long.jsonl"
    words = "the quick brown fox jumps over the lazy dog near the river bank " * 80
    prompts.write_text("".join(json.dumps({"id": f"long-{i}", "prompt": f"{i} {words}"[:4600]}) + "\n" for i in range(6)))
    for name in ("fast-base", "fast-5"):
        path = oncall.presets / f"{name}.toml"
        path.write_text(path.read_text().replace("[bench]\n", f'[bench]\nprompts = "{prompts}"\n'))
    report = sweep(oncall, "fast-base", "fast-5", "--leave", "none")  # exit 0: measured and recommended
    assert [r["state"] for r in report["presets"]] == ["measured"] * 3
    assert report["recommended"] in {"fast-base", "fast-5"} and report["no_recommendation"] is None
    assert all(r["requests_skipped"] == 0 for r in report["presets"]) and report["notes"] == []
    for run in results(oncall):
        measured = [r for r in run["requests"] if not r["warmup"]]
        assert len(measured) == 6 and all(r["prompt_tokens"] == 1150 for r in measured)
        assert run["skipped_records"] == []
