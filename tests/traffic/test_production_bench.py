"""A benchmark from production and against it, on the emulator's known truth: its production traffic is mostly
code, which it accepts more of (speed_model.class_accept_prob), so the built-in chat prompts (no code) understate
production's τ beyond the CIs and are flagged; prompts sampled from the records are not. A stored result holds
each prompt's hash, not its text, unless --keep-prompts; records without the text say so and which flag keeps it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from specmon.bench.results import ResultStore
from tests.emulator.test_emulator import EAGLE3, launch

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
FAST = ["--emulator-speed", "50", "--emulator-decode-speed", "50"]
SECRET = "ZEBRA-7731"
"""A word in every production prompt: it must not reach a stored result unless --keep-prompts."""


def code_prompt(i: int) -> str:
    return f"Fix this ({SECRET} {i}):\n```python\ndef f{i}(x):\n    return x + {i}\n```\n"


def prose_prompt(i: int) -> str:
    return f"Describe a quiet harbor town ({SECRET} {i})."


def production(url: str, requests: int = 40) -> None:
    """Production's traffic: 4 in 5 prompts are code, output lengths 60 to 150 tokens."""
    for i in range(requests):
        text = prose_prompt(i) if i % 5 == 0 else code_prompt(i)
        body = {"text": text, "sampling_params": {"max_new_tokens": 60 + (i * 37) % 91, "ignore_eos": True}}
        assert httpx.post(url + "/generate", json=body, timeout=60).status_code == 200


