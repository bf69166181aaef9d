"""The rules an SGLang version enforces at launch, read from its source by `ast`, or shipped per version.

`read_rules(package_dir)` returns a JSON-ready dict; `scripts/sglang_rules.py` writes the same dict to
`data/rules-VERSION.json` for the versions specmon ships tables of:

    {"version": "0.5.16",
     "speculative": {"all_or_none": "srt/arg_groups/speculative_hook.py:560",   # the bare assert, or null
                     "topk1_sets_draft_tokens": true,    # topk 1 -> draft tokens = steps + 1
                     "draft_defaults_to_target": ["DeepseekV3ForCausalLM", ...],  # MTP: no draft path needed
                     "draft_tree_topk": "srt/speculative/eagle_utils.py:106"},  # draft tokens - 1 <= bounds.tree_candidates
     "custom_all_reduce": {"world_sizes": [2, 4, 6, 8], "pcie_only_max_gpus": 2},
     "algorithms": {"EAGLE": "eagle_head", "EAGLE3": "eagle3_head", "STANDALONE": "model", "NGRAM": "none",
                    "NEXTN": "mtp", "DFLASH": "own", ...},            # what kind of draft each one loads
     "eagle3_draft": {... read_draft_loader ...},
     "eagle3_captures": {... read_captures: what each target architecture captures for an EAGLE-3 head ...}}

The draft kinds (`algorithms`), from the `is_*` predicates of that version's `SpeculativeAlgorithm`, which choose
its worker: "eagle_head" (an EAGLE/EAGLE-2 head on the target's hidden states, sharing its embedding and lm
head), "eagle3_head" (an EAGLE-3 head: the target's hidden size, its own `d2t`/`t2d` vocabulary map), "mtp" (a
multi-token-prediction layer; the target's own by default), "model" (STANDALONE: a model of its own, any width,
with the target's vocabulary and tokenizer), "none" (NGRAM: no draft model) and "own" (a draft architecture of
that algorithm's own, e.g. DFLASH).

`load_shipped_rules(version)` falls back to the nearest older shipped file.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmon.sglang._evaluate import parse_module
from specmon.sglang.captures import CaptureRule, capture_rule, read_captures
from specmon.sglang.draft_loader import DraftLoader, read_draft_loader
from specmon.sglang.flags import DATA_DIR, SHIPPED, SOURCE, version_key
from specmon.sglang.source import SGLangSourceError, read_version, source_stamp

__all__ = ["SGLangRules", "load_shipped_rules", "read_installed_rules", "read_rules"]

_SPEC_FILES = ("srt/server_args.py", "srt/arg_groups/speculative_hook.py", "srt/speculative/spec_info.py")
_ALL_REDUCE_FILES = ("srt/distributed/device_communicators/custom_all_reduce.py",
                     "srt/distributed/device_communicators/custom_all_reduce_utils.py")
_TOPK1_TEXT = "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1"
_PCIE_TEXT = "more than two PCIe-only GPUs"


def _parse(root: Path, relative: str) -> ast.Module | None:
    path = root / relative
    if not path.is_file():
        return None
    return parse_module(path, f"cannot read {relative}")


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _speculative(root: Path) -> dict[str, Any]:
    found: dict[str, Any] = {"all_or_none": None, "topk1_sets_draft_tokens": False,
                             "draft_defaults_to_target": []}
    for relative in _SPEC_FILES:
        tree = _parse(root, relative)
        if tree is None:
            continue
        for node in ast.walk(tree):
            text = ast.unparse(node) if isinstance(node, ast.Assert | ast.If) else ""
            if (isinstance(node, ast.Assert) and found["all_or_none"] is None
                    and "speculative_eagle_topk is None" in text and "speculative_num_draft_tokens is None" in text):
                found["all_or_none"] = f"{relative}:{node.lineno}"
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _TOPK1_TEXT in node.value:
                found["topk1_sets_draft_tokens"] = True
            elif isinstance(node, ast.If) and "model_arch" in ast.unparse(node.test) and re.search(
                    r"speculative_draft_model_path\s*=\s*\w+\.model_path", text):
                archs = [s for s in _strings(node.test) if s.endswith(("ForCausalLM", "Generation", "LM"))]
                for arch in archs:
                    if arch not in found["draft_defaults_to_target"]:
                        found["draft_defaults_to_target"].append(arch)
    found["draft_tree_topk"] = _draft_tree_topk(root)
    return found


_TREE_FILES = ("srt/speculative/eagle_utils.py", "srt/speculative/build_eagle_tree.py")


def _draft_tree_topk(root: Path) -> str | None:
    """Where the EAGLE draft tree picks its `num_draft_tokens - 1` best candidates (`torch.topk(score_list, n -
    1)`): the topk that raises 'selected index k out of range' when the tree has fewer (see `bounds.tree_candidates`)."""
    for relative in _TREE_FILES:
        tree = _parse(root, relative)
        for node in ast.walk(tree) if tree is not None else ():
            if (isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.topk" and len(node.args) >= 2
                    and ast.unparse(node.args[0]) == "score_list" and re.fullmatch(r"\w+ - 1", ast.unparse(node.args[1]))):
                return f"{relative}:{node.lineno}"
    return None


def _custom_all_reduce(root: Path) -> dict[str, Any] | None:
    sizes, pcie_limit = None, None
    for relative in _ALL_REDUCE_FILES:
        tree = _parse(root, relative)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_SUPPORTED_WORLD_SIZES"
                                                      for t in node.targets)):
                try:
                    sizes = [int(v) for v in ast.literal_eval(node.value)]
                except (ValueError, TypeError):
                    sizes = None
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _PCIE_TEXT in node.value:
                pcie_limit = 2
    if sizes is None and pcie_limit is None:
        return None
    return {"world_sizes": sizes, "pcie_only_max_gpus": pcie_limit}


DRAFT_KINDS = ("eagle_head", "eagle3_head", "mtp", "model", "none", "own")
_PREDICATE_KINDS = (("is_ngram", "none"), ("is_standalone", "model"), ("is_eagle3", "eagle3_head"),
                    ("is_frozen_kv_mtp", "mtp"), ("is_dflash", "own"), ("is_dspark", "own"), ("is_uno", "own"),
                    ("is_eagle", "eagle_head"))
"""Which `is_*` predicate of `SpeculativeAlgorithm` says which draft kind, the most specific first."""


def _algorithms(root: Path) -> dict[str, str]:
    """Each speculative algorithm of the version (aliases included) and the kind of draft it loads, read from
    the `is_*` predicates of `srt/speculative/spec_info.py`: an enum's members they name, or (0.5.4-0.5.8's
    registry) the flags each `register_speculative_algorithm` call gives."""
    tree = _parse(root, "srt/speculative/spec_info.py")
    if tree is None:
        return {}
    members: list[str] = []
    predicates: dict[str, set[str]] = {}
    flags: dict[str, set[str]] = {}
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "SpeculativeAlgorithm":
            for item in node.body:
                if isinstance(item, ast.Assign) and isinstance(item.targets[0], ast.Name) and item.targets[0].id.isupper():
                    members.append(item.targets[0].id)
                elif isinstance(item, ast.FunctionDef) and item.name.startswith("is_"):
                    named = {n.attr for n in ast.walk(item) if isinstance(n, ast.Attribute)}
                    named |= set(_strings(item))
                    predicates[item.name] = named
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith(("register_speculative_algorithm",
                                                                             "SpeculativeAlgorithm.register")):
            name = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
            if not isinstance(name, str):
                continue
            members.append(name)
            for keyword in node.keywords:
                if keyword.arg == "flags":
                    flags[name] = set(_strings(keyword.value))
                elif keyword.arg == "aliases":
                    aliases.update(dict.fromkeys(_strings(keyword.value), name))
    hook = _parse(root, "srt/speculative/spec_registry.py")
    for node in ast.walk(hook) if hook is not None else ():
        if isinstance(node, ast.Assign) and "_RESERVED_ALIASES" in ast.unparse(node.targets[0]):
            aliases.update(dict.fromkeys(_strings(node.value), "EAGLE"))
    kinds: dict[str, str] = {}
    for name in dict.fromkeys(members):
        if name == "NONE":
            continue
        marks = flags.get(name, {name})
        for predicate, kind in _PREDICATE_KINDS:
            if predicate in predicates and predicates[predicate] & marks:
                kinds[name] = kind
                break
        else:
            kinds[name] = "own"
    for alias, name in aliases.items():
        if alias not in kinds and name in kinds:
            kinds[alias] = "mtp" if alias == "NEXTN" else kinds[name]
    if "EAGLE" in kinds and "NEXTN" not in kinds and any("NEXTN" in _strings(t) for t in
                                                         (_parse(root, f) for f in _SPEC_FILES) if t is not None):
        kinds["NEXTN"] = "mtp"  # an alias the speculative hook turns into EAGLE
    return kinds


def read_rules(package_dir: str | Path) -> dict[str, Any]:
    """The launch rules of the sglang package in `package_dir`, read from its source (see the module doc)."""
    root = Path(package_dir)
    if not (root / "srt" / "server_args.py").is_file():
        raise SGLangSourceError(f"{root}: not an sglang package directory (no srt/server_args.py)")
    try:
        draft = read_draft_loader(root)
    except SGLangSourceError:
        draft = None
    return {
        "version": read_version(root),
        "speculative": _speculative(root),
        "custom_all_reduce": _custom_all_reduce(root),
        "algorithms": _algorithms(root),
        "eagle3_draft": draft,
        "eagle3_captures": read_captures(root),
    }


@dataclass(frozen=True)
class SGLangRules:
    """One SGLang version's launch rules; `source` is "package source" or "shipped table"."""

    version: str
    source: str
    data: Mapping[str, Any]
    note: str | None = None

    @property
    def speculative(self) -> Mapping[str, Any]:
        return self.data.get("speculative") or {}

    @property
    def custom_all_reduce(self) -> Mapping[str, Any] | None:
        return self.data.get("custom_all_reduce")

    def draft_kind(self, algorithm: str) -> str | None:
        """The kind of draft `algorithm` loads in this version (see the module doc), None when unknown. Rules
        shipped before the kinds were read know EAGLE, EAGLE3, NEXTN and STANDALONE by name."""
        kinds = self.data.get("algorithms")
        if isinstance(kinds, Mapping) and kinds:
            kind = kinds.get(algorithm)
            return kind if kind in DRAFT_KINDS else None
        return {"EAGLE": "eagle_head", "EAGLE3": "eagle3_head", "NEXTN": "mtp", "STANDALONE": "model",
                "NGRAM": "none"}.get(algorithm)

    def capture_rule(self, architecture: str | None) -> CaptureRule | None:
        """Which hidden states a target of `architecture` captures for an EAGLE-3 head (`captures` module doc);
        None when these rules hold no capture facts or none for that architecture."""
        return capture_rule(self.data.get("eagle3_captures"), architecture)

    @property
    def knows_captures(self) -> bool:
        """Whether these rules hold the capture facts at all (read from a source that has them)."""
        return bool(self.data.get("eagle3_captures"))

    @property
    def draft_loader(self) -> DraftLoader | None:
        data = self.data.get("eagle3_draft")
        return DraftLoader(data) if data else None


