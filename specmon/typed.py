"""Outside records as typed msgspec Structs: a preset's tables, a server's state file, a sweep's plan.

A record's Struct is its only declaration: field types, bounds (`Meta(ge=..)`), patterns, and in `Meta(description=..)`
what a value must be, in words. `convert` checks a parsed document against it (strictly: no string taken for a
number, no bool for an int) and turns msgspec's fault into one `FieldError`: the key path (for a line number) and a
line saying which key, what it must be and what it is, outside names and values quoted cut (`text.quoted`).

A Struct's `__post_init__` may raise `FieldError` itself, for what a type cannot say (a secret on a command line).
"""

from __future__ import annotations

import datetime
import math
import re
import sys
import types
from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import msgspec

from specmon.text import did_you_mean, quoted, shown

T = TypeVar("T")

FLOAT_MAX = sys.float_info.max
FiniteFloat = Annotated[float, msgspec.Meta(ge=-FLOAT_MAX, le=FLOAT_MAX)]
"""A float that is a number: NaN and the infinities are refused (they fail both bounds)."""

MAX_TIME_S = 2**34
"""A time in a record is seconds since 1970 below this (the year 2514): anything else is no time."""
Time = Annotated[float, msgspec.Meta(ge=0, lt=MAX_TIME_S, description="a time (seconds since 1970, before 2514)")]
Seconds = Annotated[float, msgspec.Meta(ge=0, le=FLOAT_MAX, description="a duration in seconds (0 or more)")]


class FieldError(Exception):
    """A value of an outside record that its declaration refuses: where (`keypath`, the keys from the top, no
    array indexes) and a one-line `message` naming it. Not a ValueError: msgspec wraps those."""

    def __init__(self, keypath: tuple[str, ...], message: str):
        super().__init__(message)
        self.keypath = keypath
        self.message = message


def convert(data: Any, kind: type[T], *, table: str = "a table") -> T:
    """`data` (parsed JSON or TOML) as a `kind`, checked strictly; FieldError naming the first fault. `table` is
    what the record's format calls a mapping ("a table" in TOML, "an object" in JSON)."""
    try:
        return msgspec.convert(data, kind, strict=True)
    except msgspec.ValidationError as error:
        raise explained(str(error), data, kind, table) from None


_AT = re.compile(r" - at (`key` in )?`\$([^`]*)`\Z")
_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+)\]|(\[\.\.\.\])")
_EXPECTED = re.compile(r"^Expected `([^`]*)`(.*)\Z")
_BOUND = re.compile(r"^ (>=|>|<=|<) (\S+)\Z")
_LENGTH = re.compile(r"^ of length (>=|<=) (\d+)\Z")
_WORDS = {"str": "a string", "int": "an integer", "float": "a number", "bool": "true or false", "array": "an array",
          "object": "a table", "null": "null", "datetime": "a date-time", "date": "a date", "time": "a time"}
_BOUND_WORDS = {">=": "at least", ">": "more than", "<=": "at most", "<": "less than"}


def type_name(value: Any, table: str = "a table") -> str:
    """What `value` is, in words: "a boolean", "an integer", "a table"."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, Mapping):
        return table
    for kind, words in ((int, "an integer"), (float, "a number"), (str, "a string"), (list, "an array"),
                        (datetime.datetime, "a date-time"), (datetime.date, "a date"), (datetime.time, "a time")):
        if isinstance(value, kind):
            return words
    return "null" if value is None else type(value).__name__


class _Node:
    """Where a fault is: the value there, its declared type, the keys leading to it, and its path as shown."""

    def __init__(self, value: Any, kind: Any, keypath: tuple[str, ...] = (), path: str = ""):
        self.value, self.kind, self.keypath, self.path = value, kind, keypath, path

    def members(self) -> list[Any]:
        """The declared type's alternatives, Annotated and None taken off."""
        return [_bare(m) for m in _union(self.kind)]

    def metas(self) -> list[msgspec.Meta]:
        """The Meta of the declared type, and of its one alternative to None (`Time | None`)."""
        found = _metas(self.kind)
        alternatives = _union(self.kind)
        if len(alternatives) == 1 and alternatives[0] is not self.kind:
            found.extend(_metas(alternatives[0]))
        return found

    def description(self) -> str | None:
        return next((m.description for m in self.metas() if m.description), None)

    def child(self, key: str, kind: Any, value: Any) -> _Node:
        return _Node(value, kind, (*self.keypath, key), f"{self.path}.{key}" if self.path else key)

    def step(self, match: re.Match[str]) -> _Node:
        name, index, _entry = match.groups()
        if name is not None:
            struct = next(m for m in self.members() if _is_struct(m))
            field = next(f for f in msgspec.structs.fields(struct) if f.encode_name == name)
            return self.child(name, field.type, self.value[name])
        if index is not None:
            items = next(m for m in self.members() if get_origin(m) in (list, tuple))
            item_kind = get_args(items)[0]
            return _Node(self.value[int(index)], item_kind, self.keypath, f"{self.path}[{index}]")
        _, value_kind = self._dict_types()
        key = _first_refused(self.value.items(), value_kind, lambda kv: kv[1])[0]
        return self.child(str(key), value_kind, self.value[key])

    def _dict_types(self) -> tuple[Any, Any]:
        mapping = next(m for m in self.members() if get_origin(m) is dict)
        key_kind, value_kind = get_args(mapping)
        return key_kind, value_kind

    def refused_key(self) -> _Node:
        """The first key of this table its key type refuses (a node whose value is the key)."""
        key_kind, _ = self._dict_types()
        key = _first_refused(self.value, key_kind, lambda k: k)
        return _Node(key, key_kind, (*self.keypath, str(key)), self.path)


