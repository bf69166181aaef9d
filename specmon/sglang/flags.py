"""SGLang's launch flags for one version: the shipped per-version tables, or an installed package's source.

    table = load_shipped("0.5.16")          # exact, else the nearest older shipped table (table.note says so)
    table.get("--speculative-num-draft-tokens").check_value("x")   # "invalid int value: 'x'"
    table.suggest("--num-speculative-tokens")                      # "--speculative-num-draft-tokens"
    read_installed(Path(".../site-packages/sglang"))               # the same, read from source

Pure data: no Textual, no sglang import. Loads are cached.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal

from specmon.sglang.source import FLAG_KEYS, SUPPRESS, SGLangSourceError, read_source, source_stamp

__all__ = [
    "FLAG_ALIASES",
    "ROUTER_FLAGS",
    "DATA_DIR",
    "Flag",
    "FlagTable",
    "SGLangSourceError",
    "load_shipped",
    "newest_shipped",
    "read_installed",
    "router_flag",
    "shipped_versions",
    "table_from_data",
    "version_key",
]

DATA_DIR = Path(__file__).with_name("data")
SHIPPED: Final = "shipped table"
SOURCE: Final = "package source"

# Flags that people guess (other servers' names) mapped to SGLang's. Not SGLang data: our own knowledge.
FLAG_ALIASES: dict[str, str] = {
    "--num-speculative-tokens": "--speculative-num-draft-tokens",
    "--speculative-model": "--speculative-draft-model-path",
    "--draft-model": "--speculative-draft-model-path",
    "--speculative-draft-model": "--speculative-draft-model-path",
    "--num-draft-tokens": "--speculative-num-draft-tokens",
    "--speculative-num-tokens": "--speculative-num-draft-tokens",
    "--num-speculative-steps": "--speculative-num-steps",
    "--speculative-topk": "--speculative-eagle-topk",
    "--gpu-memory-utilization": "--mem-fraction-static",
    "--max-model-len": "--context-length",
    "--max-num-seqs": "--max-running-requests",
    "--served-model": "--served-model-name",
    "--model": "--model-path",
}

# The flags of SGLang's router (`python -m sglang_router.launch_router`; `sglang_router.launch_server` takes them
# with a `--router-` prefix), which the server does not take. Not SGLang server data: sglang_router's RouterArgs.
ROUTER_FLAGS = frozenset(
    "--" + name for name in (
        "worker-urls", "policy", "prefill-policy", "decode-policy", "mini-lb", "pd-disaggregation", "prefill",
        "decode", "worker-startup-timeout-secs", "worker-startup-check-interval", "cache-threshold",
        "balance-abs-threshold", "balance-rel-threshold", "eviction-interval-secs", "max-tree-size",
        "max-payload-size", "dp-aware", "enable-igw", "service-discovery", "selector", "service-discovery-port",
        "service-discovery-namespace", "prefill-selector", "decode-selector", "bootstrap-port-annotation",
        "prometheus-port", "prometheus-host", "request-id-headers", "request-timeout-secs",
        "max-concurrent-requests", "queue-size", "queue-timeout-secs", "rate-limit-tokens-per-second",
        "cors-allowed-origins", "retry-max-retries", "retry-initial-backoff-ms", "retry-max-backoff-ms",
        "retry-backoff-multiplier", "retry-jitter-factor", "disable-retries", "cb-failure-threshold",
        "cb-success-threshold", "cb-timeout-duration-secs", "cb-window-duration-secs", "disable-circuit-breaker",
        "health-failure-threshold", "health-success-threshold", "health-check-timeout-secs",
        "health-check-interval-secs", "health-check-endpoint",
    )
)  # fmt: skip


def router_flag(option: str) -> bool:
    """Whether `option` is a flag of SGLang's router rather than of its server (`--router-policy`, `--policy`,
    `--worker-urls` ...)."""
    option = option.split("=", 1)[0]
    return option.startswith("--router-") or option in ROUTER_FLAGS


_NO_VALUE_ACTIONS = ("store_true", "store_false", "store_const", "append_const", "count", "BooleanOptionalAction")
_VERSION = re.compile(r"^v?(\d+(?:\.\d+)*)(?:[.-]?(a|b|rc)(\d+))?(?:[.-]?post(\d+))?(?:[.-]?dev(\d+))?\Z")


@functools.lru_cache(maxsize=1024)  # sorting a log's candidate versions asks again for the same few
def version_key(version: str) -> tuple:
    """A sort key for an SGLang version string (`0.4.6.post5` > `0.4.6` > `0.4.6rc1`)."""
    match = _VERSION.match(version.strip())
    if not match:
        raise SGLangSourceError(f"not a version: {version!r}")
    release, pre, pre_number, post, dev = match.groups()
    numbers = tuple(int(part) for part in release.split("."))
    numbers += (0,) * (4 - len(numbers))
    pre_rank = (0, int(pre_number)) if pre else (1, 0)
    dev_rank = (0, int(dev)) if dev else (1, 0)
    return numbers, pre_rank, int(post or -1), dev_rank


@dataclass(frozen=True)
class Flag:
    """One `add_argument` of SGLang's launch parser (the first option string is the one its usage shows)."""

    option_strings: tuple[str, ...]
    dest: str
    type: str | None = None  # "int", "float", "str", or a helper's name such as "human_readable_int"
    default: Any = None
    choices: tuple | None = None
    nargs: int | str | None = None
    action: str | None = None  # "store_true", "BooleanOptionalAction", or an SGLang Action class's name
    help: str | None = None
    metavar: str | None = None
    required: bool = False
    unresolved: tuple[str, ...] = ()  # keys the source did not give statically (their values are unknown)

    @property
    def option(self) -> str:
        """The option string SGLang's usage text shows."""
        return self.option_strings[0]

    @property
    def takes_value(self) -> bool:
        """Whether the flag is followed by a value (False for store_true and the like)."""
        return self.nargs != 0 and self.action not in _NO_VALUE_ACTIONS

    @property
    def hidden(self) -> bool:
        """Hidden from the usage text (help=argparse.SUPPRESS)."""
        return self.help == SUPPRESS

    @property
    def deprecated(self) -> bool:
        """Registered through one of SGLang's Deprecated* actions, or its help says so."""
        return (self.action or "").startswith("Deprecated") or "deprecated" in (self.help or "").lower()[:40]

    def check_value(self, text: str) -> str | None:
        """Why argparse would refuse `text` as this flag's value (int, float and choices), or None."""
        if not self.takes_value:
            return f"argument {self.option}: ignored explicit argument {text!r}"
        value: Any = text
        if self.type in ("int", "float"):
            try:
                value = int(text) if self.type == "int" else float(text)
            except ValueError:
                return f"argument {self.option}: invalid {self.type} value: {text!r}"
        if self.choices is not None and value not in self.choices:
            listed = ", ".join(repr(choice) for choice in self.choices)
            return f"argument {self.option}: invalid choice: {value!r} (choose from {listed})"
        return None

    @classmethod
    def from_data(cls, data: Any) -> Flag:
        """A Flag from its JSON object; raises SGLangSourceError when malformed."""
        if not isinstance(data, dict) or set(data) != set(FLAG_KEYS):
            raise SGLangSourceError(f"a flag entry must hold exactly {', '.join(FLAG_KEYS)}: {data!r:.200}")
        options = data["option_strings"]
        if not (isinstance(options, list) and options and all(isinstance(o, str) for o in options)):
            raise SGLangSourceError(f"bad option_strings: {options!r:.200}")
        for key in ("dest", "type", "action", "help", "metavar"):
            if data[key] is not None and not isinstance(data[key], str):
                raise SGLangSourceError(f"{options[0]}: {key} must be a string or null")
        if not isinstance(data["dest"], str):
            raise SGLangSourceError(f"{options[0]}: no dest")
        if data["choices"] is not None and not isinstance(data["choices"], list):
            raise SGLangSourceError(f"{options[0]}: choices must be a list or null")
        if data["nargs"] is not None and not isinstance(data["nargs"], int | str):
            raise SGLangSourceError(f"{options[0]}: bad nargs {data['nargs']!r}")
        if not isinstance(data["required"], bool) or not isinstance(data["unresolved"], list):
            raise SGLangSourceError(f"{options[0]}: bad required/unresolved")
        return cls(
            option_strings=tuple(options),
            dest=data["dest"],
            type=data["type"],
            default=data["default"],
            choices=tuple(data["choices"]) if data["choices"] is not None else None,
            nargs=data["nargs"],
            action=data["action"],
            help=data["help"],
            metavar=data["metavar"],
            required=data["required"],
            unresolved=tuple(data["unresolved"]),
        )


