"""The benchmark's data: one request's figures, a run's settings, server and summary as typed Structs, its progress
and its result (no I/O, no Textual)."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field, fields
from typing import Annotated, Any

import msgspec
from msgspec import UNSET, UnsetType

from specmon.bench.prompts import DEFAULT_PROMPTS

MAX_STORED_TOKENS = 10_000_000
"""A sane cap on any token count (the longest contexts served are 10M tokens)."""
MAX_FIGURE = 1e12
Figure = Annotated[int, msgspec.Meta(ge=-int(MAX_FIGURE), le=int(MAX_FIGURE))] | Annotated[
    float, msgspec.Meta(ge=-MAX_FIGURE, le=MAX_FIGURE)]
"""A stored figure: a finite number within ±1e12 (an int stays an int, as it was written)."""
TokenCount = Annotated[int, msgspec.Meta(gt=0, le=MAX_STORED_TOKENS, description="a token count")]


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
    category: str = ""
    """The prompt's category (its file's `category`; a sample from production: its traffic class)."""
    max_new_tokens: int | None = None
    """The request's own token limit where its prompt set gives one (a sample from production), else None."""
    prompt_hash: str = ""
    """A short hash of the prompt's text or token ids (not stored themselves: see `prompt_text`, `prompt_ids`)."""
    prompt_text: str | None = None
    """The prompt's text, stored only when asked for (`bench --keep-prompts`)."""
    prompt_ids: list[int] | None = None
    """The prompt's token ids where it was sent as ids, stored only when asked for (`bench --keep-prompts`)."""

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


class RunSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What one run does (built from a preset's `BenchSettings`, or anything with the same attributes), and as
    stored: with the prompt set's hash and size once the prompts are loaded."""

    prompts: str = DEFAULT_PROMPTS
    requests: int = 20
    max_new_tokens: TokenCount = 256
    temperature: float = 0.0
    warmup: int = 2
    concurrency: int = 1
    ignore_eos: bool = True
    prompt_set_hash: str | UnsetType = UNSET
    prompt_count: int | UnsetType = UNSET

    @classmethod
    def of(cls, settings: Any) -> RunSettings:
        """RunSettings from a BenchSettings-like object or a dict; missing fields keep their defaults."""
        if isinstance(settings, cls):
            return settings
        if settings is None:
            return cls()
        get = settings.get if isinstance(settings, dict) else lambda k, d: getattr(settings, k, d)
        defaults = cls()
        values = {name: get(name, getattr(defaults, name)) for name in cls.__struct_fields__}
        values = {k: (getattr(defaults, k) if v is None else v) for k, v in values.items()}
        return cls(**values)

    def with_prompts(self, prompt_set_hash: str, prompt_count: int) -> RunSettings:
        return msgspec.structs.replace(self, prompt_set_hash=prompt_set_hash, prompt_count=prompt_count)

    def to_json(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)


class Speculative(msgspec.Struct, kw_only=True):
    """The server's effective speculative settings, as stored with a run (None: the server did not say)."""

    algorithm: str | None = None
    draft_model_path: str | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None


class ServerFacts(msgspec.Struct, kw_only=True):
    """What is stored about the benchmarked server: its version, model and effective speculative settings."""

    version: str | None = None
    model_path: str | None = None
    served_model_name: str | None = None
    tp_size: int | None = None
    context_length: int | None | UnsetType = UNSET
    """Absent in runs stored before specmon read it."""
    speculative: Speculative = msgspec.field(default_factory=Speculative)
    avg_spec_accept_length_at_start: Figure | None = None
    max_running_requests: int | None | UnsetType = UNSET
    cuda_graph_max_bs: int | None | UnsetType = UNSET
    """The largest decode batch captured as a CUDA graph (0: none). Both absent in runs stored before."""


class Spread(msgspec.Struct, kw_only=True):
    """The median and 90th percentile of one figure over a run's measured requests."""

    median: Figure
    p90: Figure


class DecodeFigures(msgspec.Struct, kw_only=True):
    """Decode tok/s over a run's measured requests: spread, bootstrap CI, relative MAD and count."""

    median: Figure
    p10: Figure | None = None
    p90: Figure | None = None
    mean: Figure | None = None
    ci95: list[Figure | None] | None = None
    rel_mad: Figure | None = None
    n: int | None = None


class AcceptFigures(msgspec.Struct, kw_only=True):
    """The client's acceptance length: token-weighted (tokens / verify steps) with its CI, the per-request
    median, the totals and the share of steps accepting at least i drafts. Without speculation only the two
    first (None) are stored."""

    token_weighted: Figure | None = None
    ci95: list[Figure | None] | None | UnsetType = UNSET
    median: Figure | None = None
    completion_tokens: int | UnsetType = UNSET
    spec_verify_ct: int | UnsetType = UNSET
    profile: list[Figure] | None | UnsetType = UNSET


class CategoryFigures(msgspec.Struct, kw_only=True):
    """The acceptance of one prompt category over a run's measured requests: token-weighted τ with its bootstrap
    CI (None below MIN_CI_SAMPLES requests or without speculation) and its totals."""

    category: str
    requests: int
    completion_tokens: int
    spec_verify_ct: int | None = None
    token_weighted: Figure | None = None
    ci95: list[Figure | None] | None = None


class ProductionCheck(msgspec.Struct, kw_only=True):
    """A benchmark's τ against production's (SGLang's request records of the same configuration): each with its
    CI, the categories' shares of each (specmon.traffic.categories) and whether the gap is beyond both CIs."""

    records: str
    """Where production's records were read (a path)."""
    requests: int
    benchmark_tau: Figure
    benchmark_ci95: list[Figure | None] | None = None
    production_tau: Figure
    production_ci95: list[Figure | None] | None = None
    relative_gap: Figure
    """(benchmark − production) / production: positive when the benchmark overstates acceptance."""
    benchmark_shares: dict[str, Figure] = msgspec.field(default_factory=dict)
    production_shares: dict[str, Figure] = msgspec.field(default_factory=dict)
    beyond_ci: bool = False
    text: str = ""
    """The one-line verdict, as shown."""
    categories: str = ""
    """What named the categories of both sides' shares: "heuristic" or "your rules (PATH)" (empty: stored before)."""
    configuration: str = ""
    """Whether the records come from the configuration benchmarked: "same" (they hold the run's own requests),
    "differs" (a production step accepted more drafts than its server drafts) or "unknown" (empty: stored before)."""
    configuration_note: str = ""


class Summary(msgspec.Struct, kw_only=True):
    """A run's summary over its measured requests, in the `specmon bench --json` shape (bench/summary.py)."""

    decode_tok_s: DecodeFigures | None = None
    accept_length: AcceptFigures = msgspec.field(default_factory=AcceptFigures)
    ttft_s: Spread | None = None
    itl_ms: Spread | None = None
    chunk_gap_ms: Spread | None = None
    tokens_per_chunk: Figure | None = None
    e2e_s: Spread | None = None
    requests_ok: int = 0
    requests_failed: int = 0
    errors: dict[str, int] = msgspec.field(default_factory=dict)
    flags: list[str] = msgspec.field(default_factory=list)
    flag_details: dict[str, str] = msgspec.field(default_factory=dict)
    by_category: list[CategoryFigures] | UnsetType = UNSET
    """τ per prompt category (absent in runs stored before specmon measured it)."""
    production: ProductionCheck | None | UnsetType = UNSET
    """The run against production's records, when some were given (absent: not checked)."""

    @property
    def median_tok_s(self) -> float | None:
        """The median decode tok/s, None when no request measured one."""
        return self.decode_tok_s.median if self.decode_tok_s is not None else None

    @property
    def tok_s_ci95(self) -> list[Figure | None] | None:
        return self.decode_tok_s.ci95 if self.decode_tok_s is not None else None

    def flag(self, code: str, detail: str) -> None:
        self.flags.append(code)
        self.flag_details[code] = detail

    def to_json(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)


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
    settings: RunSettings = field(default_factory=RunSettings)
    server: ServerFacts = field(default_factory=ServerFacts)
    requests: list[RequestResult] = field(default_factory=list)
    summary: Summary = field(default_factory=Summary)
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
        return list(self.summary.flags)

    def to_json(self) -> dict[str, Any]:
        """The `specmon bench --json` shape (plus run metadata)."""
        return {
            "run_id": self.run_id,
            "preset": self.preset,
            "url": self.url,
            "status": self.status,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "settings": self.settings.to_json(),
            "server": msgspec.to_builtins(self.server),
            "requests": [r.to_json() for r in self.requests],
            "summary": self.summary.to_json(),
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
