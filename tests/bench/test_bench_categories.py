"""Every benchmark's τ per prompt category, each with its bootstrap CI: in the summary, in `bench`'s text, in
`results` and its JSON; a run stored before (without categories, prompt hashes) reads back as it was."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec

from specmon.bench.cli import format_result
from specmon.bench.model import RequestResult, Summary
from specmon.bench.results import ResultStore, read_run_file
from specmon.bench.results_text import format_json, format_table
from specmon.bench.summary import NO_CATEGORY, summarize
from specmon.cli import main

FIXTURES = Path(__file__).parents[1] / "fixtures"
OLD_RUN = FIXTURES / "bench" / "20261129-111220-c52f.jsonl"


def request(index: int, category: str, tokens: int, steps: int) -> RequestResult:
    return RequestResult(index=index, prompt_id=f"{category}-{index}", ok=True, completion_tokens=tokens,
                         spec_verify_ct=steps, decode_tok_s=100.0 + index, category=category)


def mixed_requests() -> list[RequestResult]:
    code = [request(i, "coding", 60, 20 + i % 3) for i in range(8)]  # τ about 2.9
    prose = [request(8 + i, "writing", 60, 30 + i % 4) for i in range(6)]  # τ about 1.9
    return [*code, *prose, request(14, "", 40, 20)]


def test_each_category_has_its_token_weighted_tau_and_ci():
    summary = summarize(mixed_requests(), max_new_tokens=60)
    rows = {c.category: c for c in summary.by_category}
    assert list(rows) == ["coding", "writing", NO_CATEGORY]
    coding = rows["coding"]
    assert coding.requests == 8 and coding.completion_tokens == 480
    assert coding.token_weighted == 480 / sum(20 + i % 3 for i in range(8))
    assert coding.ci95[0] <= coding.token_weighted <= coding.ci95[1]
    assert rows["writing"].ci95[1] < coding.ci95[0]  # the two categories apart, as built
    assert rows[NO_CATEGORY].ci95 is None and rows[NO_CATEGORY].token_weighted == 2.0  # one request: no CI


def test_the_categories_are_shown_by_bench_and_results(tmp_path):
    store = ResultStore(tmp_path)
    run = read_run_file(OLD_RUN)
    run.requests = [r for r in run.requests if r.warmup] + mixed_requests()
    run.summary = summarize(run.requests, max_new_tokens=60, ignore_eos=False)
    store.start_run(run)
    for r in run.requests:
        store.add_request(run.run_id, r)
    store.finish_run(run)
    back = read_run_file(store.path_for(run.run_id))
    assert back.summary.by_category == run.summary.by_category
    text = format_result(back, "saved")
    assert "τ by prompt category (95% CI):" in text
    assert any(line.split()[:2] == ["coding", "8"] for line in (x.strip() for x in text.splitlines()))
    table = format_table([back])
    assert f"run {run.run_id}: τ by prompt category" in table and "writing" in table
    (stored,) = json.loads(format_json([back]))
    assert [c["category"] for c in stored["summary"]["by_category"]] == ["coding", "writing", NO_CATEGORY]


def test_a_run_stored_before_reads_back_as_it_was(tmp_path, capsys):
    shutil.copy(OLD_RUN, tmp_path / OLD_RUN.name)
    run = read_run_file(tmp_path / OLD_RUN.name)
    assert run.summary.by_category is msgspec.UNSET and run.summary.production is msgspec.UNSET
    assert all(r.prompt_hash == "" and r.prompt_text is None and r.category == "" for r in run.requests)
    assert "τ by prompt category" not in format_result(run, "saved")
    assert main(["results", "--dir", str(tmp_path), "--json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert "by_category" not in shown["summary"] and "production" not in shown["summary"]
    assert msgspec.to_builtins(Summary()) == msgspec.to_builtins(msgspec.convert({}, Summary))


def test_a_stored_request_whose_new_fields_are_of_the_wrong_type_is_skipped(tmp_path):
    lines = OLD_RUN.read_text().splitlines()
    record = json.loads(lines[1])
    record.update(prompt_text=["not", "text"])
    lines[1] = json.dumps(record)
    record = json.loads(lines[2])
    record.update(max_new_tokens=10**9)
    lines[2] = json.dumps(record)
    for index, ids in ((3, [1, -1]), (4, "1 2")):
        record = json.loads(lines[index])
        record.update(prompt_ids=ids)
        lines[index] = json.dumps(record)
    path = tmp_path / OLD_RUN.name
    path.write_text("\n".join(lines) + "\n")
    run = read_run_file(path)
    reasons = [s["reason"] for s in run.skipped_records]
    assert len(reasons) == 4 and "prompt_text" in reasons[0] and "max_new_tokens" in reasons[1]
    assert "prompt_ids: input_ids holds something not a token id" in reasons[2]
    assert "prompt_ids: input_ids is not a non-empty list" in reasons[3]