@dataclass(frozen=True)
class FlagTable:
    """The launch flags and `ServerArgs` defaults of one SGLang version."""

    version: str  # the version the data is for
    source: Literal["package source", "shipped table"]
    flags: tuple[Flag, ...]
    defaults: Mapping[str, Any]
    speculative_algorithms: tuple[str, ...] = ()
    generated_from: str = ""
    layout: str = ""
    requested_version: str | None = None  # what load_shipped was asked for, when that differs
    note: str | None = None  # why another version's table stands in
    _by_option: Mapping[str, Flag] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_option: dict[str, Flag] = {}
        for flag in self.flags:
            for option in flag.option_strings:
                by_option.setdefault(option, flag)
        object.__setattr__(self, "_by_option", MappingProxyType(by_option))

    @property
    def exact(self) -> bool:
        """Whether the table is for the very version asked for."""
        return self.requested_version is None or self.requested_version == self.version

    @property
    def options(self) -> tuple[str, ...]:
        """Every option string, aliases included, in parser order."""
        return tuple(self._by_option)

    def get(self, option: str) -> Flag | None:
        """The flag `option` (`--x` or `--x=value`, any of its option strings) names, or None."""
        return self._by_option.get(option.split("=", 1)[0])

    def __contains__(self, option: object) -> bool:
        return isinstance(option, str) and self.get(option) is not None

    def by_dest(self, dest: str) -> tuple[Flag, ...]:
        """Every flag that stores into `dest` (a field and its deprecated spellings)."""
        return tuple(flag for flag in self.flags if flag.dest == dest)

    def suggest(self, option: str) -> str | None:
        """The canonical option someone most likely meant by `option`, or None.

        None for a flag's own (first) option string; an alias gives its flag's option; a common mistake
        (FLAG_ALIASES) its target; anything else the closest option of this version, if close enough.
        """
        option = option.split("=", 1)[0]
        flag = self._by_option.get(option)
        if flag is not None and flag.option == option:
            return None
        for candidate in (option, "--" + option.lstrip("-").replace("_", "-").lower()):
            if candidate in FLAG_ALIASES and FLAG_ALIASES[candidate] in self._by_option:
                return self._by_option[FLAG_ALIASES[candidate]].option
            if candidate in self._by_option:
                return self._by_option[candidate].option
        close = difflib.get_close_matches(candidate, list(self._by_option), n=1, cutoff=0.75)
        return self._by_option[close[0]].option if close else None


