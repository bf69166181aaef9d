"""The speculative settings an SGLang server runs with, read from its /server_info, and how they differ from the
ones a preset asked for (SGLang may rewrite them: 16 draft tokens asked, 2 run with topk 1)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from specmon.plausible import MAX_DRAFT, MAX_REQUESTS, MAX_TOK_S, MAX_TOKENS, Absurd, Figures
from specmon.text import printable

_MAX_TEXT = 4096
"""The longest text of /server_info shown (a version, a model path)."""

_SPEC_KEYS = {
    "algorithm": "speculative_algorithm",
    "draft_model_path": "speculative_draft_model_path",
    "num_steps": "speculative_num_steps",
    "eagle_topk": "speculative_eagle_topk",
    "num_draft_tokens": "speculative_num_draft_tokens",
}


@dataclass(frozen=True)
class SettingDifference:
    """A speculative setting the server runs with a value other than the one asked for."""

    name: str
    requested: Any
    effective: Any

    def __str__(self) -> str:
        return f"{self.name}: {self.requested} asked, {self.effective} effective"


@dataclass(frozen=True)
class SpecSettings:
    """The speculative settings a server actually runs (read back from /server_info), plus its live figures."""

    algorithm: str | None
    draft_model_path: str | None
    num_steps: int | None
    eagle_topk: int | None
    num_draft_tokens: int | None
    avg_spec_accept_length: float | None
    last_gen_throughput: float | None
    version: str | None
    max_total_num_tokens: int | None
    model_path: str | None = None
    max_running_requests: int | None = None
    cuda_graph_max_bs: int | None = None
    """The largest decode batch captured as a CUDA graph (0: graphs disabled; None: the server did not say)."""
    absurd: tuple[str, ...] = ()
    """The figures that cannot be true (left out above, as None), each with its value and why."""

    @property
    def enabled(self) -> bool:
        return bool(self.algorithm)

    @property
    def topk1_rewrite_possible(self) -> bool:
        """topk 1 forces num_draft_tokens = num_steps + 1: whatever was asked, this is what runs."""
        return (
            self.enabled
            and self.eagle_topk == 1
            and self.num_steps is not None
            and self.num_draft_tokens == self.num_steps + 1
        )

    def requested_vs_effective(self, preset_args: Mapping[str, Any] | Sequence[str]) -> list[SettingDifference]:
        """Differences between the speculative flags a preset asked for and what the server runs.

        `preset_args` is either an argv list (`["--speculative-num-draft-tokens", "16", ...]`, `--flag=value`
        allowed) or a mapping of flag names (`speculative-num-draft-tokens`, `--speculative_...` or
        `speculative_num_draft_tokens`) to values. Flags the preset did not give are not compared.
        """
        requested = _requested_spec_values(preset_args)
        diffs = []
        for attr, key in _SPEC_KEYS.items():
            if key not in requested:
                continue
            asked, effective = requested[key], getattr(self, attr)
            if not _same_setting(asked, effective):
                diffs.append(SettingDifference(key, asked, effective))
        return diffs

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def spec_settings(server_info: Mapping[str, Any]) -> SpecSettings:
    """The effective speculative settings in a /server_info (or /get_server_info) answer, each figure checked
    against what can be true (an absurd one is None, and named in `absurd`)."""
    states = server_info.get("internal_states") or [{}]
    state0 = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}
    figures = Figures()

    def live(key: str, maximum: float) -> float | None:
        # Before SGLang PR #6201 (0.4.6.post5) these were top-level keys.
        return figures.amount(key, state0.get(key, server_info.get(key)), maximum=maximum)

    def count(key: str, maximum: int, minimum: int = 0, value: Any = None) -> int | None:
        return figures.count(key, server_info.get(key) if value is None else value, maximum=maximum,
                             minimum=minimum)

    def text(key: str) -> str | None:
        value = server_info.get(key)
        if value is None or isinstance(value, str) and len(value) <= _MAX_TEXT:
            return printable(value) if value else None  # shown in the app's header, the Live view, every command
        figures.absurd.append(Absurd(key, value, "not a short string"))
        return None

    num_steps = count("speculative_num_steps", MAX_DRAFT)
    draft_tokens = count("speculative_num_draft_tokens", MAX_DRAFT)
    # A verify step accepts at most its chain: num_steps + 1 tokens (the draft-token count bounds it too).
    longest = max((n for n in (draft_tokens, num_steps and num_steps + 1) if n), default=MAX_DRAFT)
    running = server_info.get("max_running_requests")
    if running is None:
        running = state0.get("max_running_requests", state0.get("effective_max_running_requests_per_dp"))
    return SpecSettings(
        algorithm=text("speculative_algorithm"),
        draft_model_path=text("speculative_draft_model_path"),
        num_steps=num_steps,
        eagle_topk=count("speculative_eagle_topk", MAX_DRAFT),
        num_draft_tokens=draft_tokens,
        avg_spec_accept_length=live("avg_spec_accept_length", longest),
        last_gen_throughput=live("last_gen_throughput", MAX_TOK_S),
        version=text("version"),
        max_total_num_tokens=count("max_total_num_tokens", MAX_TOKENS, 1),
        model_path=text("model_path"),
        max_running_requests=count("max_running_requests", MAX_REQUESTS, 1, running),
        cuda_graph_max_bs=_graph_max_bs(server_info, figures),
        absurd=tuple(str(item) for item in figures.absurd),
    )


def _graph_max_bs(server_info: Mapping[str, Any], figures: Figures) -> int | None:
    """The largest captured decode batch: 0.5.16+'s `cuda_graph_config.decode.bs`, else `cuda_graph_max_bs(_decode)`;
    0 with `disable_cuda_graph`."""
    if server_info.get("disable_cuda_graph") is True or server_info.get("disable_decode_cuda_graph") is True:
        return 0
    config = server_info.get("cuda_graph_config")
    decode = config.get("decode") if isinstance(config, Mapping) else None
    sizes = decode.get("bs") if isinstance(decode, Mapping) else None
    if isinstance(sizes, list) and sizes and all(isinstance(v, int) and not isinstance(v, bool) for v in sizes):
        return figures.count("cuda_graph_config.decode.bs", max(sizes), maximum=MAX_REQUESTS, minimum=1)
    for key in ("cuda_graph_max_bs_decode", "cuda_graph_max_bs"):
        if server_info.get(key) is not None:
            return figures.count(key, server_info.get(key), maximum=MAX_REQUESTS, minimum=1)
    return None


def _flag_key(name: str) -> str:
    return name.lstrip("-").replace("-", "_")


def _requested_spec_values(preset_args: Mapping[str, Any] | Sequence[str]) -> dict[str, Any]:
    wanted = set(_SPEC_KEYS.values()) | {"speculative_draft_model"}
    found: dict[str, Any] = {}
    if isinstance(preset_args, Mapping):
        for name, value in preset_args.items():
            if value is False or value is None:  # a preset's way of leaving the flag out
                continue
            found[_flag_key(str(name))] = value
    else:
        args = [str(a) for a in preset_args]
        for i, arg in enumerate(args):
            if not arg.startswith("--"):
                continue
            name, eq, value = arg.partition("=")
            if not eq:
                value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else ""
            found[_flag_key(name)] = value
    if "speculative_draft_model" in found:  # the 0.5.2+ alias
        found.setdefault("speculative_draft_model_path", found.pop("speculative_draft_model"))
    return {k: v for k, v in found.items() if k in wanted}


def _same_setting(asked: Any, effective: Any) -> bool:
    if asked is None or effective is None:
        return asked == effective
    if isinstance(effective, int):
        try:
            return int(asked) == effective
        except (TypeError, ValueError):
            return False
    return str(asked).upper() == str(effective).upper()
