"""Server presets: TOML files that say how to launch SGLang and how to benchmark it.

Presets come from three places, later ones overriding earlier ones of the same name: the built-in
directory shipped with specmon, the user config directory (`<user_config_dir>/specmon/presets`), and each
`--presets DIR`. A preset may `extends` another one; its tables are merged recursively over the parent's.
A bad file becomes a `PresetError` naming the file and line; it never hides the other presets.

This module is UI-free (no Textual).
"""

from __future__ import annotations

import re
import shlex
import sys
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specmon.exits import UsageError
from specmon.inputs import KIB, InputError, parse_toml, read_text
from specmon.launch.schema import (
    DEFAULT_LAUNCHER,
    ArgValue,
    BenchSettings,
    PresetFile,
    check_schema,
    key_line,
)
from specmon.ports import is_loopback_host
from specmon.presets import BUILTIN_DIR
from specmon.redact import is_secret_env_name
from specmon.sglang.bounds import tree_candidates
from specmon.text import did_you_mean, quoted
from specmon.typed import FieldError

PYTHON_PLACEHOLDER = "{python}"
DEFAULT_PORT = 30000  # SGLang's default --port
DEFAULT_DEMO_PRESET = "demo-eagle3-10"
MAX_PRESET_BYTES = 256 * KIB

ORIGIN_BUILTIN = "built-in"
ORIGIN_USER = "user"
ORIGIN_EXTRA = "--presets"


@dataclass(frozen=True)
class SpeculativeFlags:
    """The speculative-decoding launch flags of a preset, as written (None where absent)."""

    algorithm: str | None
    num_steps: int | None
    eagle_topk: int | None
    num_draft_tokens: int | None

    @property
    def enabled(self) -> bool:
        return self.algorithm is not None

    @property
    def effective_draft_tokens(self) -> int | None:
        """What SGLang will really use: with topk 1 it rewrites the draft-token count to steps + 1."""
        if self.eagle_topk == 1 and self.num_steps is not None:
            return self.num_steps + 1
        return self.num_draft_tokens

    def problems(self) -> list[str]:
        """Ways these flags break SGLang's rules (sglang-facts §4.2); empty when they are sound."""
        if self.algorithm is None or self.algorithm.upper() == "NGRAM":
            return []
        steps, topk, draft = self.num_steps, self.eagle_topk, self.num_draft_tokens
        if steps is None and topk is None and draft is None:
            return []
        if steps is None or topk is None or draft is None:
            return [
                "give all three of speculative-num-steps, speculative-eagle-topk and "
                "speculative-num-draft-tokens, or none of them (SGLang fails with a bare AssertionError)"
            ]
        out = []
        if topk > 1 and draft - 1 > tree_candidates(steps, topk):
            out.append(
                f"speculative-num-draft-tokens {draft} exceeds what a {steps} x {topk} draft tree offers + 1 = "
                f"{tree_candidates(steps, topk) + 1} (SGLang's draft raises 'selected index k out of range')"
            )
        if topk == 1 and draft != steps + 1:
            out.append(
                f"with speculative-eagle-topk 1 SGLang rewrites speculative-num-draft-tokens {draft} "
                f"to steps + 1 = {steps + 1}"
            )
        return out


