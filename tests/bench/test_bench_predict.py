"""specmon.bench.predict: shorter chains from a longer run's acceptance histograms; the step-cost model."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from specmon.bench.model import RequestResult
from specmon.bench.predict import (
    accept_length,
    chain_tokens,
    clean_histogram,
    fit_step_cost,
    histogram_from_chunks,
    position_profile,
    predict_requests,
    with_cost_model,
)
from specmon.emulator.speed_model import SpecShape, SpeedModel

API = Path(__file__).parents[1] / "fixtures" / "api"


def requests_of(histograms: list[list[int]]) -> list[RequestResult]:
    """Requests known by their histograms alone (no per-step trace), each as long as its histogram says."""
    return [
        RequestResult(index=i, prompt_id=f"p{i}", ok=True, completion_tokens=1 + sum(c * (k + 1) for k, c in enumerate(h)),
                      spec_verify_ct=sum(h), accept_histogram=h)
        for i, h in enumerate(histograms)
    ]  # fmt: skip


def predict(histograms: list[list[int]], measured: int):
    return predict_requests(requests_of(histograms), measured)[0]


def test_chain_tokens_caps_each_step_at_m_minus_one_drafts() -> None:
    histogram = [2, 1, 0, 3]  # 2 steps accepted 0, 1 accepted 1, 3 accepted 3
    assert chain_tokens(histogram, 16) == (2 * 1 + 1 * 2 + 3 * 4, 6)
    assert chain_tokens(histogram, 3) == (2 * 1 + 1 * 2 + 3 * 3, 6)
    assert chain_tokens(histogram, 1) == (6, 6)  # no drafts: one token a step


def test_the_measured_draft_length_reproduces_the_measured_acceptance() -> None:
    histograms = [[1, 2, 3, 4], [0, 0, 5], [7]]
    tokens = sum(1 + sum(c * (k + 1) for k, c in enumerate(h)) for h in histograms)  # + the prefill token
    steps = sum(sum(h) for h in histograms)
    assert accept_length(histograms, 4) == pytest.approx(tokens / steps)
    (last,) = [p for p in predict(histograms, 4) if p.draft_tokens == 4]
    assert last.accept_length == pytest.approx(tokens / steps) and last.ci95 is None  # 3 requests: no CI


def test_histogram_from_chunks_and_from_a_real_server_answer() -> None:
    assert histogram_from_chunks([1, 3, 3, 2, 0, "x"]) == [1, 1, 2]
    assert clean_histogram([47]) == [47]
    for bad in ("47", [], [-1], [1.5], [True], [0, 0], list(range(2000))):
        assert clean_histogram(bad) is None
    answer = (Path(__file__).parents[1] / "fixtures" / "api").glob("*generate*eagle3*")
    for path in answer:
        last = [line for line in path.read_text().splitlines() if line.startswith("data: {")][-1]
        meta = json.loads(last.removeprefix("data: "))["meta_info"]
        histogram = clean_histogram(meta["spec_accept_histogram"])
        assert histogram is not None
        assert accept_length([histogram], 4) == pytest.approx(meta["spec_accept_length"])


def test_position_profile_is_the_share_of_steps_reaching_each_depth() -> None:
    assert position_profile([[2, 1, 0, 1]]) == [0.5, 0.25, 0.25]
    assert position_profile([]) == []


def simulated_histograms(depth: int, requests: int, steps: int, p: float = 0.75) -> list[list[int]]:
    model = SpeedModel(SpecShape(steps=depth, topk=1, draft_tokens=depth + 1), accept_prob=p)
    rng = random.Random(7)
    out = []
    for _ in range(requests):
        histogram = [0] * (depth + 1)
        for _ in range(steps):
            histogram[model.draw_accepted(rng)] += 1
        out.append(histogram)
    return out


@pytest.mark.parametrize("m", [5, 10])
def test_a_16_token_chain_predicts_5_and_10_within_5_percent_of_the_emulators_model(m: int) -> None:
    predictions = {p.draft_tokens: p for p in predict(simulated_histograms(15, 20, 200), 16)}
    truth = SpeedModel(SpecShape(steps=m - 1, topk=1, draft_tokens=m), accept_prob=0.75).expected_accept_length()
    got = predictions[m]
    assert got.accept_length == pytest.approx(truth, rel=0.05)
    low, high = got.ci95
    assert low <= got.accept_length <= high and high - low < 0.5


def test_the_step_cost_model_recovers_a_linear_step_time() -> None:
    def step(m: int) -> float:
        return 0.011 + 0.0009 * m

    measured = [(m, 2.5, 2.5 / step(m)) for m in (5, 10, 16)]
    model = fit_step_cost(measured)
    assert model is not None and model.presets == 3
    assert model.step_s(8) == pytest.approx(step(8))
    (prediction,) = with_cost_model(predict([[1, 1, 1, 1, 1, 1, 1, 1]], 8)[-1:], model)
    assert prediction.decode_tok_s == pytest.approx(prediction.accept_length / step(8))


def test_no_cost_model_from_one_preset_or_bad_figures() -> None:
    assert fit_step_cost([(5, 2.5, 100.0)]) is None
    assert fit_step_cost([(5, 2.5, 100.0), (5, 2.6, 101.0)]) is None
    assert fit_step_cost([(5, float("nan"), 100.0), (10, 2.6, 0.0)]) is None
    assert with_cost_model(predict([[1, 2]], 2), None)[0].decode_tok_s is None
