"""`specmon predict` and the results reader on runs shaped like the real trained pair's: the per-step trace
replayed for shorter chains, drafts past max_new_tokens not counted, long prompts kept, and every record
skipped said with why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specmon.bench.predict import accept_length, predict_requests
from specmon.bench.results import ResultStore
from specmon.cli import main
from specmon.sweep.cli import format_report
from specmon.sweep.report import PresetOutcome, build_report
from tests.support.chains import (
    PROMPT_TOKENS,
    measured_accept,
    run_chain,
    trained_like_agreements,
    write_chain_run,
)

AGREEMENTS = trained_like_agreements()


def truth(m: int) -> float:
    return measured_accept(AGREEMENTS, m, 256)


def test_replaying_the_trace_predicts_shorter_chains_where_the_histogram_formula_is_biased(tmp_path: Path) -> None:
    run = write_chain_run(tmp_path, AGREEMENTS, 16)
    predictions, chains, skipped = predict_requests(run.requests, 16, [16, 10, 5])
    got = {p.draft_tokens: p for p in predictions}
    assert len(chains) == 24 and not skipped and {c.method for c in chains} == {"trace"}
    assert got[16].accept_length == pytest.approx(truth(16), rel=1e-12)  # M = N is what SGLang measured
    for m in (10, 5):
        assert got[m].accept_length == pytest.approx(truth(m), rel=0.005), m
        low, high = got[m].ci95
        assert low < truth(m) < high
    # what the formula over SGLang's histograms gave: +overshoot at N, biased low at 5 on bursty agreement
    formula = {m: accept_length([r.accept_histogram for r in run.requests], m) for m in (16, 5)}
    assert formula[16] > truth(16) * 1.003 and formula[5] < truth(5) * 0.97


def test_without_a_trace_the_histogram_stands_in_with_the_drafts_past_max_new_tokens_taken_off() -> None:
    agree = [True] * 40  # every step accepts all 3 drafts: the last one runs past max_new_tokens = 10
    chunks, histogram = run_chain(agree, 4, 10)
    assert sum(histogram) == len(chunks) == 3 and sum(chunks) == 9 and histogram == [0, 0, 0, 3]
    from specmon.bench.model import RequestResult

    request = RequestResult(index=0, prompt_id="p", ok=True, completion_tokens=10, spec_verify_ct=3,
                            accept_histogram=histogram, chunk_tokens=[4, 4], chunk_gaps_ms=[1.0, 1.0])  # fmt: skip
    (prediction,), (chain,), _ = predict_requests([request], 4, [4])
    assert chain.method == "histogram"  # two chunks for three verify steps: not a per-step trace
    assert prediction.accept_length == pytest.approx(10 / 3)  # 13 / 3 counting the drafts past the end


def test_predict_uses_every_request_of_a_run_with_long_prompts(tmp_path: Path, capsys) -> None:
    assert sum(1 for n in PROMPT_TOKENS if n > 320) == 8
    run = write_chain_run(tmp_path, AGREEMENTS, 16)
    assert main(["results", "--dir", str(tmp_path), "--format", "json"]) == 0
    out = capsys.readouterr()
    assert "skipped" not in out.err
    (stored,) = json.loads(out.out)
    assert len(stored["requests"]) == 24 and stored["skipped_records"] == []
    assert main(["predict", run.run_id[:12], "--dir", str(tmp_path), "--draft-tokens", "10,5", "--json"]) == 0
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert list(data) == ["run_id", "from_draft_tokens", "requests_used", "requests_skipped", "predictions"]
    assert data["run_id"] == run.run_id and data["from_draft_tokens"] == 16
    assert data["requests_used"] == 24 and data["requests_skipped"] == 0
    assert [list(p) for p in data["predictions"]] == [["draft_tokens", "accept_length", "ci", "decode_tok_s"]] * 2
    by_m = {p["draft_tokens"]: p for p in data["predictions"]}
    assert sorted(by_m) == [5, 10] and by_m[5]["decode_tok_s"] is None  # no cost model from one run
    for m in (10, 5):
        assert by_m[m]["accept_length"] == pytest.approx(truth(m), rel=0.005)
        assert by_m[m]["ci"][0] < by_m[m]["accept_length"] < by_m[m]["ci"][1]
    assert "greedy outputs change with the chain length" in out.err
    assert main(["predict", run.run_id, "--dir", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "24 requests used (24 by their per-step trace), 0 skipped" in text
    assert "greedy outputs change with the chain length" in text


def test_a_prompt_longer_than_the_context_is_skipped_and_every_reader_says_so(tmp_path: Path, capsys) -> None:
    prompts = list(PROMPT_TOKENS)
    prompts[3] = 5000  # the server's context is 2048: a record that cannot be true
    run = write_chain_run(tmp_path, AGREEMENTS, 16, context_length=2048, prompt_tokens=prompts)
    loaded = ResultStore(tmp_path).load(run.run_id)
    assert len(loaded.requests) == 23
    (skipped,) = loaded.skipped_records
    assert skipped["line"] == 5 and "prompt_tokens is 5000, not a count of at most 2048" in skipped["reason"]
    assert main(["results", "--dir", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert f"run {run.run_id}: 1 stored record skipped (prompt_tokens is N, not a count" in err
    assert main(["predict", run.run_id, "--dir", str(tmp_path), "--json"]) == 0
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert data["requests_used"] == 23 and data["requests_skipped"] == 1
    assert "1 request(s) skipped: stored record unreadable (prompt_tokens is 5000" in out.err


def test_predict_refuses_what_it_cannot_predict_with_a_reason(tmp_path: Path, capsys) -> None:
    run = write_chain_run(tmp_path, AGREEMENTS[:3], 5, preset="plain")
    path = ResultStore(tmp_path).path_for(run.run_id)
    records = [json.loads(line) for line in path.read_text().splitlines()]

    def served(speculative: dict) -> None:  # the run and summary records both hold the server's settings
        for record in records:
            if "server" in record:
                record["server"]["speculative"] = speculative
        path.write_text("".join(json.dumps(record) + "\n" for record in records))

    served({"algorithm": None, "num_draft_tokens": None})
    assert main(["predict", run.run_id, "--dir", str(tmp_path)]) == 1
    assert "ran no speculative decoding" in capsys.readouterr().err
    served({"algorithm": "EAGLE", "num_draft_tokens": 8, "eagle_topk": 4})
    assert main(["predict", run.run_id, "--dir", str(tmp_path)]) == 1
    assert "a tree (topk 4)" in capsys.readouterr().err
    assert main(["predict", "nope", "--dir", str(tmp_path)]) == 2
    assert "no run 'nope'" in capsys.readouterr().err
    assert main(["predict", run.run_id, "--dir", str(tmp_path), "--draft-tokens", "10,x"]) == 2
    assert "not a count" in capsys.readouterr().err


def test_a_sweep_whose_records_were_all_skipped_says_why_it_recommends_nothing(tmp_path: Path) -> None:
    runs = {m: write_chain_run(tmp_path, AGREEMENTS, m, context_length=100) for m in (16, 5)}  # every prompt too long
    loaded = {m: ResultStore(tmp_path).load(run.run_id) for m, run in runs.items()}
    assert all(not run.requests and len(run.skipped_records) == 24 for run in loaded.values())
    outcomes = [PresetOutcome(f"trained-{m}", m, "measured", loaded[m]) for m in (16, 5)]
    report = build_report("sweep-x", outcomes)
    assert report.recommended is None
    assert report.no_recommendation.startswith("2 presets measured, but none has a successful request")
    assert "48 stored request records were skipped" in report.no_recommendation
    assert all(row["requests_skipped"] == 24 for row in report.rows)
    text = format_report(report)
    assert "nothing measured" not in text
    assert "note: trained-16: run " in text and "24 stored records skipped (24× prompt_tokens is N" in text
