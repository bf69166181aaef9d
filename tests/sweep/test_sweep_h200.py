"""The grid sweep that ran on real SGLang 0.5.16 on the H200, replayed from its stored plan and runs.

The fixture (tests/fixtures/real-sglang-0.5.16/grid-20261203, README there) holds specmon's data directory after
`specmon sweep h200-eagle3 --steps 1,3,5 --topk 1,4 --draft-tokens 8,16 --concurrency 1,4,8` and SGLang's own
bench_speculative.py measurement of the same configurations and batch sizes on the same GPU."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from specmon.bench.results import ResultStore
from specmon.sweep.grid_report import build_grid_report
from specmon.sweep.plan import SweepStore

FIXTURE = Path(__file__).parents[1] / "fixtures" / "real-sglang-0.5.16" / "grid-20261203"
RUN_ID = "20261203-204620-0206"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    data = tmp_path_factory.mktemp("h200-data")
    with tarfile.open(FIXTURE / "state" / "specmon-data.tar.xz") as archive:
        archive.extractall(data, filter="data")
    plan = SweepStore(data / "specmon" / "sweeps").load(RUN_ID)
    results = ResultStore(data / "specmon" / "results")

    def load(run_id: str | None):
        return results.load(run_id) if run_id else None

    return build_grid_report(plan, load)


def bench_speculative() -> dict[tuple[int, int, int, int], dict]:
    records = {}
    for line in (FIXTURE / "bench_speculative.jsonl").read_text().splitlines():
        record = json.loads(line)
        records[(record["steps"], record["topk"], record["num_draft_tokens"], record["batch_size"])] = record
    return records


def test_the_grid_agrees_with_bench_speculative_on_acceptance(report: dict) -> None:
    theirs = bench_speculative()
    compared = []
    for cell in report["cells"]:
        key = (cell["steps"], cell["topk"], cell["draft_tokens"], cell["concurrency"])
        if cell["state"] != "measured" or key not in theirs:
            continue
        ours, reference = cell["accept_length"], theirs[key]["acc_length"]
        compared.append(abs(ours - reference) / reference)
    # 4 configurations x 3 batch sizes measured by both; SGLang's figure is its server-wide average since the
    # cell's /flush_cache (warm-up batch included), specmon's is over its own requests.
    assert len(compared) == 12
    assert max(compared) < 0.03
    assert sum(gap < 0.02 for gap in compared) >= 10


def test_the_stored_grid_reads_back_with_every_cell_accounted_for(report: dict) -> None:
    assert report["configs"] == 7
    states = {(c["steps"], c["topk"], c["draft_tokens"]): c["state"] for c in report["cells"]}
    assert len(report["cells"]) == 7 * 3
    # the configuration whose launch failed (KV cache, memory held beside it) is not a made-up figure
    failed = [c for c in report["cells"] if (c["steps"], c["topk"], c["draft_tokens"]) == (5, 1, 6)]
    assert {c["state"] for c in failed} == {"skipped"} and all(c["reason"] for c in failed)
    assert all(c.get("decode_tok_s") is None for c in failed)
    assert sum(state == "measured" for state in states.values()) == 6
    dropped = {(d["steps"], d["topk"], d["draft_tokens"]) for d in report["dropped"]}
    assert {(1, 4, 8), (1, 4, 16)} <= dropped  # SGLang 0.5.16's draft-tree rule


def test_on_this_small_target_no_speculation_is_recommended_at_every_load(report: dict) -> None:
    # bench_speculative says the same: its no-speculation speed beats every configuration at every batch size
    theirs = bench_speculative()
    for batch in (1, 4, 8):
        baseline = theirs[(0, 0, 0, batch)]["speed"]
        assert all(r["speed"] < baseline for k, r in theirs.items() if k[3] == batch and k[0])
    bands = report["recommendation"]
    assert [(b["concurrency_from"], b["concurrency_to"], b["steps"]) for b in bands] == [(1, 8, 0)]


def test_speculation_is_not_paying_on_the_h200_at_any_load_it_measured(tmp_path: Path) -> None:
    from specmon.live.paying import ServingConfig, read_curve
    from specmon.sweep.curves import StoredCurves

    with tarfile.open(FIXTURE / "state" / "specmon-data.tar.xz") as archive:
        archive.extractall(tmp_path, filter="data")
    curves = StoredCurves(SweepStore(tmp_path / "specmon" / "sweeps"), ResultStore(tmp_path / "specmon" / "results"))
    serving = ServingConfig("/tmp/trained/target", "EAGLE3", 3, 1, 4)
    curve = curves(serving)
    assert curve is not None and curve.sweep_id == RUN_ID
    assert [p.concurrency for p in sorted(curve.points, key=lambda p: p.concurrency)] == [1, 4, 8]
    assert curve.crossover == 1  # slower than no speculation from the first measured load
    for running in (1, 6, 8):
        reading = read_curve(curve, running, now=curve.measured_at + 3600)
        assert reading.verdict == "loses", (running, reading)
    assert curves(ServingConfig("/tmp/trained/target", "EAGLE3", 5, 1, 6)) is None  # its launch failed
