"""Prompt categories of requests: the user's rules (a TOML file, `--categories FILE`), else specmon's heuristic.

The file holds ordered rules; the first that matches a request names its category, `default` names the rest:

    default = "prose"
    [[category]]
    name = "code"
    match = '(?m)^\\s*(def|class|import|#include)\\b'   # a regex searched in the prompt's text
    [[category]]
    name = "support"
    key = "custom_labels.team"                        # a key of request_parameters (dotted: nested)
    equals = "support"                                # or match = REGEX over the key's value

A rule with `match` alone is searched in the prompt's first MATCH_CHARS characters. Where the record holds no text
(SGLang's exporter drops it at --log-requests-level 0 or 1), a request that reaches a text rule is NO_TEXT: what
that rule would say is not known. The file is bounded (MAX_FILE_BYTES, MAX_RULES, MAX_PATTERN_CHARS), and a
pattern that can take super-linear time is refused when the file is read: a repetition inside a repetition, a
backreference, or one that takes more than PROBE_BUDGET_S on a probe text of MATCH_CHARS characters.

Without rules the heuristic (`prompt_class`: code, long, other) classes the prompts of `bench --prompts-from-traffic`
and the comparison of a benchmark with production; `specmon traffic` and the app class by category only with rules.
"""

from __future__ import annotations

import importlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import msgspec

from specmon.inputs import KIB, InputError, parse_toml, read_text
from specmon.text import printable, quoted
from specmon.traffic.records import RequestRecord, label
from specmon.traffic.summary import DOTTED_KEY, MISSING, PROMPT_BUCKETS, by_value
from specmon.typed import FieldError, convert

FILE_NAME = "categories.toml"
MAX_FILE_BYTES = 64 * KIB
MAX_RULES = 64
MAX_PATTERN_CHARS = 400
MATCH_CHARS = 16 * KIB
"""A text rule is searched in the prompt's first this many characters (what bounds a pattern's time per prompt)."""
PROBE_BUDGET_S = 0.05
"""A linear pattern searches a 16 KiB probe in about 1 ms; a quadratic one (`a.*b` on "aaa…") in 0.3 s or more."""
MAX_PROBE_CHARS = 24
NO_TEXT = "(no text)"
NO_TEXT_HINT = ("SGLang keeps it in the export file (--export-metrics-to-file) unless --log-requests is on at "
                "level 0 or 1, and in the request log at --log-requests-level 3")
HEURISTIC = "heuristic"
YOUR_RULES = "your rules"

CODE = "code"
LONG = "long"
OTHER = "other"
CLASSES = (CODE, LONG, OTHER)
LONG_PROMPT_TOKENS = PROMPT_BUCKETS[2]
"""A prompt of this many tokens or more is "long" (the traffic summary's 4096+ buckets)."""
LEVEL2_HALF = 1024
"""--log-requests-level 2 keeps a string's first and last 1,024 characters around "..." (SGLang's max_length 2048)."""
_CODE_LINE = re.compile(r"^\s*(def |class |import |from \S+ import |#include|function |fn |func |public |"
                        r"const |let |var |SELECT |return\b).*|^.*[;{}][ \t\r]*(?=\n|\Z)", re.MULTILINE)
MIN_CODE_LINES = 3

Name = Annotated[str, msgspec.Meta(pattern=r"\A[A-Za-z0-9][A-Za-z0-9 _.+-]{0,39}\Z",
                                   description="a name of 1 to 40 letters, digits, spaces or _ . + -")]
Pattern = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_PATTERN_CHARS,
                                      description=f"a regular expression of 1 to {MAX_PATTERN_CHARS} characters")]
Key = Annotated[str, msgspec.Meta(pattern=r"\A" + DOTTED_KEY.pattern,
                                  description="a key of request_parameters, dotted for nested keys")]
Value = Annotated[str, msgspec.Meta(max_length=200, description="a string of at most 200 characters")]


class CategoriesError(ValueError):
    """A categories file that cannot be used; the message says why in one line, naming the file."""


def prompt_class(text: str | None, prompt_tokens: int | None) -> str:
    """The heuristic's class: "code" (a fenced block, or 3+ lines that read as code), else "long" (4096+ prompt
    tokens), else "other". Without the text only "long" can be told; the rest is "other"."""
    if text and ("```" in text or len(_CODE_LINE.findall(text, 0, 65536)) >= MIN_CODE_LINES):
        return CODE
    if prompt_tokens is not None and prompt_tokens >= LONG_PROMPT_TOKENS:
        return LONG
    return OTHER


def _cut_by_level2(text: str) -> bool:
    return len(text) == 2 * LEVEL2_HALF + 3 and text[LEVEL2_HALF:LEVEL2_HALF + 3] == "..."