@dataclass(frozen=True)
class Preset:
    """One resolved preset: how to launch the server (`argv()`, `env`) and how to benchmark it (`bench`)."""

    name: str
    description: str = ""
    extends: str | None = None
    launcher: tuple[str, ...] = DEFAULT_LAUNCHER
    args: dict[str, ArgValue] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    bench: BenchSettings = field(default_factory=BenchSettings)
    source: Path | None = None
    demo: bool = False
    origin: str = ORIGIN_BUILTIN
    overrides: Path | None = None  # the file of a same-named preset this one replaced

    def argv(self, port: int | None = None) -> list[str]:
        """The launch command: launcher, then `--flag value` per arg in order.

        `true` gives a bare `--flag`, `false` leaves the flag out, a list gives its values after one flag.
        A launcher element "{python}" is the running interpreter. `port` overrides `--port`.
        """
        out = [sys.executable if part == PYTHON_PLACEHOLDER else part for part in self.launcher]
        args = dict(self.args)
        if port is not None:
            args["port"] = port
        for key, value in args.items():
            flag = f"--{key}"
            if value is True:
                out.append(flag)
            elif value is False:
                continue
            elif isinstance(value, list):
                if value:
                    out.append(flag)
                    out.extend(_format_value(v) for v in value)
            else:
                out.extend((flag, _format_value(value)))
        return out

    def command_line(self, port: int | None = None) -> str:
        """`argv()` joined for display only (never run through a shell)."""
        return shlex.join(self.argv(port))

    @property
    def port(self) -> int:
        """The port the server will listen on (SGLang's default when the preset gives none)."""
        value = self.args.get("port")
        return value if isinstance(value, int) and not isinstance(value, bool) else DEFAULT_PORT

    @property
    def host(self) -> str:
        value = self.args.get("host")
        return value if isinstance(value, str) else "127.0.0.1"

    @property
    def binds_non_loopback(self) -> bool:
        """Whether the server would listen beyond this machine (e.g. `host = "0.0.0.0"`)."""
        return not is_loopback_host(self.host)

    @property
    def speculative(self) -> SpeculativeFlags:
        def get(key: str) -> Any:
            value = self.args.get(f"speculative-{key}")
            return None if value is False else value

        return SpeculativeFlags(
            algorithm=get("algorithm"),
            num_steps=get("num-steps"),
            eagle_topk=get("eagle-topk"),
            num_draft_tokens=get("num-draft-tokens"),
        )

    def display_env(self) -> dict[str, str]:
        """`env` for showing to a person: values of secret-looking variables (tokens, keys) hidden."""
        return {k: "<hidden>" if is_secret_env_name(k) else v for k, v in self.env.items()}

    def to_json(self) -> dict[str, Any]:
        """The `specmon presets --json` shape of this preset (secret-looking env values hidden)."""
        return {
            "name": self.name,
            "description": self.description,
            "extends": self.extends,
            "demo": self.demo,
            "source": str(self.source) if self.source else None,
            "origin": self.origin,
            "overrides": str(self.overrides) if self.overrides else None,
            "launcher": list(self.launcher),
            "args": dict(self.args),
            "env": self.display_env(),
            "bench": self.bench.to_json(),
            "argv": self.argv(),
            "command_line": self.command_line(),
            "speculative_problems": self.speculative.problems(),
            "warnings": preset_warnings(self),
        }


def host_warning(preset: Preset) -> str | None:
    """A warning when the preset's server binds a non-loopback host, else None."""
    if not preset.binds_non_loopback:
        return None
    return (
        f"the server binds {preset.host} (--host): anyone who can reach this machine can use it; "
        "bind 127.0.0.1 and reach it through an SSH tunnel"
    )


def preset_warnings(preset: Preset) -> list[str]:
    """Everything to warn about before launching `preset`: a non-loopback host, settings SGLang rewrites."""
    warning = host_warning(preset)
    return ([warning] if warning else []) + preset.speculative.problems()


@dataclass(frozen=True)
class PresetError:
    """A preset file that could not be used: the file, the line (when known) and why."""

    path: Path
    line: int | None
    message: str
    preset: str | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else str(self.path)
        return f"{where}: {self.message}"

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "line": self.line, "message": self.message, "preset": self.preset}


@dataclass
class PresetSet:
    """Every usable preset by name (in load order) and the errors of the files that were not usable."""

    presets: dict[str, Preset] = field(default_factory=dict)
    errors: list[PresetError] = field(default_factory=list)

    def get(self, name: str) -> Preset | None:
        return self.presets.get(name)

    def missing(self, name: str) -> str:
        """Why ``name`` gives no preset, in one line for every command that takes one: its file's errors when a
        file defines it but is not usable, else the names closest to it (a typo)."""
        bad = [str(error) for error in self.errors if error.preset == name]
        if bad:
            return f"preset {quoted(name)} is not usable: " + "; ".join(bad)
        return f"no preset named {quoted(name)}{did_you_mean(name, self.presets)} (see `specmon presets`)"

    def demo_presets(self) -> list[Preset]:
        """The presets `specmon demo` may launch (they run the emulator), by name."""
        return sorted((p for p in self.presets.values() if p.demo), key=lambda p: p.name)

    def default_demo(self) -> Preset | None:
        """`DEFAULT_DEMO_PRESET` if it is loaded, else the first demo preset."""
        demos = self.demo_presets()
        for preset in demos:
            if preset.name == DEFAULT_DEMO_PRESET:
                return preset
        return demos[0] if demos else None


def require_preset(presets: PresetSet, name: str) -> Preset:
    """The preset a command line names: every command looks its preset up here. UsageError (exit 2, one line) when
    there is none: its file's errors, else the names closest to it (`PresetSet.missing`)."""
    preset = presets.get(name)
    if preset is None:
        raise UsageError(presets.missing(name))
    return preset


def user_presets_dir() -> Path:
    """The user's preset directory: `<platformdirs user_config_dir>/specmon/presets`."""
    import platformdirs

    return Path(platformdirs.user_config_dir("specmon")) / "presets"


