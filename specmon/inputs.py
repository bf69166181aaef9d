"""Outside files and texts read with bounds: regular files only, at most so many bytes, nested at most so deep.

Every file specmon reads that someone else wrote (presets, a checkpoint's config.json, index and safetensors
headers, state files, stored results, prompts, SGLang's source) comes through `read_file`, and every secret
(an API key file, a bearer-token or basic-auth file) through `read_secret`; every
JSON or TOML text through `parse_json` / `parse_toml`. A FIFO, a device (/dev/zero), a directory or a file
over its limit is refused before anything is read (a FIFO is opened without waiting for a writer), and a text
nested deeper than `MAX_DEPTH` levels is refused with the reason instead of a RecursionError.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import tomllib
from collections.abc import Callable
from typing import Any, BinaryIO

MAX_DEPTH = 64
"""Nesting no file or answer specmon reads comes near (SGLang's /server_info: 4 levels; a preset: 3)."""

KIB, MIB = 1024, 1024 * 1024


class InputError(ValueError):
    """An outside file or text specmon will not read; the message names it and says why."""


def kind_of(mode: int) -> str:
    """What a file of `mode` is, in words ("a FIFO", "a character device", ...)."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def size_text(size: int) -> str:
    """A size for a message: "512 bytes", "64 KiB", "8.0 MiB"."""
    if size >= MIB:
        return f"{size / MIB:,.1f} MiB"
    if size >= KIB:
        return f"{size / KIB:,.0f} KiB"
    return f"{size} bytes"


def open_regular(path: str | os.PathLike[str], *, what: str = "file", follow: bool = True) -> BinaryIO:
    """`path` opened for reading, when it is a regular file: InputError for a FIFO (opened without waiting for
    a writer), a device, a directory or a socket; OSError when it cannot be opened (with `follow=False`, a
    symbolic link: ELOOP)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputError(f"{path}: {kind_of(mode)}, not a {what} (only regular files are read)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_file(path: str | os.PathLike[str], max_bytes: int, *, what: str = "file", follow: bool = True) -> bytes:
    """The bytes of `path`, a regular file (`open_regular`) of at most `max_bytes` (`what` names it in
    messages): InputError for anything else, or a file over the limit or growing past it while read."""
    with open_regular(path, what=what, follow=follow) as handle:
        return _read_bounded(handle, path, max_bytes, what)


def _read_bounded(handle: BinaryIO, path: str | os.PathLike[str], max_bytes: int, what: str) -> bytes:
    size = os.fstat(handle.fileno()).st_size
    if size > max_bytes:
        raise InputError(f"{path}: {size_text(size)}, more than a {what} may have ({size_text(max_bytes)})")
    data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise InputError(f"{path}: grew past {size_text(max_bytes)} while read, more than a {what} may have")
    return data


def read_text(path: str | os.PathLike[str], max_bytes: int, *, what: str = "file", follow: bool = True) -> str:
    """`read_file` decoded as UTF-8 (UnicodeDecodeError, a ValueError, when it is not)."""
    return read_file(path, max_bytes, what=what, follow=follow).decode("utf-8")


def read_secret(path: str | os.PathLike[str], max_bytes: int, *, what: str,
                warn: Callable[[str], None] | None = None) -> str:
    """The text of a file holding a secret, read as `read_text` reads (a regular file, bounded, a FIFO refused
    at once). A file its group or other users may read is told to `warn` in one line, as ssh and kubectl warn of
    one. The caller hands the secret to `redact.remember_secret`, so that no echo of it is ever shown."""
    with open_regular(path, what=what) as handle:
        mode = os.fstat(handle.fileno()).st_mode
        data = _read_bounded(handle, path, max_bytes, what)
    if warn is not None and mode & 0o044:
        others = "other users" if mode & 0o004 else "its group"
        warn(f"{path}: the {what} can be read by {others} (mode {stat.S_IMODE(mode):04o}): chmod 600 it")
    return data.decode("utf-8")


def _refuse_constant(name: str) -> Any:
    raise InputError("a number that is not finite (strict JSON has none)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400: a literal too large for a float reads as infinity
        raise InputError(f"a number too large to be finite ({text[:20]})")
    return value


def parse_json(text: str | bytes, *, where: str, max_depth: int = MAX_DEPTH, finite: bool = False) -> Any:
    """The JSON value of `text`; InputError when it is nested deeper than `max_depth` (`where` names it).

    With `finite`, NaN and Infinity (which Python's json takes by default) are refused too, and so is a number too
    large to be a finite float (1e400). Malformed JSON raises ValueError (json.JSONDecodeError, or
    UnicodeDecodeError for bytes that are not UTF-8).
    """
    try:
        value = json.loads(text, parse_constant=_refuse_constant if finite else None,
                           parse_float=_finite_float if finite else None)
    except RecursionError:
        raise InputError(f"{where}: nested deeper than {max_depth} levels") from None
    except InputError as error:
        raise InputError(f"{where}: {error}") from None
    check_depth(value, where=where, max_depth=max_depth)
    return value


# Each pattern matches from where it starts to where it must end, never failing after a long scan: finditer would
# scan again from the next character, and a 150,000-character line would cost seconds (quadratic).
_TOML_MULTILINE = re.compile(r'"""[\s\S]*?(?:"""|\Z)|\'\'\'[\s\S]*?(?:\'\'\'|\Z)')
_TOML_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"?|\'[^\'\n]*\'?')
_TOML_COMMENT = re.compile(r"#[^\n]*")
_TOML_DOTTED = re.compile(r"[\w-]+(?:[ \t]*\.[ \t]*[\w-]+)*")


def _longest_dotted_key(text: str) -> int:
    """The most parts of a dotted key (`a.b.c`: 3) outside strings and comments (a float has one dot). Linear in
    the text's length, whatever it holds."""
    bare = _TOML_COMMENT.sub("", _TOML_STRING.sub("s", _TOML_MULTILINE.sub("s", text)))
    return max((match.group().count(".") + 1 for match in _TOML_DOTTED.finditer(bare)), default=1)


def parse_toml(text: str, *, where: str, max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """The TOML document `text`; InputError when nested deeper than `max_depth` (dotted keys and tables count),
    tomllib.TOMLDecodeError (a ValueError) when malformed.

    A dotted key of 20,000 parts (40 KB) costs tomllib 1.5 GB and 6 s, so keys are counted before it parses."""
    if _longest_dotted_key(text) > max_depth:
        raise InputError(f"{where}: nested deeper than {max_depth} levels (a dotted key)")
    try:
        value = tomllib.loads(text)
    except RecursionError:
        raise InputError(f"{where}: nested deeper than {max_depth} levels") from None
    except tomllib.TOMLDecodeError:
        raise
    except ValueError:  # tomllib's int() of a number past Python's 4,300 digits
        raise InputError(f"{where}: a number too long to read (more than 4,300 digits)") from None
    check_depth(value, where=where, max_depth=max_depth)
    return value


def check_depth(value: Any, *, where: str, max_depth: int = MAX_DEPTH) -> None:
    """InputError when `value` (dicts and lists) is nested deeper than `max_depth`; walks without recursion, one
    level at a time (a Prometheus answer of 10,000 servers has ~10⁶ values: no tuple made for each)."""
    level: list[Any] = [value]
    depth = 1
    while level:
        containers = [item for item in level if isinstance(item, dict | list)]
        if not containers:
            return
        if depth > max_depth:
            raise InputError(f"{where}: nested deeper than {max_depth} levels")
        level = []
        for item in containers:
            level.extend(item.values() if isinstance(item, dict) else item)
        depth += 1


def load_json_file(path: str | os.PathLike[str], max_bytes: int, *, what: str = "JSON file",
                   max_depth: int = MAX_DEPTH, finite: bool = False, follow: bool = True) -> Any:
    """`read_file` then `parse_json`; InputError, OSError or ValueError, each naming `path`."""
    data = read_file(path, max_bytes, what=what, follow=follow)
    try:
        return parse_json(data, where=str(path), max_depth=max_depth, finite=finite)
    except InputError:
        raise
    except ValueError as error:
        raise InputError(f"{path}: not valid JSON ({error})") from None

