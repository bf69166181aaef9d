"""Runs and predictions are matched by the whole speculative configuration (algorithm, draft model, steps, topk,
draft tokens), never by the draft-token count alone: a tree (topk > 1) with the longest chain's draft tokens
neither replaces that chain as the source of predictions nor gets a chain's prediction, and the step-cost model is
fitted on the measured chains of the same drafter alone (issue: every chain's τ pred became a tree's)."""

from __future__ import annotations

import random

import pytest

from specmon.bench.model import (
    AcceptFigures,
    BenchResult,
    DecodeFigures,
    RequestResult,
    ServerFacts,
    Speculative,
    Summary,
)
from specmon.bench.predict import (
    Drafting,
    fit_step_cost,
    predict_measured,
    predict_run,
    prediction_for,
    with_cost_model,
)
from specmon.emulator.speed_model import SpecShape, SpeedModel
from specmon.launch.presets import load_presets


def simulated_run(run_id: str, drafting: Drafting, tok_s: float, started: float, depth: int | None = None,
                  p: float = 0.75) -> BenchResult:
    """A finished run of six requests whose verify steps accept as the emulator's model does (``depth``: the
    deepest a step can accept, a chain's draft tokens - 1 unless given)."""
    depth = drafting.draft_tokens - 1 if depth is None else depth
    model = SpeedModel(SpecShape(steps=depth, topk=1, draft_tokens=depth + 1), accept_prob=p)
    rng = random.Random(run_id)
    requests, tokens, steps = [], 0, 0
    for i in range(6):
        histogram = [0] * (depth + 1)
        for _ in range(40):
            histogram[model.draw_accepted(rng)] += 1
        completion = 1 + sum(c * (k + 1) for k, c in enumerate(histogram))
        requests.append(RequestResult(index=i, prompt_id=f"p{i}", ok=True, completion_tokens=completion,
                                      spec_verify_ct=sum(histogram), accept_histogram=histogram))
        tokens, steps = tokens + completion, steps + sum(histogram)
    server = ServerFacts(speculative=Speculative(
        algorithm=drafting.algorithm, draft_model_path=drafting.draft_model, num_steps=drafting.num_steps,
        eagle_topk=drafting.eagle_topk, num_draft_tokens=drafting.draft_tokens))
    return BenchResult(run_id, run_id, "http://127.0.0.1:1", started, server=server, requests=requests,
                       summary=Summary(decode_tok_s=DecodeFigures(median=tok_s),
                                       accept_length=AcceptFigures(token_weighted=tokens / steps)),
                       status="finished")


def chain(tokens: int, model: str | None = "draft-a", algorithm: str = "EAGLE3") -> Drafting:
    return Drafting(algorithm, tokens, tokens - 1, 1, model)


TREE16 = Drafting("EAGLE3", 16, 5, 8, "draft-a")


@pytest.fixture
def measured():
    return {
        "chain16": (chain(16), simulated_run("chain16", chain(16), 150.0, 1.0)),
        "tree16": (TREE16, simulated_run("tree16", TREE16, 210.0, 2.0, depth=5)),  # measured after the chain
        "chain10": (chain(10), simulated_run("chain10", chain(10), 180.0, 3.0)),
        "chain5": (chain(5), simulated_run("chain5", chain(5), 200.0, 4.0)),
    }


@pytest.mark.parametrize("order", [("chain16", "tree16", "chain10", "chain5"),
                                   ("tree16", "chain5", "chain16", "chain10")])
def test_a_tree_with_the_longest_chains_draft_tokens_neither_predicts_nor_is_predicted(measured, order) -> None:
    sets, notes = predict_measured([measured[name] for name in order])
    assert notes == []
    (predicted,) = sets
    assert predicted.run_id == "chain16" and predicted.drafting == chain(16)
    assert prediction_for(sets, TREE16) is None, "a tree is never predicted from a chain"
    alone = predict_run(measured["chain16"][1])  # the 16-chain alone, as `specmon predict` reads it
    for tokens in (5, 10, 16):
        guess = prediction_for(sets, chain(tokens))
        assert guess.accept_length == pytest.approx(next(p for p in alone.predictions
                                                         if p.draft_tokens == tokens).accept_length)


