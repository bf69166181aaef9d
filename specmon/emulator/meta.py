"""The `meta_info` of the emulator's answers: what SGLang 0.5.16 (or 0.5.3, for the legacy family) says of a request
in each streamed chunk and in its final answer."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from specmon.emulator.scheduler import GenRequest


def meta_info(request: GenRequest, completion_tokens: int, *, family: str, speculative: bool, dp_groups: int,
              final: bool, first: bool = False) -> dict[str, Any]:
    """`meta_info` of a chunk (or of the final answer), with SGLang 0.5.16's keys (0.5.3's for legacy)."""
    if family == "legacy":
        meta: dict[str, Any] = {
            "id": request.rid,
            "finish_reason": request.finish_reason,
            "prompt_tokens": request.prompt_tokens,
            "completion_tokens": completion_tokens,
            "cached_tokens": request.cached_tokens,
            "weight_version": "default",
        }
        if final:
            meta["e2e_latency"] = (request.finished_ts or time.time()) - request.received_ts
            if speculative:
                meta["spec_verify_ct"] = request.verify_ct
        return meta
    meta = {
        "id": request.rid,
        "finish_reason": request.finish_reason,
        "prompt_tokens": request.prompt_tokens,
        "weight_version": "default",
        "num_retractions": 0,
        "queue_time": 0.0,
        "reasoning_tokens": 0,
        "completion_tokens": completion_tokens,
        "cached_tokens": request.cached_tokens,
        "cached_tokens_details": {"device": request.cached_tokens, "host": 0} if request.cached_tokens else None,
        "dp_rank": request.group if dp_groups > 1 else None,
    }
    now = time.time()
    if first and not final:
        meta["response_sent_to_client_ts"] = now
    if final:
        finished_ts = request.finished_ts or now
        e2e = finished_ts - request.received_ts
        meta["e2e_latency"] = e2e
        if request.verify_ct > 0:
            proposed = request.proposed_drafts
            meta.update(
                {
                    "spec_accept_rate": request.correct_drafts / proposed if proposed else 0.0,
                    "spec_accept_length": request.completion_tokens / request.verify_ct,
                    "spec_num_correct_drafts": request.correct_drafts,
                    "spec_num_proposed_drafts": proposed,
                    "spec_verify_ct": request.verify_ct,
                    "spec_accepted_drafts": request.correct_drafts,
                    "spec_proposed_drafts": proposed,
                    "spec_correct_drafts_histogram": list(request.accept_histogram),
                    "spec_accept_histogram": list(request.accept_histogram),
                }
            )
        decode_s = finished_ts - request.received_ts - (
            (request.first_token_at - request.received_at) if request.first_token_at else 0.0
        )
        meta.update(
            {
                "request_received_ts": request.received_ts,
                "api_server_dispatch_finish_ts": request.received_ts + 0.0005,
                "response_sent_to_client_ts": now,
                "request_finished_ts": finished_ts,
                "decode_throughput": (request.completion_tokens - 1) / decode_s if decode_s > 0 else 0.0,
            }
        )
    return meta