def table_from_data(data: Any, source: Literal["package source", "shipped table"]) -> FlagTable:
    """A FlagTable from the JSON object `read_source` makes (and the shipped files hold)."""
    if not isinstance(data, dict):
        raise SGLangSourceError("a flag table must be a JSON object")
    missing = {"version", "generated_from", "flags", "defaults"} - set(data)
    if missing:
        raise SGLangSourceError(f"a flag table lacks {', '.join(sorted(missing))}")
    if not isinstance(data["version"], str) or not isinstance(data["flags"], list):
        raise SGLangSourceError("a flag table's version must be a string and its flags a list")
    if not isinstance(data["defaults"], dict):
        raise SGLangSourceError("a flag table's defaults must be an object")
    algorithms = data.get("speculative_algorithms", [])
    if not isinstance(algorithms, list) or not all(isinstance(a, str) for a in algorithms):
        raise SGLangSourceError("speculative_algorithms must be a list of strings")
    return FlagTable(
        version=data["version"],
        source=source,
        flags=tuple(Flag.from_data(item) for item in data["flags"]),
        defaults=MappingProxyType(dict(data["defaults"])),
        speculative_algorithms=tuple(algorithms),
        generated_from=str(data["generated_from"]),
        layout=str(data.get("layout", "")),
    )


def _shipped_files() -> dict[str, Path]:
    files = {}
    for path in DATA_DIR.glob("sglang-*.json"):
        files[path.stem.removeprefix("sglang-")] = path
    return files


def shipped_versions() -> tuple[str, ...]:
    """The SGLang versions with a shipped table, oldest first."""
    return tuple(sorted(_shipped_files(), key=version_key))


def newest_shipped() -> str:
    """The newest SGLang version with a shipped table."""
    versions = shipped_versions()
    if not versions:
        raise SGLangSourceError(f"no shipped flag tables in {DATA_DIR}")
    return versions[-1]


@functools.lru_cache(maxsize=16)
def _load_file(version: str) -> FlagTable:
    path = _shipped_files()[version]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise SGLangSourceError(f"cannot read {path.name}: {error}") from error
    table = table_from_data(data, SHIPPED)
    if table.version != version:
        raise SGLangSourceError(f"{path.name} holds version {table.version}")
    return table


@functools.lru_cache(maxsize=32)
def load_shipped(version: str | None = None) -> FlagTable:
    """The shipped table for `version` (default: the newest).

    Without an exact table, the nearest older shipped one stands in; a version older than every table gets
    the oldest. Either way `requested_version` and `note` say so.
    """
    versions = shipped_versions()
    if not versions:
        raise SGLangSourceError(f"no shipped flag tables in {DATA_DIR}")
    if version is None:
        return _load_file(versions[-1])
    if version in versions:
        return _load_file(version)
    key = version_key(version)
    older = [v for v in versions if version_key(v) <= key]
    if older:
        used = older[-1]
        note = f"no table for SGLang {version}; using the nearest older one, {used}"
    else:
        used = versions[0]
        note = f"SGLang {version} is older than every shipped table; using the oldest, {used}"
    table = _load_file(used)
    return _replace(table, requested_version=version, note=note)


def _replace(table: FlagTable, **changes: Any) -> FlagTable:
    fields = {name: getattr(table, name) for name in table.__dataclass_fields__ if name != "_by_option"}
    return FlagTable(**{**fields, **changes})


@functools.lru_cache(maxsize=8)
def _read_installed(path: str, stamp: float) -> FlagTable:
    return table_from_data(read_source(Path(path)), SOURCE)


def read_installed(package_dir: str | Path) -> FlagTable:
    """The table of the sglang package in `package_dir` (the folder holding `srt/server_args.py`), read
    from its source with `ast` (nothing is imported). Cached until server_args.py changes."""
    return _read_installed(*source_stamp(package_dir))