def test_the_step_cost_model_is_fitted_on_the_drafters_measured_chains_alone(measured) -> None:
    sets, _ = predict_measured(list(measured.values()))
    points = [(d.draft_tokens, r.summary.accept_length.token_weighted, r.summary.decode_tok_s.median)
              for d, r in measured.values() if d.chain]
    expected = with_cost_model(predict_run(measured["chain16"][1]).predictions, fit_step_cost(points))
    for want in expected:
        assert prediction_for(sets, chain(want.draft_tokens)).decode_tok_s == pytest.approx(want.decode_tok_s)
    measured["tree16"][1].summary.decode_tok_s.median = 1.0  # the tree's speed says nothing of a chain's steps
    again, _ = predict_measured(list(measured.values()))
    assert prediction_for(again, chain(10)).decode_tok_s == pytest.approx(prediction_for(sets, chain(10)).decode_tok_s)


def test_only_a_chain_of_the_same_drafter_no_longer_than_the_measured_one_is_predicted(measured) -> None:
    sets, _ = predict_measured(list(measured.values()))
    assert prediction_for(sets, chain(5, model="draft-b")) is None, "another draft model"
    assert prediction_for(sets, chain(5, algorithm="NGRAM")) is None, "another algorithm"
    assert prediction_for(sets, chain(20)) is None, "longer than the chain measured"
    assert prediction_for(sets, None) is None
    assert prediction_for(sets, chain(5, algorithm="eagle3")) is not None, "the algorithm's case does not matter"


def test_a_run_whose_server_ran_a_tree_predicts_nothing_and_says_why(measured) -> None:
    drafting, _ = measured["chain16"]
    ran_a_tree = simulated_run("as-tree", TREE16, 150.0, 5.0, depth=5)  # its preset said chain, its server a tree
    sets, notes = predict_measured([(drafting, ran_a_tree)])
    assert sets == []
    assert len(notes) == 1 and "tree (topk 8)" in notes[0] and "as-tree" in notes[0], notes


def test_a_presets_configuration_is_its_whole_drafting_shape(tmp_path) -> None:
    (tmp_path / "tree.toml").write_text('name = "tree-16"\nextends = "eagle3-16"\n[server.args]\n'
                                        "speculative-num-steps = 5\nspeculative-eagle-topk = 8\n"
                                        "speculative-num-draft-tokens = 16\n")
    presets = load_presets([str(tmp_path)])
    from specmon.sweep.runner import drafting_of

    chain16, tree16 = drafting_of(presets.get("eagle3-16")), drafting_of(presets.get("tree-16"))
    assert chain16.draft_tokens == tree16.draft_tokens == 16
    assert chain16 != tree16 and chain16.chain and not tree16.chain
    assert chain16.drafter == tree16.drafter
    assert drafting_of(presets.get("baseline")) is None


def test_a_chain_shorter_than_every_measured_one_is_read_on_the_line_through_no_speculation() -> None:
    """Two long chains, the shorter one slow by noise: their own line, extrapolated to d2, tilts down to a slow
    step; the line through no speculation and both (least squares, checked against statistics') reads d2 faster.
    Only a chain shorter than them all is read so, and only with a baseline."""
    import statistics

    from specmon.bench.predict import fit_step_cost, through_no_speculation

    chains = [(6, 3.0, 3.0 / 0.024), (8, 3.5, 3.5 / 0.025)]  # step 24 ms at d6, 25 ms at d8
    extrapolated = fit_step_cost(chains)
    assert extrapolated is not None and extrapolated.decode_tok_s(1.8, 2) == pytest.approx(1.8 / 0.022)
    line = statistics.linear_regression([1, 6, 8], [0.010, 0.024, 0.025])
    expected = 1.8 / (line.intercept + line.slope * 2)
    optimistic = through_no_speculation(2, 1.8, chains, 100.0)  # no speculation: 100 tok/s, a step of 10 ms
    assert optimistic == pytest.approx(expected) and optimistic > 1.8 / 0.022 * 1.3
    assert through_no_speculation(6, 3.0, chains, 100.0) is None  # not shorter than every measured chain
    assert through_no_speculation(2, 1.8, chains, None) is None and through_no_speculation(2, 1.8, [], 100.0) is None