def record_text(record: RequestRecord) -> tuple[str | None, str | None]:
    """(the prompt's text, None) or (None, why not) for one record."""
    params = record.params or {}
    text = params.get("text")
    if isinstance(text, str) and text.strip():
        if _cut_by_level2(text):
            return None, "text cut by --log-requests-level 2"
        return text, None
    if isinstance(text, list):
        return None, "a batch of prompts in one request"
    if params.get("input_ids") is not None:
        return None, "token ids only (input_ids), no text"
    return None, "no prompt text"


class CategoryRule(msgspec.Struct, forbid_unknown_fields=True):
    """One `[[category]]` rule: `match` (a regex searched in the prompt's text), or `key` with `equals` or `match`
    (the value of that key of request_parameters)."""

    name: Name
    match: Pattern | None = None
    key: Key | None = None
    equals: Value | None = None

    def __post_init__(self) -> None:
        if self.key is None and self.equals is not None:
            raise FieldError(("equals",), f"rule {quoted(self.name)}: equals goes with key = \"KEY\"")
        if self.key is None and self.match is None:
            raise FieldError(("match",), f"rule {quoted(self.name)}: give match = 'REGEX' (over the prompt's "
                             "text) or key = \"KEY\" with equals or match")
        if self.key is not None and (self.equals is None) == (self.match is None):
            raise FieldError(("key",), f"rule {quoted(self.name)}: key = {quoted(self.key)} takes one of equals "
                             "or match")


class CategoryFile(msgspec.Struct, forbid_unknown_fields=True):
    """A categories file: its ordered rules and the category of the requests none matches."""

    category: Annotated[list[CategoryRule], msgspec.Meta(min_length=1, max_length=MAX_RULES,
                                                          description=f"1 to {MAX_RULES} [[category]] rules")]
    default: Name = OTHER


