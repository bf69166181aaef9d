"""Chain drafting as SGLang runs it (topk 1), over a known agreement sequence: the truth a prediction is checked
against, and stored runs shaped like the real trained pair's (24 requests, 8 prompts over 320 tokens)."""

from __future__ import annotations

import random
from pathlib import Path

from specmon.bench.model import BenchResult, RequestResult, RunSettings, ServerFacts, Speculative
from specmon.bench.results import ResultStore
from specmon.bench.summary import summarize


def bursty_agreement(rng: random.Random, length: int, enter: float, stay: float) -> list[bool]:
    """Where a draft agrees with the target, position by position: runs of agreement (a two-state chain:
    `enter` the chance to start agreeing, `stay` to go on), as a distilled draft's are."""
    out, agreeing = [], False
    for _ in range(length):
        agreeing = rng.random() < (stay if agreeing else enter)
        out.append(agreeing)
    return out


def run_chain(agree: list[bool], draft_tokens: int, max_new_tokens: int) -> tuple[list[int], list[int]]:
    """SGLang's verify steps over `agree` after the prefill's token: each accepts the run of agreement ahead, up
    to N - 1 drafts, plus the bonus token. Returns the streamed tokens per step (cut at max_new_tokens) and
    SGLang's histogram, which counts the drafts a step accepted past max_new_tokens too."""
    chunks: list[int] = []
    histogram = [0] * draft_tokens
    position, produced = 0, 1
    while produced < max_new_tokens:
        accepted = 0
        while accepted < draft_tokens - 1 and agree[position + accepted]:
            accepted += 1
        histogram[accepted] += 1
        tokens = min(accepted + 1, max_new_tokens - produced)
        chunks.append(tokens)
        produced += tokens
        position += accepted + 1
    return chunks, histogram


def measured_accept(agreements: list[list[bool]], draft_tokens: int, max_new_tokens: int) -> float:
    """SGLang's token-weighted acceptance length (Σ completion_tokens / Σ spec_verify_ct) over the requests."""
    steps = sum(len(run_chain(a, draft_tokens, max_new_tokens)[0]) for a in agreements)
    return len(agreements) * max_new_tokens / steps


def trained_like_agreements(requests: int = 24, seed: int = 21, max_new_tokens: int = 256) -> list[list[bool]]:
    """Agreement sequences like the trained pair's: mostly short runs, a few prompts far better (memorised
    text), one that agrees nearly always."""
    rng = random.Random(seed)
    out = []
    for index in range(requests):
        enter, stay = (0.35, 0.55) if index % 6 else (0.6, 0.9)
        if index == 7:
            enter, stay = 0.95, 0.97
        out.append(bursty_agreement(rng, max_new_tokens + 64, enter, stay))
    return out


PROMPT_TOKENS = [408, 212, 377, 290, 1150, 256, 301, 512, 288, 199, 340, 275,
                 266, 930, 310, 240, 298, 355, 280, 700, 230, 305, 260, 296]  # fmt: skip
"""24 prompts, 8 of them over 320 tokens (the real run's shape)."""


def write_chain_run(
    directory: Path,
    agreements: list[list[bool]],
    draft_tokens: int,
    *,
    max_new_tokens: int = 256,
    context_length: int | None = None,
    prompt_tokens: list[int] | None = None,
    preset: str = "trained-standalone",
    run_id: str | None = None,
) -> BenchResult:
    """A finished run stored as `specmon bench` stores one: per request its streamed steps, SGLang's histogram
    and counts, as a STANDALONE server with `draft_tokens` (topk 1) answers them."""
    prompts = prompt_tokens or PROMPT_TOKENS
    run = BenchResult(
        run_id=run_id or f"20261203-0000{draft_tokens:02d}-{preset[:4]}", preset=preset, url="http://127.0.0.1:30000",
        started_at=1_796_000_000.0 + draft_tokens,
        settings=RunSettings(prompts="prompts.jsonl", requests=len(agreements), max_new_tokens=max_new_tokens,
                             temperature=0.0, warmup=0, concurrency=1, ignore_eos=True),
        server=ServerFacts(version="0.5.16", model_path="/tmp/trained/target", tp_size=1,
                           speculative=Speculative(algorithm="STANDALONE", draft_model_path="/tmp/trained/draft",
                                                   num_steps=draft_tokens - 1, eagle_topk=1,
                                                   num_draft_tokens=draft_tokens)),
    )  # fmt: skip
    if context_length is not None:
        run.server.context_length = context_length
    store = ResultStore(directory)
    store.start_run(run)
    for index, agree in enumerate(agreements):
        chunks, histogram = run_chain(agree, draft_tokens, max_new_tokens)
        step_ms = 4.0 + 0.2 * draft_tokens
        request = RequestResult(
            index=index, prompt_id=f"p{index:02d}", ok=True, ttft_s=0.02 + prompts[index] * 1e-5,
            decode_tok_s=(max_new_tokens - 1) / (len(chunks) * step_ms / 1000), e2e_s=len(chunks) * step_ms / 1000,
            prompt_tokens=prompts[index % len(prompts)], completion_tokens=max_new_tokens,
            spec_verify_ct=len(chunks), accept_length=max_new_tokens / len(chunks), accept_histogram=histogram,
            finish_reason="length", chunk_gaps_ms=[step_ms] * len(chunks), chunk_tokens=chunks,
            output_text=f"output {index}",
        )  # fmt: skip
        run.requests.append(request)
        store.add_request(run.run_id, request)
    run.summary = summarize(run.requests, max_new_tokens, True)
    run.status, run.finished_at = "finished", run.started_at + 60
    store.finish_run(run)
    return run