def _bare(kind: Any) -> Any:
    while get_origin(kind) is Annotated:
        kind = get_args(kind)[0]
    return kind


def _metas(kind: Any) -> list[msgspec.Meta]:
    found = []
    while get_origin(kind) is Annotated:
        found.extend(m for m in kind.__metadata__ if isinstance(m, msgspec.Meta))
        kind = get_args(kind)[0]
    return found


def _union(kind: Any) -> list[Any]:
    bare = _bare(kind)
    if get_origin(bare) in (Union, types.UnionType):
        return [m for m in get_args(bare) if m is not type(None)]
    return [kind]


def _is_struct(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, msgspec.Struct)


def _first_refused(items: Any, kind: Any, pick: Any) -> Any:
    for item in items:
        try:
            msgspec.convert(pick(item), kind, strict=True)
        except (msgspec.ValidationError, FieldError):
            return item
    raise LookupError("no refused entry")


def _first_unknown(node: _Node) -> tuple[_Node, list[str]] | None:
    """The first key, depth first in the document's order, that no Struct declares (the one msgspec met)."""
    struct = next((m for m in node.members() if _is_struct(m)), None)
    if struct is not None and isinstance(node.value, Mapping):
        fields = {f.encode_name: f for f in msgspec.structs.fields(struct)}
        for key, value in node.value.items():
            if key not in fields:
                return node, list(fields)
            found = _first_unknown(node.child(key, fields[key].type, value))
            if found:
                return found
    items = next((m for m in node.members() if get_origin(m) is list), None)
    if items is not None and isinstance(node.value, list):
        for index, value in enumerate(node.value):
            found = _first_unknown(_Node(value, get_args(items)[0], node.keypath, f"{node.path}[{index}]"))
            if found:
                return found
    return None


def explained(text: str, data: Any, kind: Any, table: str = "a table") -> FieldError:
    """msgspec's message `text` about `data` as a `kind`, as a FieldError in words. The only outside text in
    msgspec's messages (an unknown key, an enum value) comes before its path, which is read from the end."""
    root = _Node(data, kind)
    if text.startswith("Object contains unknown field `"):
        found = _first_unknown(root)
        if found is not None:
            node, allowed = found
            key = next(k for k in node.value if k not in allowed)
            where = f"[{node.path}]" if node.path else "the top level"
            return FieldError((*node.keypath, key), f"unknown key {quoted(key)} in {where}"
                              f"{did_you_mean(key, allowed)} (expected one of: {', '.join(sorted(allowed))})")
    at = _AT.search(text)
    what = text[: at.start()] if at else text
    node = root
    try:
        for segment in _SEGMENT.finditer(at.group(2) if at else ""):
            node = node.step(segment)
        if at and at.group(1):
            key = node.refused_key()
            return FieldError(key.keypath, f"{quoted(key.value)} in {quoted(node.path)} is not "
                                            f"{key.description() or _expected(what, key, table)}")
    except (LookupError, StopIteration, TypeError, AttributeError):
        pass  # a path this module cannot follow: said at the deepest key reached
    if what.startswith("Object contains unknown field"):  # outside text: not repeated
        return FieldError(node.keypath, f"{quoted(node.path) if node.path else 'the record'} holds an unknown key")
    return FieldError(node.keypath, _message(what, node, table))


def _message(what: str, node: _Node, table: str) -> str:
    subject = quoted(node.path) if node.path else "the record"
    value = node.value
    missing = re.match(r"^Object missing required field `([^`]*)`\Z", what)
    if missing:
        name = missing.group(1)
        return f"{quoted(f'{node.path}.{name}' if node.path else name)} is missing"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{subject} must be a finite number, not {value}"
    expected = node.description() or _expected(what, node, table)
    if what.startswith("Invalid enum value"):
        return f"{subject} must be {expected}, not {quoted(value)}"
    match = _EXPECTED.match(what)
    rest = match.group(2) if match else ""
    if rest.startswith(", got"):
        return f"{subject} must be {expected}, not {type_name(value, table)}"
    if _LENGTH.match(rest) and isinstance(value, str | list) and not value:
        return f"{subject} must be {expected}, not an empty {'string' if isinstance(value, str) else 'array'}"
    if rest.startswith(" matching regex") or isinstance(value, str):
        return f"{subject} must be {expected}, not {quoted(value)}"
    if match:
        return f"{subject} must be {expected}, not {shown(value)}"
    return f"{subject}: {what}"


def _expected(what: str, node: _Node, table: str) -> str:
    """What msgspec expected, in words (when the declaration gives no description)."""
    choices = next((get_args(m) for m in node.members() if get_origin(m) is Literal), None)
    if choices is not None:
        return "one of " + ", ".join(quoted(c) for c in choices)
    match = _EXPECTED.match(what)
    if not match:
        return "something else"
    names = [n.strip() for n in match.group(1).split("|")]
    if "int" in names and "float" in names:
        names.remove("int")
    words = [table if n == "object" else _WORDS.get(n, n) for n in names if n != "null"] or ["null"]
    said = words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]
    rest = match.group(2)
    bound = _BOUND.match(rest)
    if bound:
        number = float(bound.group(2))
        return f"{_BOUND_WORDS[bound.group(1)]} {shown(int(number) if number.is_integer() else number)}"
    length = _LENGTH.match(rest)
    if length and length.group(1) == ">=" and length.group(2) == "1":
        return "a non-empty " + said.removeprefix("a ").removeprefix("an ")
    if length:
        return f"{said} of length {_BOUND_WORDS[length.group(1)]} {length.group(2)}"
    if rest.startswith(" matching regex"):
        return f"{said} matching {rest.removeprefix(' matching regex ')}"
    return said
