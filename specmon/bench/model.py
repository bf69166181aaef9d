"""The benchmark's data: one request's figures, a run's progress and a run's result (no I/O, no Textual)."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class RequestResult:
    """The figures of one streamed /generate request, measured in the client.

    Times are seconds from `time.perf_counter` in the benchmark's own event loop; `chunk_gaps_ms[i]` is the
    gap before the token-bearing chunk i+1 (about one verify step) and `chunk_tokens[i]` the tokens it
    carried (from the cumulative `completion_tokens`, never from counting chunks).
    """

    index: int
    prompt_id: str
    warmup: bool = False
    ok: bool = False
    error: str | None = None
    ttft_s: float | None = None
    decode_tok_s: float | None = None
    e2e_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int = 0
    spec_verify_ct: int | None = None
    accept_length: float | None = None
    accept_histogram: list[int] | None = None
    """Verify steps by accepted drafts (``h[k]``: steps that accepted k), from the server's
    ``spec_accept_histogram`` when it gives one (SGLang 0.5.9+)."""
    finish_reason: str | None = None
    server_e2e_s: float | None = None
    chunk_gaps_ms: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    output_text: str = ""
    flags: list[str] = field(default_factory=list)

    def itl_ms(self) -> list[float]:
        """Per-token inter-token latency: each chunk gap spread evenly over the tokens it carried."""
        out: list[float] = []
        for gap, n in zip(self.chunk_gaps_ms, self.chunk_tokens, strict=False):
            if n > 0:
                out.extend([gap / n] * n)
        return out

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RequestResult:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class BenchProgress:
    """A coalesced snapshot of a running benchmark, delivered to `on_update` at most a few times a second.

    `phase` is one of "connecting", "warmup", "flushing", "measuring", "finished", "failed", "cancelled".
    `decode_tok_s` holds every measured request finished so far, in completion order.
    """

    run_id: str
    preset: str
    phase: str
    done: int = 0
    total: int = 0
    failed: int = 0
    warmup_done: int = 0
    warmup_total: int = 0
    in_flight: int = 0
    decode_tok_s: tuple[float, ...] = ()
    accept_length: float | None = None
    median_tok_s: float | None = None
    message: str = ""

    @property
    def finished(self) -> bool:
        return self.phase in ("finished", "failed", "cancelled")


@dataclass
class BenchResult:
    """A whole run: settings, the server's effective settings, every request and the summary.

    `requests` holds warmups too (marked `warmup=True`); the summary counts measured requests only.
    `status` is "running", "finished", "failed", "cancelled" or "incomplete" (read back without a summary).
    """

    run_id: str
    preset: str
    url: str
    started_at: float
    settings: dict[str, Any] = field(default_factory=dict)
    server: dict[str, Any] = field(default_factory=dict)
    requests: list[RequestResult] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    cross_checks: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    status: str = "running"
    finished_at: float | None = None
    skipped_records: list[dict[str, Any]] = field(default_factory=list)
    """Stored records the reader left out, each `{"path", "line", "reason"}` (results.read_run_file)."""

    @property
    def measured(self) -> list[RequestResult]:
        return [r for r in self.requests if not r.warmup]

    @property
    def flags(self) -> list[str]:
        return list(self.summary.get("flags", []))

    def to_json(self) -> dict[str, Any]:
        """The `specmon bench --json` shape (plus run metadata)."""
        return {
            "run_id": self.run_id,
            "preset": self.preset,
            "url": self.url,
            "status": self.status,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "settings": self.settings,
            "server": self.server,
            "requests": [r.to_json() for r in self.requests],
            "summary": self.summary,
            "cross_checks": self.cross_checks,
            "notes": self.notes,
            "gpus": self.gpus,
            "skipped_records": self.skipped_records,
        }


class OwnTokens:
    """specmon's own generated tokens in this process (every benchmark: warmups, sweeps, a switch's sanity run),
    so the Live view can leave them out of the server's traffic. Cumulative: `streamed` as they arrive (as the
    server's `realtime_tokens_total` counts them), `finished` when their request ends (as its
    `generation_tokens_total` counts them). Added to on benchmark threads, read from any."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.streamed = 0
        self.finished = 0

    def stream(self, tokens: int) -> None:
        with self._lock:
            self.streamed += tokens

    def finish(self, tokens: int) -> None:
        with self._lock:
            self.finished += tokens

    def now(self) -> tuple[int, int]:
        """(streamed, finished) so far."""
        with self._lock:
            return self.streamed, self.finished


OWN_TOKENS = OwnTokens()
"""This process's own generation: every BenchRun adds to it unless given another."""
