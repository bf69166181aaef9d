"""Grid configurations on the H200 with both tools on one server, replayed from what came back.

Two fixtures (README in each, under tests/fixtures/real-sglang-0.5.16/): for each configuration one SGLang 0.5.16
server, measured at batch sizes 1, 4 and 8 by bench_speculative.py's send_one_batch and then by `specmon bench`,
48 requests a cell, with SGLang's own per-request records exported (`--export-metrics-to-file`).
- grid-rerun-20261204: s3k4d8 and s3k1d4, SGLang's default kernels;
- grid-deterministic-20261204: the grid's five configurations with `--enable-deterministic-inference`."""

from __future__ import annotations

import json
import tarfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from specmon.bench.results import ResultStore

FIXTURES = Path(__file__).parents[1] / "fixtures" / "real-sglang-0.5.16"
Key = tuple[int, int, int, int]  # steps, topk, draft tokens, batch size (concurrency)


def cells_of(*configs: tuple[int, int, int]) -> list[Key]:
    return [(*config, batch) for config in configs for batch in (1, 4, 8)]


@dataclass(frozen=True)
class SameServerRun:
    """One fixture: where it is and its cells in the order they ran."""

    name: str
    cells: list[Key]

    @property
    def folder(self) -> Path:
        return FIXTURES / self.name


DEFAULT_KERNELS = SameServerRun("grid-rerun-20261204", cells_of((3, 4, 8), (3, 1, 4)))
DETERMINISTIC = SameServerRun(
    "grid-deterministic-20261204", cells_of((3, 1, 4), (3, 4, 8), (5, 4, 16), (1, 1, 2), (5, 1, 6))
)


@dataclass(frozen=True)
class Measured:
    """What one fixture holds, read once: each tool's τ per cell and SGLang's records of each cell's requests."""

    run: SameServerRun
    specmon_tau: dict[Key, float]
    bench_speculative_tau: dict[Key, float]
    records: dict[Key, tuple[list[dict], list[dict]]]  # (bench_speculative's 48, specmon's 48)


def read_specmon_tau(state: Path) -> dict[Key, float]:
    """τ per cell as specmon stored it (its summary: tokens / verify steps over its measured requests)."""
    store = ResultStore(state / "specmon" / "results")
    taus = {}
    for run_id in store.run_ids():
        run = store.load(run_id)
        spec = run.server.speculative
        assert spec is not None and run.status == "finished", run_id
        figure = run.summary.accept_length.token_weighted
        assert figure is not None
        taus[(spec.num_steps, spec.eagle_topk, spec.num_draft_tokens, run.settings.concurrency)] = float(figure)
    return taus


def read_bench_speculative(folder: Path) -> dict[Key, float]:
    records = {}
    for line in (folder / "bench_speculative.jsonl").read_text().splitlines():
        if line.startswith("{"):  # the rest is benchmark()'s own printing
            r = json.loads(line)
            records[(r["steps"], r["topk"], r["num_draft_tokens"], r["batch_size"])] = r["acc_length"]
    return records


def read_sglang_records(export: Path, cells: list[Key]) -> dict[Key, tuple[list[dict], list[dict]]]:
    """SGLang's exported records of each cell's measured requests: (bench_speculative's 48, specmon's 48).

    In the order received, a cell is: benchmark()'s 32-token warm-up, the warm-up batch, benchmark()'s warm-up
    again, the 48 measured requests, then specmon's 2 warm-ups and its 48."""
    (export_file,) = export.iterdir()
    records = [json.loads(line) for line in export_file.read_text().splitlines()]
    records = sorted((r for r in records if r["completion_tokens"] != 8), key=lambda r: r["request_received_ts"])
    warmups = [i for i, r in enumerate(records) if r["completion_tokens"] == 32]
    assert len(warmups) == 2 * len(cells)
    by_cell = {}
    for n, key in enumerate(cells):
        start = warmups[2 * n + 1] + 1
        theirs, ours = records[start:start + 48], records[start + 50:start + 98]
        assert all(r["completion_tokens"] == 256 for r in theirs + ours)
        by_cell[key] = theirs, ours
    return by_cell


def measured(run: SameServerRun, where: Path) -> Measured:
    with tarfile.open(run.folder / "h200-state.tar.xz") as archive:
        archive.extractall(where, filter="data")
    return Measured(run, read_specmon_tau(where / "state"), read_bench_speculative(run.folder),
                    read_sglang_records(where / "export", run.cells))