def bench(url: str, state: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SPECMON_STATE_DIR": state}
    return subprocess.run([sys.executable, "-m", "specmon", "bench", "--url", url, "--requests", "20", "--warmup", "1",
                           "--json", *args], capture_output=True, text=True, timeout=240, env=env)


@pytest.fixture
def emulator_with_production(tmp_path):
    export = tmp_path / "export"
    emu = launch(tmp_path, *EAGLE3, *FAST, "--export-metrics-to-file", "--export-metrics-to-file-dir", str(export))
    try:
        emu.wait_ready()
        production(emu.url)
        yield emu, str(export)
    finally:
        emu.stop()


def test_a_generic_benchmark_is_flagged_and_one_sampled_from_production_is_not(emulator_with_production, tmp_path):
    emu, export = emulator_with_production
    state = str(tmp_path / "state")
    generic = bench(emu.url, state, "--max-new-tokens", "100", "--against-traffic", export)
    assert generic.returncode in (0, 1), generic.stderr
    result = json.loads(generic.stdout)
    check = result["summary"]["production"]
    assert check["beyond_ci"] and "unrepresentative" in result["summary"]["flags"], check
    assert check["benchmark_tau"] < check["production_tau"], check  # chat prompts: no code, the emulator's lower τ
    assert check["benchmark_shares"].get("code", 0) == 0 and check["production_shares"]["code"] == pytest.approx(32 / 41, abs=1e-4)
    assert check["requests"] == 40 + 1  # production and the emulator's warmup; the benchmark's own left out
    assert "understates acceptance" in check["text"] and "its prompts are 0% code, production's 78%" in check["text"]

    sampled = bench(emu.url, state, "--prompts-from-traffic", export)
    assert sampled.returncode in (0, 1), sampled.stderr
    result = json.loads(sampled.stdout)
    check = result["summary"]["production"]
    assert not check["beyond_ci"] and "unrepresentative" not in result["summary"]["flags"], check
    assert check["benchmark_shares"]["code"] == pytest.approx(0.8, abs=0.1)
    categories = {c["category"]: c for c in result["summary"]["by_category"]}
    assert set(categories) == {"code", "other"} and categories["code"]["token_weighted"] > categories["other"][
        "token_weighted"]
    measured = [r for r in result["requests"] if not r["warmup"]]
    assert all(r["completion_tokens"] == r["max_new_tokens"] for r in measured)  # each its record's length
    assert len({r["max_new_tokens"] for r in measured}) > 5  # production's output lengths, not one
    assert result["settings"]["prompts"] == "traffic:" + export

    stored = ResultStore(os.path.join(state, "results")).path_for(result["run_id"]).read_text()
    assert SECRET not in stored  # neither the prompts nor their outputs
    assert all(len(r["prompt_hash"]) == 16 and r["prompt_text"] is None for r in measured)

    kept = bench(emu.url, state, "--prompts-from-traffic", export, "--keep-prompts")
    assert kept.returncode in (0, 1), kept.stderr
    run_id = json.loads(kept.stdout)["run_id"]
    assert SECRET in ResultStore(os.path.join(state, "results")).path_for(run_id).read_text()


@pytest.mark.parametrize("level", ["0", "1"])
def test_records_without_the_text_say_so_and_which_flag_keeps_it(tmp_path, level):
    export = tmp_path / "export"
    emu = launch(tmp_path, *EAGLE3, *FAST, "--export-metrics-to-file", "--export-metrics-to-file-dir", str(export),
                 "--log-requests", "--log-requests-level", level)
    try:
        emu.wait_ready()
        production(emu.url, requests=3)
        run = bench(emu.url, str(tmp_path / "state"), "--prompts-from-traffic", str(export))
    finally:
        emu.stop()
    assert run.returncode == 2 and not run.stdout
    (line,) = run.stderr.strip().splitlines()
    assert "none of 4 records holds the prompt's text" in line and "--log-requests-level 3" in line
    assert SECRET not in (export / os.listdir(export)[0]).read_text()  # the emulator keeps what SGLang keeps


def test_a_grid_sweep_against_production_flags_the_configuration_it_recommends(emulator_with_production, tmp_path):
    from specmon.ports import free_port_pair
    from tests.support.oncall import Oncall, write_preset

    _emu, export = emulator_with_production
    (tmp_path / "oncall").mkdir()
    oc = Oncall(tmp_path / "oncall")
    write_preset(oc.presets, "grid-base", "demo-eagle3-5", f"port = {free_port_pair()}")
    try:
        done = oc.run("sweep", "--presets", str(oc.presets), "grid-base", "--steps", "3", "--topk", "1",
                      "--concurrency", "1", "--requests", "12", "--json", "--leave", "none", "--against-traffic",
                      export, timeout=280, presets=False)
    finally:
        oc.cleanup()
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    [band] = report["recommendation"]
    assert band["steps"] == 3, band  # speculation pays at concurrency 1 on the emulator
    # the sweep's chat prompts hold no code, production's are 4 in 5 code: its τ understates production's
    assert band["production"] and "understates acceptance" in band["production"], band
    run = ResultStore(oc.state / "results").load(next(c["run_id"] for c in report["cells"] if c["steps"] == 3))
    assert run.summary.production is not None and run.summary.production.beyond_ci


def test_your_categories_name_both_sides_and_the_records_are_tied_to_the_server(emulator_with_production, tmp_path):
    """With --categories, the run's prompts (their own `category`, here the rules' names) and production's records
    (the rules) are counted in the same categories; each category's τ is the emulator's truth for its class; the
    records hold the run's own requests, so they are its server's."""
    from specmon.emulator.speed_model import SpecShape, SpeedModel, class_accept_prob
    from specmon.traffic.reader import ReadTally, read_records

    emu, export = emulator_with_production
    rules = tmp_path / "categories.toml"
    rules.write_text("default = \"prose\"\n[[category]]\nname = \"code\"\nmatch = '```'\n")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"q{i}", "category": "code" if i % 2 else "prose",
                                           "prompt": code_prompt(i) if i % 2 else prose_prompt(i)}) + "\n"
                               for i in range(10)))
    production_records = [r for r in read_records([export], ReadTally()) if not r.rid.startswith("specmon-bench-")]
    code_share = sum("```" in (r.params or {}).get("text", "") for r in production_records) / len(production_records)

    traffic = subprocess.run([sys.executable, "-m", "specmon", "traffic", export, "--categories", str(rules),
                              "--json"], capture_output=True, text=True, timeout=60)
    rows = {c["value"]: c for c in json.loads(traffic.stdout)["classes"] if c["by"] == "prompt category"}
    shape = SpecShape(3, 1, 4)
    assert rows["code"]["accept_length"] == pytest.approx(
        SpeedModel(shape, class_accept_prob(0.75, "code")).expected_accept_length(), abs=0.15)
    assert rows["prose"]["accept_length"] == pytest.approx(SpeedModel(shape, 0.75).expected_accept_length(), abs=0.25)

    run = bench(emu.url, str(tmp_path / "state"), "--max-new-tokens", "100", "--prompts", str(prompts),
                "--against-traffic", export, "--categories", str(rules))
    assert run.returncode in (0, 1), run.stderr
    check = json.loads(run.stdout)["summary"]["production"]
    assert check["categories"] == f"your rules ({rules})"
    assert check["benchmark_shares"] == {"code": 0.5, "prose": 0.5}
    assert check["production_shares"]["code"] == pytest.approx(code_share, abs=1e-4)
    assert f"its prompts are 50% code, production's {code_share:.0%}" in check["text"]
    assert check["configuration"] == "same" and "of this run's requests" in check["configuration_note"]


