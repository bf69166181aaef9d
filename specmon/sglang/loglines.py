"""The startup log lines each SGLang version writes, read from its source by `ast` (no import), and the shipped
table of them (`data/loglines.json`, written by `scripts/sglang_loglines.py` from every wheel on the index).

A line is known by the format string of the call that writes it (a logger call, `log_info_on_rank0`, a tqdm
bar's `desc=` or `set_description`), rendered as a template: an f-string's fields as `{expression}` or
`{expression:spec}`, a %-format string as it is. Each `LINES` entry names a milestone and the pattern its
templates match in every version; the table keeps, per milestone, each distinct template with the versions
that write it:

    {"versions": ["0.4.0", ..., "0.5.23"],
     "lines": {"init_begin": [{"template": "Init torch distributed begin.", "versions": ["0.4.0-0.5.20"]},
                              {"template": "Init parallel begin.", "versions": ["0.5.21-0.5.23"]}], ...},
     "flags": {"cuda_graph_max_bs": [{"flag": "--cuda-graph-max-bs", "versions": [...]}, ...]}}

The tracker reads its line knowledge from here (`known_texts`, `versions_of`), so a line SGLang renames is
found by regenerating the table, not by guessing.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from specmon.sglang.flags import DATA_DIR, version_key
from specmon.sglang.source import SGLangSourceError, read_version

SHIPPED_FILE = DATA_DIR / "loglines.json"

LINES: dict[str, str] = {
    "server_args": r"^server_args=",
    "init_begin": r"^Init [\w ]+ begin\.",
    "init_end": r"^Init [\w ]+ ends\.",
    "memory_baseline": r"^Memory baseline taken",
    "load_begin": r"^Load weight begin\.",
    "load_end": r"^Load weight end\.",
    "kv_allocated": r"^KV Cache is allocated|'is allocated'\}\. dtype|#tokens: ",
    "pool_end": r"^Memory pool end",
    "capture_begin": r"^Capture .*\bbegin\.",
    "capture_end": r"^Capture .*\bend\.",
    "capture_sizes": r"^Capture (?:cuda|CUDA|cpu|CPU|npu|NPU) graph (?:bs|num tokens) ",
    "capture_bar": r"^Capturing ",
    "weight_bar": r"(?i)(?:shards|safetensors|checkpoint|InstantTensor)",
    "max_total_num_tokens": r"^max_total_num_tokens=",
    "startup_timings": r"^Engine startup timings",
    "warmup_failed": r"^Initialization failed",
    "ready": r"fired up and ready to roll",
    "dummy_health": r"ummy health check server",
}
"""Each milestone and the pattern its templates match (in every version, whatever SGLang renamed)."""

_BAR_LINES = ("capture_bar", "weight_bar")
"""Milestones written as tqdm descriptions, not logger lines."""
_LOG_CALLS = frozenset(("info", "warning", "error", "debug", "critical", "exception", "log_info_on_rank0",
                        "print_info_once", "info_once", "warning_once"))
_KEYWORDS = ("server_args", "Init ", "Memory baseline", "Load weight", "KV Cache", "Memory pool", "Capture",
             "max_total_num_tokens", "startup timings", "Initialization failed", "fired up", "health check",
             "desc=", "set_description")
_FLAG_DESTS = ("cuda_graph_max_bs", "cuda_graph_max_bs_decode")
RUST_PHRASES: dict[str, tuple[str, ...]] = {
    "warmup_failed": ("startup warmup failed", "startup warmup timed out"),
    "ready": ("The server is fired up and ready to roll!",),
}
"""Lines 0.5.18+'s Rust server (`srt/rust_extensions/_server*.so`) writes through Rust tracing: its format
strings are literals in the library, found by their text."""


def template_of(node: ast.AST) -> str | None:
    """A format string as a template: literal text, an f-string's fields as `{expr}` / `{expr:spec}`, or the
    left side of a `%` format. None when the node is not a string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return template_of(node.left)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return template_of(node.func.value)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = template_of(node.left), template_of(node.right)
        return left + right if left is not None and right is not None else None
    if not isinstance(node, ast.JoinedStr):
        return None
    out = []
    for part in node.values:
        if isinstance(part, ast.Constant):
            out.append(str(part.value))
        elif isinstance(part, ast.FormattedValue):
            text = ast.unparse(part.value)
            if part.conversion == ord("r"):
                text += "!r"
            if part.format_spec is not None:
                spec = template_of(part.format_spec)
                text += f":{spec}" if spec else ""
            out.append("{" + text + "}")
    return "".join(out)


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _format_strings(tree: ast.AST) -> Iterable[tuple[str, str]]:
    """(kind, template) of every log call and tqdm description in a module: kind "log" or "bar"."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _call_name(node)
        if name in _LOG_CALLS:
            args = node.args[1:] if name in ("log_info_on_rank0",) and len(node.args) > 1 else node.args
            template = template_of(args[0]) if args else None
            if template is not None:
                yield "log", template
        elif name == "set_description" and node.args:
            template = template_of(node.args[0])
            if template is not None:
                yield "bar", template
        elif name in ("tqdm", "get_tqdm") or name.endswith("tqdm"):
            for keyword in node.keywords:
                if keyword.arg == "desc" and (template := template_of(keyword.value)) is not None:
                    yield "bar", template


def read_loglines(package_dir: str | Path) -> dict[str, Any]:
    """The milestone templates of the sglang package in `package_dir`: `{"version", "lines": {name: [template,
    ...]}, "flags": {dest: [option, ...]}}`."""
    root = Path(package_dir)
    if not (root / "srt").is_dir():
        raise SGLangSourceError(f"{root}: not an sglang package directory (no srt/)")
    patterns = {name: re.compile(pattern) for name, pattern in LINES.items()}
    found: dict[str, list[str]] = {name: [] for name in LINES}
    for path in sorted((root / "srt").rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if not any(keyword in text for keyword in _KEYWORDS):
            continue
        try:
            tree = ast.parse(text, filename=str(path))
        except (SyntaxError, ValueError):
            continue
        for kind, template in _format_strings(tree):
            for name, pattern in patterns.items():
                if (kind == "bar") == (name in _BAR_LINES) and pattern.search(template) \
                        and template not in found[name]:
                    found[name].append(template)
    for library in sorted((root / "srt" / "rust_extensions").glob("_server*.so")):
        try:
            data = library.read_bytes()
        except OSError:
            continue
        for name, phrases in RUST_PHRASES.items():
            found[name] += [p for p in phrases if p.encode() in data and p not in found[name]]
    return {"version": read_version(root), "lines": found, "flags": _flags(root)}


def _flags(root: Path) -> dict[str, list[str]]:
    """The launch options of the flags hints name (`--cuda-graph-max-bs`, or 0.5.20+'s `-decode`)."""
    from specmon.sglang.source import read_source

    try:
        table = read_source(root, generated_from="loglines")
    except SGLangSourceError:
        return {}
    out: dict[str, list[str]] = {}
    for flag in table["flags"]:
        if flag.get("dest") in _FLAG_DESTS:
            out[flag["dest"]] = [o for o in flag["option_strings"] if o.startswith("--")][:1]
    return out


# --- the shipped table ---------------------------------------------------------------------------------


def _ranges(versions: list[str], every: list[str]) -> list[str]:
    """Versions as ranges of consecutive versions in `every` (`["0.4.0-0.5.20"]`)."""
    out, run = [], []
    for version in every:
        if version in versions:
            run.append(version)
            continue
        if run:
            out.append(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}")
            run = []
    if run:
        out.append(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return out


def merge_versions(readings: list[dict[str, Any]]) -> dict[str, Any]:
    """The shipped table from one `read_loglines` reading per version."""
    readings = sorted(readings, key=lambda r: version_key(r["version"]))
    every = [r["version"] for r in readings]
    lines: dict[str, list[dict[str, Any]]] = {}
    for name in LINES:
        by_template: dict[str, list[str]] = {}
        for reading in readings:
            for template in reading["lines"].get(name, []):
                by_template.setdefault(template, []).append(reading["version"])
        lines[name] = [{"template": t, "versions": _ranges(v, every)} for t, v in by_template.items()]
    flags: dict[str, list[dict[str, Any]]] = {}
    for dest in _FLAG_DESTS:
        by_option: dict[str, list[str]] = {}
        for reading in readings:
            for option in reading.get("flags", {}).get(dest, []):
                by_option.setdefault(option, []).append(reading["version"])
        flags[dest] = [{"flag": o, "versions": _ranges(v, every)} for o, v in by_option.items()]
    return {"versions": every, "lines": lines, "flags": flags}


@functools.lru_cache(maxsize=1)
def load_shipped_loglines() -> Mapping[str, Any]:
    """The shipped table (see the module doc)."""
    try:
        return json.loads(SHIPPED_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SGLangSourceError(f"cannot read {SHIPPED_FILE.name}: {error}") from error


def _expand(ranges: list[str], every: list[str]) -> list[str]:
    out = []
    for item in ranges:
        first, _, last = item.partition("-")
        if first not in every:
            continue
        end = every.index(last) if last in every else every.index(first)
        out += every[every.index(first) : end + 1]
    return out


def templates(name: str) -> list[str]:
    """Every template of milestone `name` in any shipped version."""
    return [entry["template"] for entry in load_shipped_loglines()["lines"].get(name, [])]


def versions_of(name: str, template: str) -> list[str]:
    """The versions that write `template` for milestone `name` (oldest first)."""
    table = load_shipped_loglines()
    for entry in table["lines"].get(name, []):
        if entry["template"] == template:
            return _expand(entry["versions"], table["versions"])
    return []


def literal_head(template: str) -> str:
    """A template's text up to its first field: what every line it writes starts with."""
    cut = [i for i in (template.find("{"), template.find("%")) if i >= 0]
    return template[: min(cut)] if cut else template


def known_texts(name: str) -> tuple[str, ...]:
    """The literal heads of milestone `name`'s templates across every shipped version (for `str.startswith`)."""
    return tuple(dict.fromkeys(literal_head(t).rstrip() for t in templates(name) if literal_head(t).strip()))


def template_regex(template: str) -> re.Pattern[str]:
    """A regex for the lines a template writes: its literal text, each field a list in brackets or text
    without a comma (so a template without a field never matches a line that has one)."""
    field = r"(?:\[[^\]]*\]|\{[^}]*\}|[^,\[{]*?)"
    parts = re.split(r"\{(?:[^{}]|\{[^{}]*\})*\}|%(?:\.\d+)?[sdf]", template)
    return re.compile(field.join(re.escape(part) for part in parts) + r"\s*$")


@functools.lru_cache(maxsize=64)
def _compiled(name: str) -> tuple[tuple[re.Pattern[str], frozenset[str]], ...]:
    table = load_shipped_loglines()
    return tuple(
        (template_regex(entry["template"]), frozenset(_expand(entry["versions"], table["versions"])))
        for entry in table["lines"].get(name, [])
    )


def line_versions(name: str, line: str) -> frozenset[str] | None:
    """The versions whose templates of milestone `name` write `line` (None when no template matches)."""
    found: set[str] = set()
    for pattern, versions in _compiled(name):
        if pattern.match(line):
            found |= versions
    return frozenset(found) if found else None


@functools.lru_cache(maxsize=256)
def can_narrow(name: str, versions: frozenset[str]) -> bool:
    """Whether a line of milestone `name` can narrow `versions` (intersected with the versions of the templates
    it fits, unless none of them is left): not when each template's versions hold all of `versions` or none."""
    return any(not versions <= fits and versions & fits for _, fits in _compiled(name))


def version_span(versions: Iterable[str]) -> str | None:
    """"0.5.21-0.5.23" (or one version) for a set of versions; None for none."""
    if isinstance(versions, frozenset):
        return _frozen_span(versions)
    ordered = sorted(versions, key=version_key)
    if not ordered:
        return None
    return ordered[0] if len(ordered) == 1 else f"{ordered[0]}-{ordered[-1]}"


@functools.lru_cache(maxsize=256)  # the tracker's narrowed sets: a log's few, again at each launch
def _frozen_span(versions: frozenset[str]) -> str | None:
    return version_span(list(versions))


def cuda_graph_flag(versions: Iterable[str] | None) -> str:
    """The flag that caps the captured batch sizes in `versions` (`--cuda-graph-max-bs`, renamed
    `--cuda-graph-max-bs-decode` in 0.5.20); both, with the version of the rename, when the versions (or the
    unknown version) span it."""
    table = load_shipped_loglines()
    every = table["versions"]
    wanted = set(versions or every)
    flags: dict[str, str] = {}  # flag -> the first version with it
    for dest in ("cuda_graph_max_bs", "cuda_graph_max_bs_decode"):
        for entry in table["flags"].get(dest, []):
            having = [v for v in _expand(entry["versions"], every) if v in wanted]
            if having and (entry["flag"] not in flags or version_key(having[0]) < version_key(flags[entry["flag"]])):
                flags[entry["flag"]] = having[0]
    if not flags:
        return "--cuda-graph-max-bs"
    if len(flags) == 1:
        return next(iter(flags))
    (old, _), (new, since) = sorted(flags.items(), key=lambda kv: version_key(kv[1]))[:2]
    return f"{old} (SGLang {since}+: {new})"


def flag_for(dest: str, version: str | None) -> str | None:
    """The option of `dest` in `version` (the newest version's when unknown or not shipped)."""
    table = load_shipped_loglines()
    every = table["versions"]
    entries = table["flags"].get(dest, [])
    for entry in entries:
        if version is not None and version in _expand(entry["versions"], every):
            return entry["flag"]
    if version is None or version not in every:
        newest = [e for e in entries if every[-1] in _expand(e["versions"], every)]
        return newest[0]["flag"] if newest else None
    return None