def _unsafe(pattern: str) -> str | None:
    """Why `pattern` (which compiles) may take exponential time: a backreference, or an unbounded repetition holding
    another or an alternation (of more than single characters: re makes those a character set); None when none."""
    c = importlib.import_module("re._constants")  # re's own parser (no stubs: private, as sre_parse was)
    parser = importlib.import_module("re._parser")

    repeats = (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", c.MAX_REPEAT))

    def visit(items: Any, inside: bool) -> str | None:
        for op, arg in items:
            if op in (c.GROUPREF, c.GROUPREF_EXISTS):
                return "a backreference"
            if op in repeats:
                low, high, body = arg
                unbounded = high == c.MAXREPEAT or high > 64
                if unbounded and inside:
                    return "a repetition inside a repetition (e.g. (a+)+)"
                if why := visit(body, inside or unbounded):
                    return why
            elif op == c.SUBPATTERN:
                if why := visit(arg[-1], inside):
                    return why
            elif op in (c.ASSERT, c.ASSERT_NOT):
                if why := visit(arg[1], inside):
                    return why
            elif op == c.BRANCH:
                if inside:
                    return "an alternation inside a repetition (e.g. (ab|a)+)"
                for branch in arg[1]:
                    if why := visit(branch, inside):
                        return why
            elif op == c.ATOMIC_GROUP and (why := visit(arg, inside)):
                return why
        return None

    return visit(parser.parse(pattern), False)


_PROBES = ("a", " ", "0", "\n", "a ", "a\n", " \n", "ab", "\t.", "{;", "<a>")


def _slow_probe(regex: re.Pattern[str]) -> tuple[float, str] | None:
    """(seconds, probe) of the first probe text a search takes more than PROBE_BUDGET_S over, else None. Each probe
    repeats a few characters (common ones, and the pattern's own) up to MATCH_CHARS, its length doubled from 512
    so that a pattern of cubic time is stopped before it takes long."""
    for unit in (*_PROBES, *sorted({ch for ch in regex.pattern if ch.isprintable()})[:MAX_PROBE_CHARS]):
        length = KIB // 2
        while True:
            text = (unit * (length // len(unit) + 1))[:length]
            started = time.monotonic()
            regex.search(text)
            took = time.monotonic() - started
            if took > PROBE_BUDGET_S:
                return took, f"{length:,} characters of {unit!r}"
            if length >= MATCH_CHARS:
                break
            length *= 2
    return None


def _compiled(pattern: str, where: str) -> re.Pattern[str]:
    try:
        regex = re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as error:
        raise CategoriesError(f"{where}: {quoted(pattern)} is not a regular expression ({printable(error)})"
                              ) from None
    if why := _unsafe(pattern):
        raise CategoriesError(f"{where}: {quoted(pattern)} holds {why}, which can take exponential time: "
                              "write it without")
    if (slow := _slow_probe(regex)) is not None:
        raise CategoriesError(f"{where}: {quoted(pattern)} took {slow[0]:.2f} s on a probe text ({printable(slow[1])}"
                              "): write one that cannot scan ahead from every character (^\\s* crosses lines: "
                              "^[ \\t]* does not)")
    return regex


@dataclass(frozen=True)
class _Rule:
    name: str
    key: str | None
    equals: str | None
    regex: re.Pattern[str] | None


def _key_text(params: dict[str, Any] | None, key: str) -> str:
    """`summary.by_value`, an integer or a boolean said without its JSON encoder (the common case, 20 µs a record
    less)."""
    value: Any = params
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return MISSING
        value = value[part]
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) is int:
        return str(value)
    return by_value(params, key)


class Categories:
    """Names each request's prompt category: by the rules of a file (`read`), or by the heuristic (`HEURISTIC`,
    `heuristic()`). `source` says which ("heuristic" or "your rules"), `path` the file."""

    def __init__(self, rules: list[_Rule] | None = None, default: str = OTHER, path: str | None = None) -> None:
        self.rules = rules
        self.default = default
        self.path = path

    @classmethod
    def heuristic(cls) -> Categories:
        return cls()

    @property
    def source(self) -> str:
        return HEURISTIC if self.rules is None else YOUR_RULES

    @property
    def names(self) -> tuple[str, ...]:
        """The categories a request can get, in the file's order (the default last; NO_TEXT not among them)."""
        if self.rules is None:
            return CLASSES
        return tuple(dict.fromkeys([*(r.name for r in self.rules), self.default]))

    def describe(self) -> str:
        """"heuristic" or "your rules (PATH)"."""
        return HEURISTIC if self.rules is None else f"{YOUR_RULES} ({printable(self.path)[-200:]})"

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "file": self.path, "names": list(self.names)}

    def of(self, text: str | None, params: dict[str, Any] | None, prompt_tokens: int | None) -> str:
        """The category of a prompt (its text, None when unknown) with its request_parameters (None: none)."""
        if self.rules is None:
            return NO_TEXT if text is None else prompt_class(text, prompt_tokens)
        for rule in self.rules:
            if rule.key is not None:
                value = _key_text(params, rule.key)
                if value != MISSING and (value == rule.equals if rule.regex is None
                                         else rule.regex.search(value) is not None):
                    return rule.name
            elif text is None:
                return NO_TEXT
            elif rule.regex is not None and rule.regex.search(text, 0, MATCH_CHARS):
                return rule.name
        return self.default

    def of_record(self, record: RequestRecord) -> str:
        text, _ = record_text(record)
        return self.of(text, record.params, record.prompt_tokens)


def read(path: str) -> Categories:
    """The rules of the categories file `path`; CategoriesError (one line, naming the file) when it cannot be
    read or used."""
    where = printable(path)[-200:]
    try:
        document = parse_toml(read_text(path, MAX_FILE_BYTES, what="categories file"), where=where)
        parsed = convert(document, CategoryFile)
    except FieldError as error:
        raise CategoriesError(f"{where}: {error.message}") from None
    except InputError as error:
        raise CategoriesError(printable(error)) from None
    except OSError as error:
        raise CategoriesError(f"{where}: {error.strerror or error}") from None
    except ValueError as error:  # malformed TOML, or not UTF-8
        raise CategoriesError(f"{where}: not a TOML file ({printable(error).splitlines()[0][:120]})") from None
    rules = []
    for index, rule in enumerate(parsed.category, start=1):
        regex = _compiled(rule.match, f"{where}: rule {index} ({rule.name})") if rule.match is not None else None
        rules.append(_Rule(rule.name, rule.key, None if rule.equals is None else label(rule.equals), regex))
    return Categories(rules, parsed.default, path)


def default_path() -> Path:
    """Where the rules are read from when no --categories is given: `<platformdirs user_config_dir>/specmon/`
    FILE_NAME (the presets' config directory)."""
    import platformdirs

    return Path(platformdirs.user_config_dir("specmon")) / FILE_NAME


def given(path: str | None) -> Categories | None:
    """The rules of `--categories PATH`, else of the default file when it exists, else None (no rules);
    CategoriesError when a file cannot be used."""
    if path is not None:
        return read(path)
    default = default_path()
    return read(str(default)) if os.path.lexists(default) else None


def given_or_refused(path: str | None) -> Categories | None:
    """`given(path)`, a file that cannot be used raised as a UsageError (one line, exit 2)."""
    from specmon.exits import UsageError

    try:
        return given(path)
    except CategoriesError as error:
        raise UsageError(f"--categories: {error}") from None