def test_a_log_of_production_launched_with_another_configuration_says_the_records_differ(emulator_with_production,
                                                                                         tmp_path):
    """Production on a server launched as a 1-step chain, its records in its own log (text `--log-requests`):
    benchmarking the 3-step chain against that log says production runs another configuration, from the log's
    `server_args` line, though no production step accepted more drafts than the benchmarked server drafts."""
    emu, _ = emulator_with_production
    chain1 = [*EAGLE3[:4], "--speculative-num-steps", "1", "--speculative-eagle-topk", "1",
              "--speculative-num-draft-tokens", "2"]
    other = launch(tmp_path, *chain1, *FAST, "--log-requests", name="production.log")
    try:
        other.wait_ready()
        production(other.url, requests=10)
    finally:
        other.stop()
    run = bench(emu.url, str(tmp_path / "state"), "--max-new-tokens", "60", "--against-traffic",
                str(other.log_path))
    assert run.returncode in (0, 1), run.stderr
    check = json.loads(run.stdout)["summary"]["production"]
    assert check["configuration"] == "differs" and check["requests"] >= 10, check
    assert check["configuration_note"] == ("1 of the log's 1 launches ran EAGLE3 steps 1 topk 1 draft 2, the server "
                                           "benchmarked EAGLE3 steps 3 topk 1 draft 4")
    assert "production runs another configuration" in check["text"]


def token_prompt(i: int) -> list[int]:
    """A client that tokenises itself: each prompt only as token ids, one id above 2**16 (not a byte, not a char)."""
    return [7731, 100_000 + i, *range(i, i + 20 + 3 * i)]


HOSTILE_IDS = {"negative": [1, -2, 3], "huge": [1, 2**31], "not ints": [1, "2", 3.0], "bools": [True, 1],
               "a batch": [[1, 2], [3, 4]], "empty": []}


def test_records_holding_token_ids_make_a_benchmark_that_sends_them(tmp_path):
    """Production's prompts sent as input_ids reach the records as input_ids (as SGLang's exporter keeps them);
    `bench --prompts-from-traffic` sends them back as input_ids, keeps their hashes (their ids with --keep-prompts),
    and skips records whose ids are not token ids with a count."""
    export = tmp_path / "export"
    emu = launch(tmp_path, *EAGLE3, *FAST, "--export-metrics-to-file", "--export-metrics-to-file-dir", str(export))
    state = str(tmp_path / "state")
    try:
        emu.wait_ready()
        sent = {}
        for i in range(12):
            body = {"input_ids": token_prompt(i), "sampling_params": {"max_new_tokens": 20 + i, "ignore_eos": True}}
            answer = httpx.post(emu.url + "/generate", json=body, timeout=60)
            assert answer.status_code == 200, answer.text
            sent[tuple(token_prompt(i))] = 20 + i
        [records] = list(export.iterdir())
        real = json.loads(records.read_text().splitlines()[-1])
        with records.open("a") as out:  # what a hostile or broken writer left beside them
            for rid, ids in HOSTILE_IDS.items():
                out.write(json.dumps({**real, "request_parameters": json.dumps({"rid": rid, "input_ids": ids}),
                                      "id": rid}) + "\n")
        run = bench(emu.url, state, "--prompts-from-traffic", str(export))
        kept = bench(emu.url, state, "--prompts-from-traffic", str(export), "--keep-prompts")
    finally:
        emu.stop()
    assert run.returncode in (0, 1), run.stderr
    described = run.stderr  # 12 sent as ids and the emulator's warmup, which is text
    assert "from 13 of 19 production records" in described, described
    assert "4 skipped: input_ids holds something not a token id" in described, described
    assert "1 skipped: input_ids is not a non-empty list" in described and "1 skipped: a batch" in described
    result = json.loads(run.stdout)
    measured = [r for r in result["requests"] if not r["warmup"]]
    assert measured and all(r["ok"] for r in measured)
    assert all(r["completion_tokens"] == r["max_new_tokens"] for r in measured)
    stored = ResultStore(os.path.join(state, "results")).path_for(result["run_id"]).read_text()
    assert all(len(r["prompt_hash"]) == 16 and r["prompt_ids"] is None and r["prompt_text"] is None for r in measured)
    assert "7731,1000" not in stored.replace(" ", "")  # no prompt's ids

    own = [json.loads(line) for line in records.read_text().splitlines()]
    own = [json.loads(r["request_parameters"]) for r in own if r["id"].startswith("specmon-bench-")]
    arrived = {tuple(p["input_ids"]): p["sampling_params"]["max_new_tokens"] for p in own if "input_ids" in p}
    assert len({p["text"] for p in own if "input_ids" not in p}) <= 1  # the emulator's warmup, the one text record
    assert set(arrived) <= set(sent) and len(arrived) > 3  # the server got production's ids, as ids
    assert all(sent[ids] == limit for ids, limit in arrived.items())  # each with its record's output length

    assert kept.returncode in (0, 1), kept.stderr
    kept_run = json.loads(kept.stdout)
    kept_requests = [r for r in kept_run["requests"] if not r["warmup"]]
    as_ids = [r for r in kept_requests if r["prompt_ids"] is not None]
    assert all(tuple(r["prompt_ids"]) in sent and r["prompt_text"] is None for r in as_ids)
    assert len(as_ids) >= len(kept_requests) - 2 and all(r["prompt_text"] for r in kept_requests if r not in as_ids)
    stored = ResultStore(os.path.join(state, "results")).path_for(kept_run["run_id"]).read_text()
    assert "[7731,1000" in stored.replace(" ", "")
