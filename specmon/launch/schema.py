"""A preset file's schema: the keys and values a preset may hold, each fault an `InvalidKey` naming its key (its
line found by `key_line`). Outside names and values are quoted cut (`text.quoted`), NaN and infinity are no
setting, and a secret never goes on a command line."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from specmon.redact import is_secret_assignment, is_secret_flag, is_secret_name
from specmon.text import did_you_mean, quoted, shown
from specmon.urls import UrlRefused, host_name

_TOP_KEYS = {"name", "description", "extends", "demo", "server", "bench"}
_SERVER_KEYS = {"launcher", "args", "env"}
_ARG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*\Z")  # \Z: `$` also matches before a final newline
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_PRESET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\Z")

# TOML key -> (BenchSettings field, accepted types, minimum value or None)
BENCH_KEYS: dict[str, tuple[str, tuple[type, ...], float | None]] = {
    "prompts": ("prompts", (str,), None),
    "requests": ("requests", (int,), 1),
    "max-new-tokens": ("max_new_tokens", (int,), 1),
    "temperature": ("temperature", (int, float), 0),
    "warmup": ("warmup", (int,), 0),
    "concurrency": ("concurrency", (int,), 1),
}


class InvalidKey(Exception):
    """A schema problem at a key path of one file."""

    def __init__(self, keypath: tuple[str, ...], message: str):
        super().__init__(message)
        self.keypath = keypath
        self.message = message


def _type_name(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array",
            dict: "a table"}.get(type(value), type(value).__name__)


def _require(value: Any, types: tuple[type, ...], keypath: tuple[str, ...], expected: str) -> None:
    if isinstance(value, bool) and bool not in types:
        raise InvalidKey(keypath, f"{quoted('.'.join(keypath))} must be {expected}, not a boolean")
    if not isinstance(value, types):
        raise InvalidKey(keypath, f"{quoted('.'.join(keypath))} must be {expected}, not {_type_name(value)}")


def _require_finite(value: Any, keypath: tuple[str, ...], what: str) -> None:
    """TOML's nan and inf are no setting: refused, so nothing downstream (a command line, `--json`) meets one."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidKey(keypath, f"{what} must be a finite number, not {value}")


def _unknown(table: Mapping[str, Any], allowed: set[str], prefix: tuple[str, ...]) -> None:
    for key in table:
        if key not in allowed:
            where = f"[{'.'.join(prefix)}]" if prefix else "the top level"
            raise InvalidKey(
                (*prefix, key),
                f"unknown key {quoted(key)} in {where}{did_you_mean(key, allowed)} "
                f"(expected one of: {', '.join(sorted(allowed))})",
            )


def check_schema(doc: dict[str, Any]) -> None:
    _unknown(doc, _TOP_KEYS, ())
    if "name" in doc:
        _require(doc["name"], (str,), ("name",), "a string")
        if not _PRESET_NAME.match(doc["name"]):
            raise InvalidKey(("name",), f"preset name {quoted(doc['name'])} must be letters, digits, '.', '_' or '-'")
    for key in ("description", "extends"):
        if key in doc:
            _require(doc[key], (str,), (key,), "a string")
    if "demo" in doc:
        _require(doc["demo"], (bool,), ("demo",), "true or false")
    if "server" in doc:
        _check_server(doc["server"])
    if "bench" in doc:
        _check_bench(doc["bench"])


def _check_server(server: Any) -> None:
    _require(server, (dict,), ("server",), "a table")
    _unknown(server, _SERVER_KEYS, ("server",))
    if "launcher" in server:
        launcher = server["launcher"]
        _require(launcher, (list,), ("server", "launcher"), "an array of strings")
        if not launcher or not all(isinstance(part, str) and part for part in launcher):
            raise InvalidKey(
                ("server", "launcher"), "'server.launcher' must be a non-empty array of non-empty strings"
            )
        if any(is_secret_flag(part) or is_secret_assignment(part) for part in launcher):
            raise InvalidKey(("server", "launcher"), _secret_message("server.launcher"))
    if "args" in server:
        _require(server["args"], (dict,), ("server", "args"), "a table")
        for key, value in server["args"].items():
            _check_arg(key, value)
    if "env" in server:
        _require(server["env"], (dict,), ("server", "env"), "a table")
        for key, value in server["env"].items():
            keypath = ("server", "env", key)
            if not _ENV_NAME.match(key):
                raise InvalidKey(keypath, f"{quoted(key)} is not a valid environment variable name")
            _require(value, (str,), keypath, 'a string (quote numbers: "0")')


def _check_arg(key: str, value: Any) -> None:
    keypath = ("server", "args", key)
    values = value if isinstance(value, list) else [value]
    if is_secret_name(key) or any(isinstance(v, str) and is_secret_flag(v) for v in values):
        raise InvalidKey(keypath, _secret_message(key))
    if key.startswith("-"):
        raise InvalidKey(keypath, f"write the flag {quoted(key)} without its leading dashes")
    if "_" in key:
        raise InvalidKey(keypath, f"write the flag {quoted(key)} in dash form: {quoted(key.replace('_', '-'))}")
    if not _ARG_NAME.match(key):
        raise InvalidKey(keypath, f"{quoted(key)} is not a flag name")
    if isinstance(value, list):
        for item in value:
            if isinstance(item, bool) or not isinstance(item, str | int | float):
                raise InvalidKey(
                    keypath, f"the values of {quoted(key)} must be strings or numbers, not {_type_name(item)}"
                )
            _require_finite(item, keypath, f"the values of {quoted(key)}")
        return
    if not isinstance(value, str | int | float | bool):
        raise InvalidKey(
            keypath, f"{quoted(key)} must be a string, a number, true/false or an array, not {_type_name(value)}"
        )
    _require_finite(value, keypath, quoted(key))
    if key == "host":
        try:
            host_name(value if isinstance(value, str) else repr(value), what="'host'")
        except UrlRefused as exc:  # a user:password@ in it would be shown, recorded and sent: refused here
            raise InvalidKey(keypath, str(exc)) from None
    if key == "port" and (isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536):
        said = quoted(value) if isinstance(value, str) else _type_name(value) if isinstance(value, bool) else shown(value)
        raise InvalidKey(keypath, f"'port' must be a whole number from 1 to 65535 (port = 30000), not {said}")


def _secret_message(where: str) -> str:
    return (
        f"{quoted(where)} would put a secret on the command line (visible to every user in ps); "
        "keep secrets out of presets: set SPECMON_API_KEY or use --api-key-file"
    )


def _check_bench(bench: Any) -> None:
    _require(bench, (dict,), ("bench",), "a table")
    _unknown(bench, set(BENCH_KEYS), ("bench",))
    for key, value in bench.items():
        _, types, minimum = BENCH_KEYS[key]
        keypath = ("bench", key)
        expected = "a string" if types == (str,) else "an integer" if types == (int,) else "a number"
        _require(value, types, keypath, expected)
        _require_finite(value, keypath, f"'bench.{key}'")
        if minimum is not None and value < minimum:
            raise InvalidKey(keypath, f"'bench.{key}' must be at least {minimum}, not {value}")


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
