"""Two grid configurations rerun on the H200 with both tools on one server, replayed from what came back.

The fixture (tests/fixtures/real-sglang-0.5.16/grid-rerun-20261204, README there): for s3k4d8 and s3k1d4, one
SGLang 0.5.16 server each, measured at batch sizes 1, 4 and 8 by bench_speculative.py's send_one_batch and then by
`specmon bench`, 48 requests a cell, with SGLang's own per-request records exported (`--export-metrics-to-file`)."""

from __future__ import annotations

import json
import tarfile
from collections import defaultdict
from pathlib import Path

import pytest

from specmon.bench.results import ResultStore

FIXTURE = Path(__file__).parents[1] / "fixtures" / "real-sglang-0.5.16" / "grid-rerun-20261204"
Key = tuple[int, int, int, int]  # steps, topk, draft tokens, batch size (concurrency)
CELLS: list[Key] = [(3, 4, 8, 1), (3, 4, 8, 4), (3, 4, 8, 8), (3, 1, 4, 1), (3, 1, 4, 4), (3, 1, 4, 8)]  # as run


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("h200-same-server")
    with tarfile.open(FIXTURE / "h200-state.tar.xz") as archive:
        archive.extractall(where, filter="data")
    return where


@pytest.fixture(scope="module")
def specmon_tau(unpacked: Path) -> dict[Key, float]:
    """τ per cell as specmon stored it (its summary: tokens / verify steps over its measured requests)."""
    store = ResultStore(unpacked / "state" / "specmon" / "results")
    taus = {}
    for run_id in store.run_ids():
        run = store.load(run_id)
        spec = run.server.speculative
        assert spec is not None and run.status == "finished", run_id
        figure = run.summary.accept_length.token_weighted
        assert figure is not None
        taus[(spec.num_steps, spec.eagle_topk, spec.num_draft_tokens, run.settings.concurrency)] = float(figure)
    return taus


def bench_speculative() -> dict[Key, float]:
    records = {}
    for line in (FIXTURE / "bench_speculative.jsonl").read_text().splitlines():
        if line.startswith("{"):  # the rest is benchmark()'s own printing
            r = json.loads(line)
            records[(r["steps"], r["topk"], r["num_draft_tokens"], r["batch_size"])] = r["acc_length"]
    return records


@pytest.fixture(scope="module")
def sglang_records(unpacked: Path) -> dict[Key, tuple[list[dict], list[dict]]]:
    """SGLang's exported records of each cell's measured requests: (bench_speculative's 48, specmon's 48).

    In the order received, a cell is: benchmark()'s 32-token warm-up, the warm-up batch, benchmark()'s warm-up
    again, the 48 measured requests, then specmon's 2 warm-ups and its 48."""
    (export,) = (unpacked / "export").iterdir()
    records = [json.loads(line) for line in export.read_text().splitlines()]
    records = sorted((r for r in records if r["completion_tokens"] != 8), key=lambda r: r["request_received_ts"])
    warmups = [i for i, r in enumerate(records) if r["completion_tokens"] == 32]
    assert len(warmups) == 2 * len(CELLS)
    cells = {}
    for n, key in enumerate(CELLS):
        start = warmups[2 * n + 1] + 1
        theirs, ours = records[start:start + 48], records[start + 50:start + 98]
        assert all(r["completion_tokens"] == 256 for r in theirs + ours)
        cells[key] = theirs, ours
    return cells


def tau(records: list[dict]) -> float:
    return sum(r["completion_tokens"] for r in records) / sum(r["spec_verify_ct"] for r in records)


def test_specmon_and_bench_speculative_on_one_server_agree_on_acceptance(specmon_tau) -> None:
    theirs = bench_speculative()
    assert sorted(specmon_tau) == sorted(theirs) == sorted(CELLS)
    gaps = {key: specmon_tau[key] / theirs[key] - 1 for key in CELLS}
    assert sum(abs(gap) < 0.02 for gap in gaps.values()) == 5, gaps
    assert max(abs(gap) for gap in gaps.values()) < 0.022, gaps
    assert all(abs(gaps[key]) < 0.005 for key in CELLS if key[3] == 1), gaps  # one stream: within 0.5 %


def test_specmon_tau_is_sglangs_own_record_of_its_requests(specmon_tau, sglang_records) -> None:
    for key, (_, ours) in sglang_records.items():
        assert specmon_tau[key] == pytest.approx(tau(ours), rel=1e-12), key


def test_bench_speculative_reads_the_server_average_close_to_sglangs_records_of_its_requests(sglang_records) -> None:
    reported = bench_speculative()
    for key, (theirs, _) in sglang_records.items():
        assert abs(reported[key] / tau(theirs) - 1) < 0.006, key  # /server_info folds every 40 decode steps


def test_above_one_stream_the_server_accepts_the_same_prompt_differently_for_the_two_tools(sglang_records) -> None:
    """The gap between the tools at 4 and 8 streams is the server's: its greedy output depends on which requests
    share the batch, so the same prompt takes different numbers of verify steps in the two tools' runs."""

    def steps_per_prompt(records: list[dict]) -> dict[str, list[int]]:
        steps = defaultdict(list)
        for r in records:
            steps[json.loads(r["request_parameters"])["text"]].append(r["spec_verify_ct"])
        return {text: sorted(counts) for text, counts in steps.items()}

    differing = {}
    for key, (theirs, ours) in sglang_records.items():
        a, b = steps_per_prompt(theirs), steps_per_prompt(ours)
        assert sorted(a) == sorted(b) and len(a) == 16, key  # the same 16 prompts, 3 times each
        differing[key] = sum(a[text] != b[text] for text in a)
    assert all(differing[key] <= 1 for key in CELLS if key[3] == 1), differing  # at most one prompt
    assert all(differing[key] >= 4 for key in CELLS if key[3] > 1), differing
