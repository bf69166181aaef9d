"""A preset file's schema, its one declaration: a msgspec Struct per TOML table (`PresetFile`, `ServerTable`,
`BenchSettings`), checked strictly by `specmon.typed.convert`, each fault a `FieldError` naming its key (its line
found by `key_line`). What a type cannot say is checked in `ServerTable.__post_init__`: flag names, the port, and
that no secret goes on a command line. Outside names and values are quoted cut (`text.quoted`); NaN and infinity
are no setting."""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec
from msgspec import Meta

from specmon.redact import is_secret_assignment, is_secret_flag, is_secret_name
from specmon.text import quoted, shown
from specmon.typed import FLOAT_MAX, FieldError, FiniteFloat, convert, type_name
from specmon.urls import UrlRefused, host_name

DEFAULT_LAUNCHER: tuple[str, ...] = ("python3", "-m", "sglang.launch_server")
_ARG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*\Z")  # \Z: `$` also matches before a final newline

ArgScalar = Annotated[str | int | FiniteFloat, Meta(description="a string or a number")]
ArgValue = Annotated[
    str | int | FiniteFloat | bool | list[ArgScalar],
    Meta(description="a string, a number, true/false or an array of strings and numbers"),
]
EnvName = Annotated[str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]*\Z",
                              description="a valid environment variable name (letters, digits and '_', "
                                          "not starting with a digit)")]
EnvValue = Annotated[str, Meta(description='a string (quote numbers: "0")')]
PresetName = Annotated[str, Meta(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*\Z",
                                 description="letters, digits, '.', '_' or '-'")]
Launcher = Annotated[tuple[Annotated[str, Meta(min_length=1)], ...],
                     Meta(min_length=1, description="a non-empty array of non-empty strings")]


class BenchSettings(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="kebab"):
    """The `[bench]` table: what `specmon bench` sends to a server launched with this preset."""

    prompts: str = "builtin:chat"
    requests: Annotated[int, Meta(ge=1)] = 20
    max_new_tokens: Annotated[int, Meta(ge=1)] = 256
    temperature: Annotated[float, Meta(ge=0, le=FLOAT_MAX)] = 0.0
    warmup: Annotated[int, Meta(ge=0)] = 2
    concurrency: Annotated[int, Meta(ge=1)] = 1

    def to_json(self) -> dict[str, Any]:
        """The `[bench]` table's keys and values."""
        return msgspec.to_builtins(self)


class ServerTable(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The `[server]` table: the launcher, the launch flags (`[server.args]`, in order) and `[server.env]`."""

    launcher: Launcher = DEFAULT_LAUNCHER
    args: dict[str, ArgValue] = {}
    env: dict[EnvName, EnvValue] = {}

    def __post_init__(self) -> None:
        if any(is_secret_flag(part) or is_secret_assignment(part) for part in self.launcher):
            raise FieldError(("server", "launcher"), _secret_message("server.launcher"))
        for key, value in self.args.items():
            _check_arg(key, value)


class PresetFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A preset file: its top-level keys and its `[server]` and `[bench]` tables."""

    name: PresetName | None = None
    description: str = ""
    extends: str | None = None
    demo: bool = False
    server: ServerTable = ServerTable()
    bench: BenchSettings = BenchSettings()


InvalidKey = FieldError
"""A preset's fault (the name `specmon.launch.schema` has always given it): its key path and message."""


def check_schema(doc: dict[str, Any]) -> PresetFile:
    """A parsed preset file (or `extends`-merged tables) as its typed declaration; FieldError at the first fault."""
    return convert(doc, PresetFile)


def _check_arg(key: str, value: Any) -> None:
    keypath = ("server", "args", key)
    values = value if isinstance(value, list) else [value]
    if is_secret_name(key) or any(isinstance(v, str) and is_secret_flag(v) for v in values):
        raise FieldError(keypath, _secret_message(key))
    if key.startswith("-"):
        raise FieldError(keypath, f"write the flag {quoted(key)} without its leading dashes")
    if "_" in key:
        raise FieldError(keypath, f"write the flag {quoted(key)} in dash form: {quoted(key.replace('_', '-'))}")
    if not _ARG_NAME.match(key):
        raise FieldError(keypath, f"{quoted(key)} is not a flag name")
    if key == "port" and (isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536):
        said = quoted(value) if isinstance(value, str) else type_name(value) if isinstance(value, bool) else shown(value)
        raise FieldError(keypath, f"'port' must be a whole number from 1 to 65535 (port = 30000), not {said}")
    if key == "host":
        try:
            host_name(value if isinstance(value, str) else repr(value), what="'host'")
        except UrlRefused as exc:  # a user:password@ in it would be shown, recorded and sent: refused here
            raise FieldError(keypath, str(exc)) from None


def _secret_message(where: str) -> str:
    return (
        f"{quoted(where)} would put a secret on the command line (visible to every user in ps); "
        "keep secrets out of presets: set SPECMON_API_KEY or use --api-key-file"
    )


_HEADER = re.compile(r"^\[\[?([^\]]*)\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"""^((?:"[^"]*"|'[^']*'|[A-Za-z0-9_\-. \t])+?)\s*=""")


def _split_key(key: str) -> tuple[str, ...]:
    parts = re.findall(r""""([^"]*)"|'([^']*)'|([^.]+)""", key)
    return tuple((a or b or c).strip() for a, b, c in parts if (a or b or c).strip())


def key_line(text: str, keypath: tuple[str, ...]) -> int | None:
    """The line of `keypath` in a TOML text (a key, a table header, or the inline table holding it)."""
    table: tuple[str, ...] = ()
    fallback = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        header = _HEADER.match(line)
        if header:
            table = _split_key(header.group(1))
            if table == keypath:
                return lineno
            if fallback is None and table[: len(keypath)] == keypath:
                fallback = lineno  # a table header that implicitly defines keypath
            continue
        match = _KEY.match(line)
        if not match:
            continue
        full = table + _split_key(match.group(1))
        if full == keypath:
            return lineno
        if fallback is None and (keypath[: len(full)] == full or full[: len(keypath)] == keypath):
            fallback = lineno
    return fallback