def load_presets(
    extra_dirs: Iterable[str | Path] = (),
    *,
    user_dir: str | Path | None | bool = True,
    builtin_dir: str | Path = BUILTIN_DIR,
) -> PresetSet:
    """Load, validate and resolve every preset.

    `user_dir=True` means `user_presets_dir()` (skipped silently when it does not exist); `None`/`False`
    skips it. Each of `extra_dirs` must exist. Never raises for a bad file: it becomes an error entry.
    """
    if isinstance(extra_dirs, str | Path):
        extra_dirs = [extra_dirs]
    layers: list[tuple[str, Path, bool]] = [(ORIGIN_BUILTIN, Path(builtin_dir), True)]
    if user_dir is True:
        layers.append((ORIGIN_USER, user_presets_dir(), False))
    elif user_dir:
        layers.append((ORIGIN_USER, Path(user_dir), False))
    layers.extend((ORIGIN_EXTRA, Path(d), True) for d in extra_dirs)
    return _load_layers(layers)


def _format_value(value: str | int | float) -> str:
    return str(value)


def merge_tables(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`over` merged recursively onto `base`; keys keep the parent's order, new keys follow."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_tables(out[key], value)
        else:
            out[key] = value
    return out


# ---------------------------------------------------------------------------------------------------------
# Loading: read each file, check its schema, then resolve `extends` across all layers.

_TOML_POSITION = re.compile(r"\s*\(at (?:line (\d+), column \d+|end of document)\)$")
_RESOLVED_KEYS = ("server", "bench", "demo")


@dataclass
class _RawPreset:
    name: str
    doc: dict[str, Any]  # as parsed: `extends` merges these tables, then checks the result again
    typed: PresetFile
    path: Path
    text: str
    origin: str


def _load_layers(layers: list[tuple[str, Path, bool]]) -> PresetSet:
    errors: list[PresetError] = []
    defs: dict[str, list[_RawPreset]] = {}
    for origin, directory, must_exist in layers:
        if not directory.is_dir():
            if must_exist:
                errors.append(PresetError(directory, None, "no such preset directory"))
            continue
        names_here: dict[str, Path] = {}
        for path in sorted(directory.glob("*.toml")):
            raw = _read_preset_file(path, origin, errors)
            if raw is None:
                continue
            if raw.name in names_here:
                errors.append(
                    PresetError(
                        path,
                        key_line(raw.text, ("name",)),
                        f"preset name '{raw.name}' is already used by {names_here[raw.name]}",
                        raw.name,
                    )
                )
                continue
            names_here[raw.name] = path
            defs.setdefault(raw.name, []).append(raw)
    resolver = _Resolver(defs, errors)
    presets = {}
    for name in defs:
        preset = resolver.effective(name)
        if preset is not None:
            presets[name] = preset
    return PresetSet(presets, errors)


def _read_preset_file(path: Path, origin: str, errors: list[PresetError]) -> _RawPreset | None:
    try:
        text = read_text(path, MAX_PRESET_BYTES, what="preset")
    except InputError as exc:
        errors.append(PresetError(path, None, f"cannot read the file: {str(exc).removeprefix(f'{path}: ')}"))
        return None
    except (OSError, UnicodeDecodeError) as exc:
        errors.append(PresetError(path, None, f"cannot read the file: {exc}"))
        return None
    try:
        doc = parse_toml(text, where=str(path))
    except InputError as exc:
        errors.append(PresetError(path, None, str(exc).removeprefix(f"{path}: ")))
        return None
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = _TOML_POSITION.search(message)
        line = None
        if match:
            line = int(match.group(1)) if match.group(1) else max(1, len(text.splitlines()))
            message = message[: match.start()]
        errors.append(PresetError(path, line, f"invalid TOML: {message}"))
        return None
    try:
        typed = check_schema(doc)
    except FieldError as exc:
        name = doc.get("name") if isinstance(doc.get("name"), str) else path.stem
        errors.append(PresetError(path, key_line(text, exc.keypath), exc.message, name))
        return None
    return _RawPreset(typed.name or path.stem, doc, typed, path, text, origin)


MAX_EXTENDS_DEPTH = 32
"""Presets in one `extends` chain, the preset itself included (the built-in ones: 2). A longer chain is refused
with one error per preset beyond the limit: resolving it costs no deeper recursion than this."""


class _TooDeep(Exception):
    """The chain being resolved passed MAX_EXTENDS_DEPTH presets: `chain`, the names on the resolver's stack and
    the parent the last of them extends."""

    def __init__(self, chain: list[str]) -> None:
        super().__init__()
        self.chain = chain


def _chain_text(names: list[str], limit: int = 6) -> str:
    """`a -> b -> c`, a long chain cut in its middle (`a -> b -> ... (1,994 more) -> y -> z`)."""
    if len(names) <= limit:
        return " -> ".join(names)
    half = limit // 2
    return " -> ".join([*names[:half], f"... ({len(names) - 2 * half:,} more)", *names[-half:]])


class _Resolver:
    """Resolves `extends` chains; every definition that fails adds one error. A chain is at most
    MAX_EXTENDS_DEPTH presets long, so the recursion is bounded whatever the files say."""

    def __init__(self, defs: dict[str, list[_RawPreset]], errors: list[PresetError]):
        self.defs = defs
        self.errors = errors
        self.resolved: dict[tuple[str, int], tuple[Preset, dict[str, Any], int] | None] = {}
        self.effective_index: dict[str, int | None] = {}
        self.stack: list[tuple[str, int]] = []

    def effective(self, name: str) -> Preset | None:
        found = self._effective(name)
        return found[0] if found else None

    def _effective(self, name: str) -> tuple[Preset, dict[str, Any], int] | None:
        if name in self.effective_index:
            idx = self.effective_index[name]
            return None if idx is None else self.resolved[(name, idx)]
        for idx in reversed(range(len(self.defs[name]))):
            found = self._resolve(name, idx)
            if found is not None:
                self.effective_index[name] = idx
                return found
        self.effective_index[name] = None
        return None

    def _fail(self, raw: _RawPreset, message: str) -> None:
        self.errors.append(PresetError(raw.path, key_line(raw.text, ("extends",)), message, raw.name))

    def _resolve(self, name: str, idx: int) -> tuple[Preset, dict[str, Any], int] | None:
        key = (name, idx)
        if key in self.resolved:
            return self.resolved[key]
        raw = self.defs[name][idx]
        position = len(self.stack)
        self.stack.append(key)
        try:
            result = self._build(raw, idx)
        except _TooDeep as deep:
            if len(deep.chain) - position <= MAX_EXTENDS_DEPTH:
                raise  # this preset's own chain may be short: resolved again from it when asked
            self._fail(raw, f"extends a chain of more than {MAX_EXTENDS_DEPTH} presets "
                            f"({_chain_text(deep.chain[position:])})")
            result = None
        finally:
            self.stack.pop()
        self.resolved[key] = result
        return result

    def _build(self, raw: _RawPreset, idx: int) -> tuple[Preset, dict[str, Any], int] | None:
        parent_name = raw.typed.extends
        base: dict[str, Any] = {}
        depth = 1
        if parent_name:
            if len(self.stack) >= MAX_EXTENDS_DEPTH:
                raise _TooDeep([*(n for n, _ in self.stack), parent_name])
            if parent_name == raw.name:
                if idx == 0:
                    self._fail(
                        raw, f"'{raw.name}' extends itself, and there is no earlier '{raw.name}' to extend"
                    )
                    return None
                parent = self._resolve(raw.name, idx - 1)
            elif parent_name not in self.defs:
                self._fail(raw, f"extends {quoted(parent_name)}, which is not a known preset"
                                + did_you_mean(parent_name, self.defs))
                return None
            elif any(n == parent_name for n, _ in self.stack):
                names = [n for n, _ in self.stack]
                chain = names[names.index(parent_name):] + [parent_name]
                self._fail(raw, f"extends cycle: {_chain_text(chain)}")
                return None
            else:
                parent = self._effective(parent_name)
            if parent is None:
                self._fail(raw, f"extends {quoted(parent_name)}, which could not be loaded (see its error)")
                return None
            base, depth = parent[1], parent[2] + 1
            if depth > MAX_EXTENDS_DEPTH:
                self._fail(raw, f"extends a chain of more than {MAX_EXTENDS_DEPTH} presets "
                                f"({_chain_text([raw.name, parent_name, '...'])})")
                return None
        merged = merge_tables(base, {k: raw.doc[k] for k in _RESOLVED_KEYS if k in raw.doc})
        try:
            tables = check_schema(merged)  # tables each valid on their own make a valid whole: checked all the same
        except FieldError as exc:
            self._fail(raw, f"with what it extends: {exc.message}")
            return None
        preset = Preset(
            name=raw.name,
            description=raw.typed.description,
            extends=parent_name,
            launcher=tables.server.launcher,
            args=dict(tables.server.args),
            env=dict(tables.server.env),
            bench=tables.bench,
            source=raw.path,
            demo=tables.demo,
            origin=raw.origin,
            overrides=self.defs[raw.name][idx - 1].path if idx > 0 else None,
        )
        return preset, merged, depth