@pytest.fixture(scope="module")
def default_kernels(tmp_path_factory: pytest.TempPathFactory) -> Measured:
    return measured(DEFAULT_KERNELS, tmp_path_factory.mktemp("default"))


@pytest.fixture(scope="module")
def deterministic(tmp_path_factory: pytest.TempPathFactory) -> Measured:
    return measured(DETERMINISTIC, tmp_path_factory.mktemp("deterministic"))


@pytest.fixture(scope="module", params=["default_kernels", "deterministic"])
def each_run(request: pytest.FixtureRequest) -> Measured:
    """Each fixture, read once for the module (the same reading its own tests use)."""
    return request.getfixturevalue(request.param)


def tau(records: list[dict]) -> float:
    return sum(r["completion_tokens"] for r in records) / sum(r["spec_verify_ct"] for r in records)


def gaps(run: Measured) -> dict[Key, float]:
    assert sorted(run.specmon_tau) == sorted(run.bench_speculative_tau) == sorted(run.run.cells)
    return {key: run.specmon_tau[key] / run.bench_speculative_tau[key] - 1 for key in run.run.cells}


def verify_steps_per_prompt(records: list[dict]) -> dict[str, list[int]]:
    steps = defaultdict(list)
    for r in records:
        steps[json.loads(r["request_parameters"])["text"]].append(r["spec_verify_ct"])
    return {text: sorted(counts) for text, counts in steps.items()}


def test_specmon_tau_is_sglangs_own_record_of_its_requests(each_run: Measured) -> None:
    for key, (_, ours) in each_run.records.items():
        assert each_run.specmon_tau[key] == pytest.approx(tau(ours), rel=1e-12), key


def test_bench_speculative_reads_the_server_average_close_to_sglangs_records_of_its_requests(each_run) -> None:
    for key, (theirs, _) in each_run.records.items():
        # /server_info's running average (folded in every 40 decode steps), not the per-request records
        assert abs(each_run.bench_speculative_tau[key] / tau(theirs) - 1) < 0.01, key


def test_with_default_kernels_the_tools_agree_within_2_percent_in_5_of_6_cells(default_kernels) -> None:
    gap = gaps(default_kernels)
    assert sum(abs(g) < 0.02 for g in gap.values()) == 5, gap
    assert max(abs(g) for g in gap.values()) < 0.022, gap
    assert all(abs(gap[key]) < 0.005 for key in gap if key[3] == 1), gap  # one stream: within 0.5 %


def test_above_one_stream_default_kernels_accept_the_same_prompt_differently_for_the_two_tools(default_kernels):
    """The gap between the tools at 4 and 8 streams is the server's: its greedy output depends on which requests
    share the batch, so the same prompt takes different numbers of verify steps in the two tools' runs."""
    differing = {}
    for key, (theirs, ours) in default_kernels.records.items():
        a, b = verify_steps_per_prompt(theirs), verify_steps_per_prompt(ours)
        assert sorted(a) == sorted(b) and len(a) == 16, key  # the same 16 prompts, 3 times each
        differing[key] = sum(a[text] != b[text] for text in a)
    assert all(differing[key] <= 1 for key in differing if key[3] == 1), differing  # at most one prompt
    assert all(differing[key] >= 4 for key in differing if key[3] > 1), differing


def test_with_deterministic_inference_every_cell_agrees_within_1_percent(deterministic: Measured) -> None:
    gap = gaps(deterministic)
    assert len(gap) == 15 and max(abs(g) for g in gap.values()) < 0.01, gap


def test_deterministic_inference_gives_each_prompt_one_verify_count_at_every_load_and_for_both_tools(
    deterministic: Measured,
) -> None:
    """With batch-invariant kernels the server's output no longer depends on the batch: each prompt takes the same
    number of verify steps in all six runs of its configuration, so SGLang's records of both tools give one τ."""
    for config in {key[:3] for key in deterministic.run.cells}:
        counts: dict[str, set[int]] = defaultdict(set)
        for key, (theirs, ours) in deterministic.records.items():
            if key[:3] == config:
                for text, steps in verify_steps_per_prompt(theirs + ours).items():
                    counts[text].update(steps)
        assert len(counts) == 16 and all(len(steps) == 1 for steps in counts.values()), config
        taus = {tau(side) for key, sides in deterministic.records.items() if key[:3] == config for side in sides}
        assert len(taus) == 1, (config, taus)
