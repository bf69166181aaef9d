"""A run's summary in the `specmon bench --json` shape: decode tok/s, acceptance, latencies, flags."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence

from specmon.bench.model import AcceptFigures, CategoryFigures, DecodeFigures, RequestResult, Spread, Summary
from specmon.bench.predict import position_profile
from specmon.bench.stats import ci95, percentile, relative_mad

UNSTABLE_REL_MAD = 0.10
NO_CATEGORY = "(none)"
"""The category of a prompt whose set gives none."""


def _token_weighted(pairs: Sequence[tuple[int, int]]) -> float:
    steps = sum(s for _, s in pairs)
    return sum(t for t, _ in pairs) / steps if steps else 0.0


def _accept_profile(requests: Sequence[RequestResult]) -> list[float] | None:
    """The share of verify steps that accepted at least i drafts (i = 1, 2, ...), from the server's per-request
    histograms; None when the server gives none."""
    histograms = [r.accept_histogram for r in requests if r.accept_histogram]
    profile = position_profile(histograms)
    return [round(share, 4) for share in profile] if profile else None


def by_category(requests: Sequence[RequestResult]) -> list[CategoryFigures]:
    """τ per prompt category over `requests` (measured and ok), token-weighted with a bootstrap CI over the
    requests as (tokens, steps) pairs, as the run's own τ; categories in the order they first appear."""
    groups: dict[str, list[RequestResult]] = {}
    for request in requests:
        groups.setdefault(request.category or NO_CATEGORY, []).append(request)
    out = []
    for category, members in groups.items():
        pairs = [(r.completion_tokens, r.spec_verify_ct or 0) for r in members if r.spec_verify_ct]
        steps = sum(s for _, s in pairs)
        out.append(CategoryFigures(
            category=category, requests=len(members), completion_tokens=sum(r.completion_tokens for r in members),
            spec_verify_ct=steps or None, token_weighted=_token_weighted(pairs) if steps else None,
            ci95=ci95(pairs, _token_weighted) if steps else None,
        ))
    return out


def _spread(values: Sequence[float]) -> Spread | None:
    if not values:
        return None
    return Spread(median=statistics.median(values), p90=percentile(values, 90))


def _error_key(error: str) -> str:
    return error.split(":", 1)[0] if len(error) > 80 else error


def summarize(
    requests: Sequence[RequestResult], max_new_tokens: int | None = None, ignore_eos: bool = True
) -> Summary:
    """The run summary of the measured (non-warmup) requests, in the `specmon bench --json` shape."""
    measured = [r for r in requests if not r.warmup]
    ok = [r for r in measured if r.ok]
    failed = [r for r in measured if not r.ok]
    tps = [r.decode_tok_s for r in ok if r.decode_tok_s]
    flags: list[str] = []
    details: dict[str, str] = {}

    decode: DecodeFigures | None = None
    if tps:
        rel_mad = relative_mad(tps)
        decode = DecodeFigures(
            median=statistics.median(tps),
            p10=percentile(tps, 10),
            p90=percentile(tps, 90),
            mean=statistics.fmean(tps),
            ci95=ci95(tps),
            rel_mad=rel_mad,
            n=len(tps),
        )
        if rel_mad > UNSTABLE_REL_MAD:
            flags.append("unstable")
            details["unstable"] = f"relative MAD of decode tok/s is {rel_mad:.0%} (> {UNSTABLE_REL_MAD:.0%})"

    with_spec = [r for r in ok if r.spec_verify_ct]
    accept = AcceptFigures()
    if with_spec:
        tokens = sum(r.completion_tokens for r in with_spec)
        steps = sum(r.spec_verify_ct or 0 for r in with_spec)
        pairs = [(r.completion_tokens, r.spec_verify_ct or 0) for r in with_spec]
        accept = AcceptFigures(
            token_weighted=tokens / steps,
            ci95=ci95(pairs, _token_weighted),
            median=statistics.median(r.completion_tokens / (r.spec_verify_ct or 1) for r in with_spec),
            completion_tokens=tokens,
            spec_verify_ct=steps,
            profile=_accept_profile(with_spec),
        )

    itl = [x for r in ok for x in r.itl_ms()]
    gaps = [g for r in ok for g in r.chunk_gaps_ms]
    chunk_tokens = [n for r in ok for n in r.chunk_tokens]

    degenerate = [r.index for r in ok if "repetition" in r.flags]
    if degenerate:
        flags.append("repetition")
        details["repetition"] = f"degenerate repetition in {len(degenerate)} output(s): requests {degenerate[:8]}"
    if ignore_eos and max_new_tokens:
        short = [r.index for r in ok if r.completion_tokens != (r.max_new_tokens or max_new_tokens)]
        if short:
            flags.append("length")
            details["length"] = (
                f"{len(short)} output(s) are not {max_new_tokens} tokens although ignore_eos is set"
                if not any(r.max_new_tokens for r in ok) else
                f"{len(short)} output(s) are not their prompt's max_new_tokens although ignore_eos is set"
            )
    if failed:
        flags.append("failed")
        details["failed"] = f"{len(failed)} of {len(measured)} measured requests failed"

    return Summary(
        decode_tok_s=decode,
        accept_length=accept,
        ttft_s=_spread([r.ttft_s for r in ok if r.ttft_s is not None]),
        itl_ms=_spread(itl),
        chunk_gap_ms=_spread(gaps),
        tokens_per_chunk=statistics.fmean(chunk_tokens) if chunk_tokens else None,
        e2e_s=_spread([r.e2e_s for r in ok if r.e2e_s is not None]),
        requests_ok=len(ok),
        requests_failed=len(failed),
        errors=dict(Counter(_error_key(r.error or "error") for r in failed)),
        flags=flags,
        flag_details=details,
        by_category=by_category(ok),
    )
