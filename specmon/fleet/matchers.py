"""The command line's label matchers (`--selector`, `--gpu-selector`) and label names, read by a small strict
parser of PromQL's grammar for them, and PromQL strings and regular expressions written for any text.

`parse_matchers` reads `name op "value", ...` (op `=`, `!=`, `=~`, `!~`; a value in double or single quotes
with Go's escapes, or in backquotes; spaces and tabs between; a trailing comma) and refuses anything else with
the reason: a `#` comment, an unknown escape, a brace outside a value, a matcher on `__name__`. A regular
expression is accepted only in a subset that RE2 (Prometheus' regexp) and Python both read: anything the
parser accepts, Prometheus accepts (tests/fleet/test_fleet_selectors.py checks it against promtool). The matchers
are written back in one canonical form (`render`), so what reaches Prometheus is what was checked.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

from specmon.text import printable, quoted

MAX_SELECTOR_CHARS = 4096
MAX_REPEAT = 1000
"""RE2's largest repeat count (`{n,m}`)."""
MAX_DEPTH = 100
"""Groups nested deeper are refused (RE2 refuses past 1000; Python recurses)."""
OPERATORS = ("=~", "!~", "!=", "=")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_SIMPLE_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}
_SPACE = " \t"
_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
_METACHARACTERS = frozenset("\\.+*?()|[]{}^$")
"""What Go's regexp.QuoteMeta escapes: every other character is itself in RE2."""
_CLASS_ESCAPES = frozenset("dDsSwW")
_CONTROL_ESCAPES = frozenset("tnrfv")
_REPEAT = re.compile(r"\{(\d+)(,(\d*))?\}")


class MatcherError(ValueError):
    """A selector or label name that is refused; the message says where and why."""


@dataclass(frozen=True)
class Matcher:
    """One label matcher: `name op "value"` (`value` as decoded, not as written)."""

    name: str
    op: str
    value: str

    def render(self) -> str:
        return f"{self.name}{self.op}{promql_string(self.value)}"


def valid_label_name(name: str) -> bool:
    """Whether `name` is a Prometheus label name, whole (a final newline is not: `fullmatch`, never `$`)."""
    return bool(_LABEL_NAME.fullmatch(name))


def parse_matchers(text: str) -> tuple[Matcher, ...]:
    """The matchers of `text` (`job="sglang",env=~"prod.*"`, no braces); MatcherError when it is anything
    else."""
    if len(text) > MAX_SELECTOR_CHARS:
        raise MatcherError(f"longer than {MAX_SELECTOR_CHARS} characters")
    if not _encodable(text):
        raise MatcherError("not valid Unicode")
    reader = _Reader(text)
    matchers: list[Matcher] = []
    reader.skip_space()
    while not reader.done():
        name = reader.label_name()
        reader.skip_space()
        op = reader.operator()
        reader.skip_space()
        value = reader.string()
        if name == "__name__":
            raise MatcherError("a matcher on __name__ (the metric's name is specmon's to choose)")
        if op in ("=~", "!~"):
            problem = regex_problem(value)
            if problem:
                raise MatcherError(f"the regular expression {quoted(value)}: {problem}")
        matchers.append(Matcher(name, op, value))
        reader.skip_space()
        if reader.done():
            break
        reader.expect(",")
        reader.skip_space()
    return tuple(matchers)


def canonical(text: str) -> str:
    """`text`'s matchers written back in one form (`a="b",c=~"d"`); MatcherError when they cannot be read."""
    return ",".join(matcher.render() for matcher in parse_matchers(text))


def promql_string(value: str) -> str:
    """`value` as a PromQL double-quoted string, whatever it holds: backslash, quote and every control
    character escaped, and U+FFFD too (Prometheus' lexer takes it for an invalid UTF-8 byte)."""
    out = []
    for char in value:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char < " " or char == "\x7f" or "\x80" <= char <= "\x9f" or char == "\ufffd":
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def regex_literal(text: str) -> str:
    """A regular expression (RE2's syntax) matching exactly `text`: its metacharacters escaped with a
    backslash as Go's regexp.QuoteMeta does, control characters as `\\x{..}`, everything else as it is (put it
    in PromQL with `promql_string`)."""
    out = []
    for char in text:
        if char in _METACHARACTERS:
            out.append("\\" + char)
        elif char < " " or char == "\x7f":
            out.append(f"\\x{{{ord(char):x}}}")
        else:
            out.append(char)
    return "".join(out)