def _shipped_rule_files() -> dict[str, Path]:
    return {path.stem.removeprefix("rules-"): path for path in DATA_DIR.glob("rules-*.json")}


@functools.lru_cache(maxsize=16)
def load_shipped_rules(version: str) -> SGLangRules:
    """The shipped rules of `version`, else of the nearest older (or the oldest) shipped version."""
    files = _shipped_rule_files()
    if not files:
        raise SGLangSourceError(f"no shipped rules in {DATA_DIR}")
    versions = sorted(files, key=version_key)
    note = None
    used = version
    if version not in files:
        older = [v for v in versions if version_key(v) <= version_key(version)]
        used = older[-1] if older else versions[0]
        note = f"no shipped rules for SGLang {version}; using {used}'s"
    try:
        data = json.loads(files[used].read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SGLangSourceError(f"cannot read {files[used].name}: {error}") from error
    return SGLangRules(used, SHIPPED, data, note)


@functools.lru_cache(maxsize=8)
def _read_installed(path: str, stamp: float) -> SGLangRules:
    data = read_rules(Path(path))
    return SGLangRules(data["version"], SOURCE, data)


def read_installed_rules(package_dir: str | Path) -> SGLangRules:
    """The rules of the sglang package in `package_dir`, read from its source (cached per server_args.py)."""
    return _read_installed(*source_stamp(package_dir))
