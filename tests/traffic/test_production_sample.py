"""Prompts sampled from SGLang's request records keep production's class mix and output lengths; records a
benchmark cannot send (no text nor token ids, ids that are not token ids, text cut by --log-requests-level 2) are
counted with their reason,
and a benchmark's own requests are never production."""

from __future__ import annotations

import json
import time
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


def test_a_long_prompt_on_one_line_is_classed_in_linear_time():
    """A 64 KiB paragraph without a newline: the code-line pattern once took seconds (quadratic) per such prompt."""
    started = time.monotonic()
    assert prompt_class("The committee reviewed the survey, and it wrote its findings. " * 1040, 16000) == LONG
    assert time.monotonic() - started < 2.0  # quadratic: about 40 s here; linear: under 10 ms


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
    assert sample.records == 403 and sample.classes == {CODE: 300, OTHER: 101}  # the benchmark's 50 left out
    assert sample.without_text == {"text cut by --log-requests-level 2": 1, "no prompt text": 1}
    for prompt in sample.prompts:
        if prompt.input_ids is not None:  # the record with token ids only
            assert prompt.input_ids == (1, 2, 3) and prompt.max_new_tokens == 10 and not prompt.text
            continue
        index = int(prompt.text.split()[-1].rstrip("."))
        assert prompt.max_new_tokens == (50 + index if prompt.category == CODE else 1000 + index)
    assert len({p.prompt_hash for p in sample.prompts}) == 20
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
    with pytest.raises(NoPromptText, match=r"would hold over .* of prompt text or token ids: ask for fewer requests"):
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


def test_records_with_token_ids_are_sampled_and_ids_that_are_not_token_ids_are_counted(tmp_path):
    """Token ids are sampled as texts are (their class from their length); a list that is not token ids (negative,
    over 2**31 - 1, not ints, over MAX_PROMPT_IDS long, a batch) is skipped with its reason and counted."""
    from specmon.bench.prompts import MAX_PROMPT_IDS, Prompt, ids_hash

    path = tmp_path / "sglang-request-metrics-20261201_10.log"
    with path.open("w") as out:
        for i in range(30):
            out.write(line(f"i{i}", 40 + i, 20, prompt_tokens=3 + i, input_ids=list(range(3 + i))))
        out.write(line("long", 40, 20, prompt_tokens=9000, input_ids=[5] * 9000))
        for rid, ids in {"negative": [1, -1], "huge": [2**31], "float": [1.0], "string": ["1"], "bool": [True],
                         "batch": [[1], [2]], "empty": [], "over": [0] * (MAX_PROMPT_IDS + 1)}.items():
            out.write(line(rid, 40, 20, input_ids=ids))
    sample = sample_prompts([str(path)], 31)
    assert sample.classes == {OTHER: 30, LONG: 1} and len(sample.prompts) == 31
    assert {len(p.input_ids) for p in sample.prompts if p.category == OTHER} == set(range(3, 33))
    assert all(p.text == "" and p.id.endswith(ids_hash(p.input_ids)[:8]) and p.prompt_hash == ids_hash(p.input_ids)
               for p in sample.prompts)
    assert sample.without_text == {
        "input_ids holds something not a token id (an int in 0..2147483647)": 5, "a batch of prompts in one request": 1,
        "input_ids is not a non-empty list": 1, f"input_ids holds {MAX_PROMPT_IDS + 1:,} ids, over {MAX_PROMPT_IDS:,}": 1}
    assert "5 skipped: input_ids holds something not a token id" in sample.describe()
    assert Prompt(id="a", text="", input_ids=(1, 2)).prompt_hash != Prompt(id="b", text="1,2").prompt_hash
    with pytest.raises(ValueError):
        Prompt(id="both", text="x", input_ids=(1,))


def test_the_reservoirs_bound_counts_token_ids(tmp_path, monkeypatch):
    path = tmp_path / "sglang-request-metrics-20261201_10.log"
    path.write_text("".join(line(f"i{i}", 40, 20, input_ids=[1] * 1000) for i in range(10)))
    monkeypatch.setattr(production, "MAX_SAMPLE_BYTES", 5 * 1000 * production.ID_BYTES)
    with pytest.raises(NoPromptText, match="would hold over"):
        sample_prompts([str(path)], 10)
    assert len(sample_prompts([str(path)], 4).prompts) == 4
