"""Prompts sampled from SGLang's request records keep production's class mix and output lengths; records a
benchmark cannot send (no text, token ids only, text cut by --log-requests-level 2) are counted with their reason,
and a benchmark's own requests are never production."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from specmon.bench.model import AcceptFigures, BenchResult, RequestResult, Summary
from specmon.bench.report import UNREPRESENTATIVE, production_gap
from specmon.bench.stats import ci95
from specmon.bench.summary import _token_weighted
from specmon.serving.client import OWN_RID_PREFIX
from specmon.traffic import production
from specmon.traffic.categories import CODE, LONG, OTHER, prompt_class
from specmon.traffic.production import NoPromptText, check_against_production, judge_against, sample_prompts
from specmon.view.bench_pane import bench_pane

CODE_TEXT = "Why does this fail?\n```python\nprint(1 +)\n```"


def line(rid: str, completion: int, verify: int, prompt_tokens: int = 100, **params) -> str:
    meta = {"id": rid, "prompt_tokens": prompt_tokens, "completion_tokens": completion, "spec_verify_ct": verify}
    return json.dumps({"request_parameters": json.dumps({"rid": rid, **params}), **meta}) + "\n"


def test_prompt_classes():
    assert prompt_class(CODE_TEXT, 20) == CODE
    assert prompt_class("int main() {\n  return 0;\n}\n", 20) == CODE  # code without a fence
    assert prompt_class("A long contract to summarise.", 9000) == LONG
    assert prompt_class("Tell me a story.", 20) == OTHER
    assert prompt_class(None, 9000) == LONG and prompt_class(None, None) == OTHER


def test_the_sample_keeps_the_class_mix_and_each_requests_output_length(tmp_path):
    path = tmp_path / "sglang-request-metrics-20261201_10.log"
    with path.open("w") as out:
        for i in range(300):
            out.write(line(f"c{i}", 50 + i, 20, text=f"{CODE_TEXT} {i}"))
        for i in range(100):
            out.write(line(f"o{i}", 1000 + i, 500, text=f"Tell me about river {i}."))
        for i in range(50):
            out.write(line(f"{OWN_RID_PREFIX}run-{i}", 10, 5, text=f"{CODE_TEXT} mine {i}"))
        out.write(line("ids", 10, 5, input_ids=[1, 2, 3]))
        out.write(line("cut", 10, 5, text="a" * 1024 + "..." + "b" * 1024))
        out.write(line("none", 10, 5))
    sample = sample_prompts([str(path)], 20)
    assert Counter(p.category for p in sample.prompts) == {CODE: 15, OTHER: 5}
    assert sample.records == 403 and sample.classes == {CODE: 300, OTHER: 100}  # the benchmark's 50 left out
    assert sample.without_text == {"token ids only (input_ids), no text": 1, "text cut by --log-requests-level 2": 1,
                                   "no prompt text": 1}
    for prompt in sample.prompts:
        index = int(prompt.text.split()[-1].rstrip("."))
        assert prompt.max_new_tokens == (50 + index if prompt.category == CODE else 1000 + index)
    assert len({p.text for p in sample.prompts}) == 20
    assert [p.text for p in sample_prompts([str(path)], 20).prompts] == [p.text for p in sample.prompts]  # seeded
    capped = sample_prompts([str(path)], 20, max_new_tokens=64)
    assert max(p.max_new_tokens for p in capped.prompts) == 64


def test_records_without_text_say_so_in_one_line(tmp_path):
    path = tmp_path / "sglang-request-metrics-20261201_10.log"
    path.write_text("".join(line(f"r{i}", 10, 5) for i in range(4)))
    with pytest.raises(NoPromptText) as caught:
        sample_prompts([str(path)], 5)
    message = str(caught.value)
    assert "\n" not in message and "none of 4 records holds the prompt's text" in message
    assert "--export-metrics-to-file" in message and "--log-requests-level 3" in message


def _result(pairs: list[tuple[int, int]]) -> BenchResult:
    requests = [RequestResult(index=i, prompt_id=f"p{i}", ok=True, completion_tokens=c, spec_verify_ct=v,
                              prompt_tokens=50, prompt_text="Tell me a story.") for i, (c, v) in enumerate(pairs)]
    accept = AcceptFigures(token_weighted=_token_weighted(pairs), ci95=ci95(pairs, _token_weighted))
    return BenchResult(run_id="r", preset="p", url="u", started_at=0.0, requests=requests,
                       summary=Summary(accept_length=accept))


def test_the_gap_is_flagged_only_beyond_both_cis(tmp_path):
    path = tmp_path / "sglang-request-metrics-20261201_10.log"
    path.write_text("".join(line(f"r{i}", 100, 50 + i % 3, text=f"{CODE_TEXT} {i}") for i in range(40)))  # τ ≈ 2
    high = check_against_production(_result([(100, 30 + i % 3) for i in range(20)]), [str(path)])  # τ ≈ 3.2
    assert high.beyond_ci and high.relative_gap > 0.5
    assert "overstates acceptance by" in high.text and "its prompts are 0% code, production's 100%" in high.text
    same = check_against_production(_result([(100, 50 + i % 3) for i in range(20)]), [str(path)])
    assert not same.beyond_ci and "within the CIs" in same.text
    few = check_against_production(_result([(100, 30)] * 3), [str(path)])  # no CI of 3 requests: not judged
    assert not few.beyond_ci and "not judged" in few.text


def test_a_sample_too_big_to_hold_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(production, "MAX_SAMPLE_BYTES", 10_000)
    path = tmp_path / "sglang-request-metrics-20261201_10.log"
    path.write_text("".join(line(f"r{i}", 10, 5, text=f"{i} " + "w" * 1000) for i in range(30)))
    with pytest.raises(NoPromptText, match=r"would hold over .* of prompt text: ask for fewer requests"):
        sample_prompts([str(path)], 20)
    assert len(sample_prompts([str(path)], 5).prompts) == 5


def test_the_flag_reaches_the_summary_and_the_benchmark_pane(tmp_path):
    path = tmp_path / "sglang-request-metrics-20261201_10.log"
    path.write_text("".join(line(f"r{i}", 100, 50 + i % 3, text=f"{CODE_TEXT} {i}") for i in range(40)))
    flagged, fine = _result([(100, 30 + i % 3) for i in range(20)]), _result([(100, 50 + i % 3) for i in range(20)])
    for run in (flagged, fine):
        run.status = "finished"
        judge_against([str(path)])(run)
    assert flagged.summary.flags == [UNREPRESENTATIVE] and flagged.summary.flag_details[UNREPRESENTATIVE] == (
        flagged.summary.production.text)
    assert fine.summary.flags == [] and fine.summary.production.beyond_ci is False
    assert bench_pane([flagged]).production == flagged.summary.production.text == production_gap(flagged)
    assert bench_pane([flagged, fine]).production is None and production_gap(fine) is None