def regex_problem(pattern: str) -> str | None:
    """Why `pattern` is outside the regular expressions both RE2 and Python read alike (None when inside):
    literal characters, `.`, `|`, `^`, `$`, groups `(...)` and `(?:...)` nested at most MAX_DEPTH deep, classes
    `[...]` (no POSIX or nested ones), `*`, `+`, `?` (each optionally lazy) and `{n}`, `{n,}`, `{n,m}` up to
    1000 after a character, a class or a group, escapes of punctuation, `\\d \\s \\w` (and their capitals) and
    `\\t \\n \\r \\f \\v`."""
    # `inner`: per open group, the largest product of repeat counts nested in it (RE2 refuses over 1000);
    # `atom`: that product for what a repetition would apply to (None: nothing repeatable there)
    i, inner, atom, lazy_ok = 0, [1], None, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            escaped = pattern[i + 1: i + 2]
            if not escaped:
                return "it ends with a backslash"
            if escaped not in _PUNCTUATION and escaped not in _CLASS_ESCAPES | _CONTROL_ESCAPES:
                return f"the escape \\{printable(escaped)} (only punctuation, \\d \\s \\w and \\t \\n \\r \\f \\v)"
            i, atom, lazy_ok = i + 2, 1, False
        elif char == "[":
            end = _class_end(pattern, i)
            if isinstance(end, str):
                return end
            i, atom, lazy_ok = end, 1, False
        elif char == "(":
            if len(inner) > MAX_DEPTH:
                return f"groups nested deeper than {MAX_DEPTH}"
            if pattern[i + 1: i + 2] == "?" and pattern[i + 2: i + 3] != ":":
                return "a group (?...) other than (?:...)"
            inner.append(1)
            i, atom, lazy_ok = i + (3 if pattern[i + 1: i + 2] == "?" else 1), None, False
        elif char == ")":
            if len(inner) == 1:
                return "a ) without its ("
            atom = inner.pop()
            inner[-1] = max(inner[-1], atom)
            i, lazy_ok = i + 1, False
        elif char in "*+?{":
            repeat = _REPEAT.match(pattern, i) if char == "{" else None
            if char == "{" and repeat is None:
                return "a { that is not a repeat count (write \\{)"
            if char == "?" and lazy_ok:
                i, atom, lazy_ok = i + 1, None, False
                continue
            if atom is None:
                return "a repetition of nothing, or of a repetition"
            if repeat is not None:
                low, high = int(repeat.group(1)), repeat.group(3)
                if high and int(high) < low:
                    return "a repeat count whose maximum is below its minimum"
                count = atom * max(1, int(high) if high else low)
                if count > MAX_REPEAT:
                    return f"repeat counts over {MAX_REPEAT} (nested ones multiplied)"
                inner[-1] = max(inner[-1], count)
            i, atom, lazy_ok = (repeat.end() if repeat else i + 1), None, True
        elif char == "}":
            return "a } outside a repeat count (write \\})"
        else:
            i, atom, lazy_ok = i + 1, None if char in "|^$" else 1, False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # Python's "possible nested set": refused, not printed
            re.compile(pattern)
    except (re.error, FutureWarning, DeprecationWarning, RecursionError, OverflowError) as exc:
        return str(exc)[:80]
    return None


def _class_end(pattern: str, start: int) -> int | str:
    """Where the class `[...]` at `start` ends (after its `]`), or why it is refused."""
    i = start + 1 + (pattern[start + 1: start + 2] == "^")
    if pattern[i: i + 1] == "]":
        return "a class that starts with ] (write \\])"
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            escaped = pattern[i + 1: i + 2]
            if escaped not in _PUNCTUATION and escaped not in _CLASS_ESCAPES | _CONTROL_ESCAPES:
                return f"the escape \\{printable(escaped)} in a class"
            i += 2
        elif char == "[":
            return "a [ inside a class (write \\[)"
        elif char == "]":
            return i + 1
        else:
            i += 1
    return "a class [ without its ]"


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class _Reader:
    """A position in a selector's text, and the tokens read from it (each raising MatcherError)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0

    def done(self) -> bool:
        return self.at >= len(self.text)

    def fail(self, what: str) -> MatcherError:
        near = self.text[self.at: self.at + 12]
        return MatcherError(f"{what} at character {self.at + 1}" + (f" ({quoted(near, 12)})" if near else ""))

    def skip_space(self) -> None:
        while self.at < len(self.text) and self.text[self.at] in _SPACE:
            self.at += 1

    def expect(self, char: str) -> None:
        if self.text[self.at: self.at + 1] != char:
            raise self.fail(f"expected {char!r}")
        self.at += 1

    def label_name(self) -> str:
        match = _LABEL_NAME.match(self.text, self.at)
        if not match:
            raise self.fail("expected a label name")
        self.at = match.end()
        return match.group()

    def operator(self) -> str:
        for op in OPERATORS:
            if self.text.startswith(op, self.at):
                self.at += len(op)
                return op
        raise self.fail("expected =, !=, =~ or !~")

    def string(self) -> str:
        quote = self.text[self.at: self.at + 1]
        if quote not in ('"', "'", "`"):
            raise self.fail("expected a quoted value")
        self.at += 1
        out: list[str] = []
        while True:
            if self.done():
                raise self.fail("a value without its closing quote")
            char = self.text[self.at]
            if char == quote:
                self.at += 1
                return "".join(out)
            if char == "\n" or (char < " " and char != "\t") or char == "\x7f" or char == "\ufffd":
                raise self.fail("a control character in a value (write it as an escape)")
            if char == "\\" and quote != "`":
                out.append(self._escape(quote))
                continue
            out.append(char)
            self.at += 1

    def _escape(self, quote: str) -> str:
        """Go's escapes, as Prometheus' lexer takes them (\\x and octal only below 0x80: they make bytes)."""
        code = self.text[self.at + 1: self.at + 2]
        if code in _SIMPLE_ESCAPES or code == quote:
            self.at += 2
            return _SIMPLE_ESCAPES.get(code, quote)
        digits, base = {"x": (2, 16), "u": (4, 16), "U": (8, 16)}.get(code, (3, 8) if code in "01234567" and code
                                                                         else (0, 0))
        if not digits:
            raise self.fail(f"an unknown escape \\{printable(code)}" if code else "a value ending in a backslash")
        start = self.at + (1 if base == 8 else 2)
        text = self.text[start: start + digits]
        allowed = "01234567" if base == 8 else "0123456789abcdefABCDEF"
        if len(text) != digits or any(c not in allowed for c in text):
            raise self.fail(f"an escape \\{code} without its {digits} digits")
        value = int(text, base)
        if (code == "x" or base == 8) and value >= 0x80:
            raise self.fail("an escape of a byte above 0x7f (write the character itself, or \\u)")
        if value > 0x10FFFF or 0xD800 <= value < 0xE000:
            raise self.fail("an escape that is not a Unicode character")
        self.at = start + digits
        return chr(value)
