"""Startup state of an SGLang server as read from its log, and the events the tracker emits.

Pure data: no I/O, no Textual. Timestamps are the log's own (naive ``datetime``), never the clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

LineKind = Literal["phase", "error", "warning"]
ServerState = Literal["starting", "ready", "failed", "stopped"]
StepStatus = Literal["running", "done", "failed"]

PHASE_NAMES = (
    "server_args",
    "init_distributed",
    "load_weights",
    "load_draft_weights",
    "kv_cache",
    "attention_backend",  # an error in the attention backend's setup (its workspaces), before any capture
    "capture",
    "capture_draft",
    "capture_draft_extend",
    "capture_prefill",
    "http_server",
    "warmup",
    "ready",
    "serving",  # entered by nodes that serve without a ready line (a worker node), or by an error while serving
    "shutdown",
)
GRAPH_KINDS = ("target", "draft", "draft_extend", "prefill")
# Most specific first: a more specific cause replaces a less specific one already reported.
ERROR_KINDS = (
    "unrecognized_arguments",
    "invalid_server_args",
    "port_in_use",
    "cuda_oom",
    "not_enough_memory",
    "cuda_error",
    "weight_load",
    "capture_failed",
    "warmup_failed",
    "exception",
    "killed",
)


CLOCK_ONLY_YEAR = 1900
"""The year of a time read from a clock-only prefix (`[12:29:04]`): the log never said the date."""


def _iso(ts: datetime | None) -> str | None:
    """ISO text of a log time; a time from a clock-only log as the clock alone (`12:29:04`), never dated 1900."""
    if ts is None:
        return None
    return ts.time().isoformat() if ts.year == CLOCK_ONLY_YEAR else ts.isoformat()


def _round(value: float | None, digits: int = 3) -> float | None:
    return round(value, digits) if value is not None else None


@dataclass
class Phase:
    """One startup phase: when it began and ended (log time) and how it finished."""

    name: str
    status: StepStatus = "running"
    started: datetime | None = None
    ended: datetime | None = None
    elapsed_s: float | None = None

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "status": self.status,
            "started": _iso(self.started),
            "ended": _iso(self.ended),
            "elapsed_s": _round(self.elapsed_s),
        }


@dataclass
class Capture:
    """One CUDA-graph capture (one per graph; rank 0's or the one furthest along).

    ``graph`` is the JSON kind (target, draft, draft_extend, prefill); ``role`` says whose graph it is
    (target or draft) and ``label`` is the log's own name for it (e.g. "target verify", "draft prefill").
    """

    graph: str
    status: StepStatus = "running"
    done: int = 0
    total: int | None = None
    batch_sizes: list[int] = field(default_factory=list)
    elapsed_s: float | None = None
    current_bs: int | None = None
    avail_gb: float | None = None
    started: datetime | None = None
    ended: datetime | None = None
    eta_s: float | None = None
    role: str = "target"
    label: str = ""
    mem_usage_gb: float | None = None
    rank: int | None = None
    awaiting_end: bool = False
    """Its begin line was seen and its end line (with SGLang's own elapsed time) not yet."""

    @property
    def fraction(self) -> float | None:
        """Progress in [0, 1], or None when the total is unknown."""
        if not self.total:
            return None
        return min(1.0, self.done / self.total)

    def to_json(self) -> dict:
        return {
            "graph": self.graph,
            "status": self.status,
            "done": self.done,
            "total": self.total,
            "batch_sizes": list(self.batch_sizes),
            "elapsed_s": _round(self.elapsed_s),
            "role": self.role,
            "label": self.label,
            "current_bs": self.current_bs,
            "avail_gb": self.avail_gb,
            "mem_usage_gb": self.mem_usage_gb,
            "started": _iso(self.started),
            "ended": _iso(self.ended),
            "eta_s": _round(self.eta_s, 1),
        }


@dataclass
class WeightLoad:
    """Loading one model's weights: the target's or the draft's."""

    model: str  # "target" | "draft"
    type: str | None = None  # the model class, e.g. "Qwen3ForCausalLM", "LlamaForCausalLMEagle3"
    dtype: str | None = None
    mem_usage_gb: float | None = None
    avail_gb: float | None = None
    elapsed_s: float | None = None
    shards_done: int | None = None
    shards_total: int | None = None
    status: StepStatus = "running"
    started: datetime | None = None
    ended: datetime | None = None

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "type": self.type,
            "mem_usage_gb": self.mem_usage_gb,
            "avail_gb": self.avail_gb,
            "elapsed_s": _round(self.elapsed_s),
            "dtype": self.dtype,
            "shards_done": self.shards_done,
            "shards_total": self.shards_total,
            "status": self.status,
        }


@dataclass
class KvPool:
    """A KV-cache pool allocation (target or draft): token count and sizes."""

    model: str = "target"  # "target" | "draft"
    tokens: int | None = None
    k_size_gb: float | None = None
    v_size_gb: float | None = None
    kv_size_gb: float | None = None  # MLA pools print one combined size instead of K and V
    dtype: str | None = None
    at: datetime | None = None

    @property
    def total_gb(self) -> float | None:
        """The pool's whole size: K + V, or the combined MLA size."""
        if self.kv_size_gb is not None:
            return self.kv_size_gb
        if self.k_size_gb is None or self.v_size_gb is None:
            return None
        return self.k_size_gb + self.v_size_gb

    def to_json(self) -> dict:
        return {
            "model": self.model,
            "tokens": self.tokens,
            "k_size_gb": self.k_size_gb,
            "v_size_gb": self.v_size_gb,
            "kv_size_gb": self.kv_size_gb,
            "dtype": self.dtype,
            "at": _iso(self.at),
        }


@dataclass
class MemoryStep:
    """Available GPU memory reported after a startup step (e.g. "load_weights", "kv_cache", "capture")."""

    step: str
    avail_gb: float
    at: datetime | None = None

    def to_json(self) -> dict:
        return {"step": self.step, "avail_gb": self.avail_gb, "at": _iso(self.at)}


@dataclass
class StartupError:
    """A classified fatal startup error: kind, its first meaningful line, the phase, and what to do."""

    kind: str
    message: str
    phase: str | None = None
    hint: str | None = None
    at: datetime | None = None

    def to_json(self) -> dict:
        return {"kind": self.kind, "message": self.message, "phase": self.phase, "hint": self.hint}


MAX_EARLIER_LAUNCHES = 16  # the earlier launches a state keeps (it counts them all)


@dataclass
class EarlierLaunch:
    """A launch that a log held before the one its state describes (a restarted server appending to its log): how
    it ended (``state``: "failed", "stopped", or "ready" / "starting" when the log shows no end), when it began,
    its time to ready and its error."""

    state: ServerState
    launched_at: datetime | None = None
    ready_after_s: float | None = None
    error: StartupError | None = None

    def to_json(self) -> dict:
        return {
            "state": self.state,
            "launched_at": _iso(self.launched_at),
            "ready_after_s": _round(self.ready_after_s),
            "error": self.error.to_json() if self.error is not None else None,
        }


@dataclass
class StartupState:
    """Everything known about a server's startup so far. ``to_json()`` is the `log-summary --json` shape."""

    state: ServerState = "starting"
    phases: list[Phase] = field(default_factory=list)
    captures: list[Capture] = field(default_factory=list)
    weights: list[WeightLoad] = field(default_factory=list)
    kv_pools: list[KvPool] = field(default_factory=list)
    memory: list[MemoryStep] = field(default_factory=list)
    max_total_num_tokens: int | None = None
    first_ts: datetime | None = None
    launched_at: datetime | None = None  # the server_args line
    last_ts: datetime | None = None
    ready_at: datetime | None = None
    ready_after_s: float | None = None  # from the first timestamp in the log to the ready line
    ready_after_server_args_s: float | None = None  # from the server_args line (else the first timestamp)
    error: StartupError | None = None
    stopped_at: datetime | None = None
    stop_cause: str | None = None  # "shutdown" (SGLang logged one) or "died" (the log just ends with its death)
    log_family: str | None = None  # "legacy" (0.4.x-0.5.9) or "new" (0.5.16+), when recognisable
    speculative_algorithm: str | None = None  # from the server_args line, e.g. "EAGLE3"
    mem_fraction_static: float | None = None  # from the server_args line
    sglang_timings: dict[str, float] = field(default_factory=dict)
    """SGLang's own startup durations (0.5.17+'s `Engine startup timings` line), e.g. {"load_weight": 41.2}."""
    weights_committed_s: float | None = None
    """0.5.18+'s overlapped load: how long committing the target's real weights took after the graph capture."""
    sglang_versions: str | None = None
    """The SGLang versions whose lines the log's milestones fit, e.g. "0.5.21-0.5.23" (None: not narrowed)."""
    lines_seen: int = 0
    lines_recognized: int = 0  # lines recognised as SGLang's (prefix, milestone, its bars or errors); 0: not SGLang
    earlier_launches: int = 0
    """Launches the log held before this one (each began with its own `server_args` line); lines_seen and
    lines_recognized count the whole log's lines."""
    earlier_failed: int = 0
    """How many of them failed."""
    earlier: list[EarlierLaunch] = field(default_factory=list)
    """The last ``MAX_EARLIER_LAUNCHES`` of them, oldest first."""

    @property
    def current_phase(self) -> Phase | None:
        """The latest phase entered, if any."""
        return self.phases[-1] if self.phases else None

    def phase(self, name: str) -> Phase | None:
        for phase in self.phases:
            if phase.name == name:
                return phase
        return None

    def capture(self, graph: str, role: str | None = None) -> Capture | None:
        for capture in self.captures:
            if capture.graph == graph and (role is None or capture.role == role):
                return capture
        return None

    def weight(self, model: str) -> WeightLoad | None:
        for weight in self.weights:
            if weight.model == model:
                return weight
        return None

    def to_json(self) -> dict:
        return {
            "state": self.state,
            "phases": [p.to_json() for p in self.phases],
            "captures": [c.to_json() for c in self.captures],
            "weights": [w.to_json() for w in self.weights],
            "max_total_num_tokens": self.max_total_num_tokens,
            "ready_after_s": _round(self.ready_after_s),
            "ready_after_server_args_s": _round(self.ready_after_server_args_s),
            "error": self.error.to_json() if self.error is not None else None,
            "kv_pools": [k.to_json() for k in self.kv_pools],
            "memory": [m.to_json() for m in self.memory],
            "first_ts": _iso(self.first_ts),
            "launched_at": _iso(self.launched_at),
            "last_ts": _iso(self.last_ts),
            "ready_at": _iso(self.ready_at),
            "stopped_at": _iso(self.stopped_at),
            "stop_cause": self.stop_cause,
            "lines_seen": self.lines_seen,
            "lines_recognized": self.lines_recognized,
            "log_family": self.log_family,
            "speculative_algorithm": self.speculative_algorithm,
            "sglang_timings": self.sglang_timings or None,
            "weights_committed_s": self.weights_committed_s,
            "sglang_versions": self.sglang_versions,
            "earlier_launches": {
                "count": self.earlier_launches,
                "failed": self.earlier_failed,
                "last": [launch.to_json() for launch in self.earlier],
            },
        }


# Events (past tense). They carry copies, so a consumer may keep them.


@dataclass(frozen=True)
class PhaseChanged:
    """A phase began, ended or failed (see ``phase.status``); ``previous`` names the phase a new one follows."""

    phase: Phase
    previous: str | None = None


@dataclass(frozen=True)
class CaptureProgressed:
    """A graph capture began, advanced (tqdm frame), finished or failed."""

    capture: Capture


@dataclass(frozen=True)
class WeightsProgressed:
    """A weight load began, advanced (shard progress) or finished."""

    weights: WeightLoad


@dataclass(frozen=True)
class ServerBecameReady:
    """The server printed its ready line."""

    at: datetime | None
    after_s: float | None


@dataclass(frozen=True)
class StartupFailed:
    """A fatal error was classified (sent again if a more specific cause replaces it)."""

    error: StartupError


@dataclass(frozen=True)
class ServerStopped:
    """The server shut down after it was ready (SIGTERM): not a failure."""

    at: datetime | None


TrackerEvent = (
    PhaseChanged | CaptureProgressed | WeightsProgressed | ServerBecameReady | StartupFailed | ServerStopped
)
