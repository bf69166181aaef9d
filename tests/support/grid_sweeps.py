"""A finished grid sweep stored as `specmon sweep BASE --steps ... --concurrency ...` stores one (its plan file
and a benchmark run per cell), its figures the emulator's own speed model: the known truth a curve read back from
the store is checked against, without starting a server."""

from __future__ import annotations

from pathlib import Path

from specmon.bench.model import BenchResult, RequestResult, RunSettings, ServerFacts, Speculative
from specmon.bench.results import ResultStore
from specmon.bench.summary import summarize
from specmon.emulator.speed_model import SpecShape, SpeedModel
from specmon.sweep.plan import GridPlan, SweepCell, SweepPlan, SweepStep, SweepStore

ACCEPT_PROB = 0.75  # the emulator's default
MODEL = "/models/demo-target"
REQUESTS = 8
JITTER = (0.98, 1.0, 1.02, 0.99, 1.01, 1.0, 0.985, 1.015)
"""Per-prompt spread of the measured tok/s around the speed model's (a CI of about ±1%)."""


def truth(config: tuple[int, int, int], concurrency: int) -> float:
    """The emulator's own speedup of a configuration over no speculation at a batch of `concurrency`."""
    spec = SpeedModel(SpecShape(*config), ACCEPT_PROB).expected_tokens_per_s(concurrency)
    return spec / SpeedModel(SpecShape(), ACCEPT_PROB).expected_tokens_per_s(concurrency)


def _run(results: ResultStore, run_id: str, config: tuple[int, int, int], concurrency: int, model: str,
         finished_at: float, scale: float) -> BenchResult:
    steps, topk, draft = config
    speculative = Speculative(algorithm="EAGLE3", num_steps=steps, eagle_topk=topk, num_draft_tokens=draft) if steps \
        else Speculative()
    run = BenchResult(
        run_id=run_id, preset="grid-base", url="http://127.0.0.1:30000", started_at=finished_at - 30,
        settings=RunSettings(prompts="prompts.jsonl", requests=REQUESTS, max_new_tokens=64, temperature=0.0,
                             warmup=0, concurrency=concurrency, ignore_eos=True),
        server=ServerFacts(version="0.5.16", model_path=model, tp_size=1, speculative=speculative),
    )  # fmt: skip
    results.start_run(run)
    tok_s = SpeedModel(SpecShape(*config), ACCEPT_PROB).expected_tokens_per_s(concurrency) * scale
    for index in range(REQUESTS):
        rate = tok_s * JITTER[index]
        request = RequestResult(index=index, prompt_id=f"p{index}", ok=True, ttft_s=0.05, decode_tok_s=rate,
                                e2e_s=64 / rate, prompt_tokens=100, completion_tokens=64, finish_reason="length",
                                output_text=f"output {index}")
        run.requests.append(request)
        results.add_request(run.run_id, request)
    run.summary = summarize(run.requests, 64, True)
    run.status, run.finished_at = "finished", finished_at
    results.finish_run(run)
    return run


def write_grid_sweep(root: Path, run_id: str, configs: list[tuple[int, int, int]], concurrency: list[int], *,
                     model: str = MODEL, finished_at: float = 1_796_000_000.0, scale: float = 1.0) -> SweepPlan:
    """A finished grid sweep in `root/sweeps` with its runs in `root/results`: the baseline (first and last) and
    each configuration measured at every concurrency, at the speed model's tok/s (times `scale`)."""
    results, store = ResultStore(root / "results"), SweepStore(root / "sweeps")

    def step(config: tuple[int, int, int], baseline: bool, tag: str) -> SweepStep:
        cells = [SweepCell(c, "measured", _run(results, f"{run_id}-{tag}-c{c}", config, c, model, finished_at,
                                                scale).run_id) for c in concurrency]
        return SweepStep(f"grid-base@s{config[0]}k{config[1]}d{config[2]}", baseline, None if baseline else config[2],
                         state="measured", grid_config=list(config), cells=cells)

    steps = [step((0, 1, 1), True, "base0"), *(step(c, False, "s{}k{}d{}".format(*c)) for c in configs),
             step((0, 1, 1), True, "base1")]
    grid = GridPlan("grid-base", sorted({c[0] for c in configs}), sorted({c[1] for c in configs}),
                    sorted({c[2] for c in configs}), concurrency, sglang="0.5.16")
    plan = SweepPlan(run_id=run_id, steps=steps, finished=True, grid=grid, created_at=finished_at - 600)
    store.save(plan)
    return plan
