"""The draft checkpoint doctor: config.json against the target's, safetensors headers, and the key names
against what one SGLang version's EAGLE-3 loader takes (`specmon doctor DRAFT`). No torch.

What a draft must share with its target depends on the kind of draft the algorithm loads (`SGLangRules.
draft_kind`): an EAGLE, EAGLE-3 or MTP head reads the target's hidden states, so its hidden size is the
target's; a STANDALONE draft is a model of its own (any width) whose token ids must mean the target's tokens:
the same vocabulary and tokenizer; NGRAM loads no draft at all."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specmon.inputs import MIB, InputError, load_json_file, parse_json, read_file
from specmon.preflight.heads import check_captures, is_speculators, layer_config, sglang_config
from specmon.preflight.report import Problem
from specmon.preflight.safetensors import CheckpointError, read_header
from specmon.sglang.draft_loader import MAX_DRAFT_LAYERS, LoadOutcome, draft_layers
from specmon.sglang.rules import SGLangRules
from specmon.text import shown

MAX_CONFIG_BYTES = 10 * MIB
MAX_INDEX_BYTES = 64 * MIB  # a 1T-parameter model's index lists ~100,000 tensors: ~10 MB
INDEX_FILE = "model.safetensors.index.json"
_SHOWN = 8


@dataclass
class DraftReport:
    """What the doctor found in one draft checkpoint."""

    path: Path
    problems: list[Problem] = field(default_factory=list)
    config: dict[str, Any] | None = None
    names: list[str] = field(default_factory=list)
    shapes: dict[str, Any] = field(default_factory=dict)
    """Each tensor's shape as its safetensors header gives it."""
    total_bytes: int = 0
    outcome: LoadOutcome | None = None
    kind: str | None = None
    """The kind of draft it was checked as (see the module doc)."""
    notes: list[str] = field(default_factory=list)
    """What was checked beyond the problems (e.g. the tokenizer comparison)."""

    @property
    def architectures(self) -> list[str]:
        archs = (self.config or {}).get("architectures")
        return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []

    @property
    def is_eagle3(self) -> bool:
        return any("eagle3" in arch.lower() for arch in self.architectures)

    def add(self, severity: str, code: str, message: str, hint: str | None = None) -> None:
        self.problems.append(Problem(severity, code, message, hint, "--speculative-draft-model-path"))  # type: ignore[arg-type]


def read_config(path: Path) -> dict[str, Any]:
    """A checkpoint's config.json as a dict; CheckpointError when missing, huge or not a JSON object."""
    file = path / "config.json"
    try:
        data = load_json_file(file, MAX_CONFIG_BYTES, what="config.json")
    except FileNotFoundError:
        raise CheckpointError(f"{path} has no config.json") from None
    except OSError as error:
        raise CheckpointError(f"{file}: cannot read: {error.strerror or error}") from None
    except InputError as error:
        raise CheckpointError(str(error)) from None
    except (UnicodeDecodeError, ValueError) as error:
        raise CheckpointError(f"{file}: not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{file}: not a JSON object")
    return data


def _shorten(names: list[str] | tuple[str, ...]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def _read_shards(report: DraftReport) -> None:
    path = report.path
    shards = sorted(path.glob("*.safetensors"))
    index_names: set[str] | None = None
    index_file = path / INDEX_FILE
    if index_file.exists():
        try:
            index = load_json_file(index_file, MAX_INDEX_BYTES, what="safetensors index")
        except InputError as error:
            report.add("error", "draft-index-unreadable", str(error))
            index = None
        except (OSError, UnicodeDecodeError, ValueError) as error:
            report.add("error", "draft-index-unreadable", f"{INDEX_FILE}: {error}")
            index = None
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if isinstance(weight_map, dict):
            index_names = set(weight_map)
            for listed in sorted({str(v) for v in weight_map.values()}):
                if not (path / listed).is_file():
                    report.add("error", "draft-shard-missing", f"{INDEX_FILE} lists {listed}, which is missing")
        elif index is not None:
            report.add("error", "draft-index-unreadable", f"{INDEX_FILE} has no weight_map object")
    if not shards:
        other = [p.name for p in path.glob("*.bin")] + [p.name for p in path.glob("*.pt")]
        if other:
            report.add("warning", "draft-not-safetensors",
                       f"{path} holds {_shorten(other)} but no .safetensors: the keys cannot be checked without torch")
        else:
            report.add("error", "draft-no-weights", f"{path} holds no .safetensors weights")
        return
    seen: dict[str, str] = {}
    for shard in shards:
        try:
            header = read_header(shard)
        except CheckpointError as error:
            report.add("error", "draft-shard-unreadable", str(error), "re-copy or re-save the checkpoint")
            continue
        report.total_bytes += header.file_size
        for name, entry in header.tensors.items():
            if name in seen:
                report.add("error", "draft-duplicate-key", f"{name} is in both {seen[name]} and {shard.name}")
            seen[name] = shard.name
            report.shapes[name] = entry.get("shape") if isinstance(entry, dict) else None
    report.names = list(seen)
    if index_names is not None and set(seen) != index_names:
        missing, extra = sorted(index_names - set(seen)), sorted(set(seen) - index_names)
        parts = ([f"listed but in no shard: {_shorten(missing)}"] if missing else []) + (
            [f"in a shard but not listed: {_shorten(extra)}"] if extra else [])
        report.add("error", "draft-index-mismatch", f"{INDEX_FILE} does not match the shards: " + "; ".join(parts))


SIZE_KEYS = ("hidden_size", "target_hidden_size", "vocab_size", "draft_vocab_size")
"""The sizes the doctor compares: each a whole number above 0 when present (draft_vocab_size may be null)."""
HEAD_KINDS = ("eagle_head", "eagle3_head", "mtp")
"""Drafts that read the target's hidden states: their hidden size is the target's."""
MAX_TOKENIZER_BYTES = 64_000_000
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt", "tiktoken.model")


def guess_kind(architectures: list[str]) -> str:
    """The draft kind a checkpoint looks like when no algorithm says: an EAGLE-3 or EAGLE head by its
    architecture's name, else a model of its own (what STANDALONE loads)."""
    names = " ".join(architectures).lower()
    if "eagle3" in names:
        return "eagle3_head"
    return "eagle_head" if "eagle" in names else "model"


NO_MODEL_TYPE = ("SGLang reads a checkpoint's config through transformers, which refuses it at start-up (\"Should "
                 "have a `model_type` key in its config.json\"), or guesses the type from a model name in the "
                 "folder's path")


def target_view(target: dict[str, Any]) -> dict[str, Any]:
    """What the draft is checked against in a target's config: its text model's hidden size, layer count and
    vocabulary (a multimodal target, e.g. Kimi-K2.5, keeps them in `text_config`, as SGLang reads them), and
    its architecture."""
    text = target.get("text_config")
    view = dict(text) if isinstance(text, dict) else {}
    for key in ("hidden_size", "num_hidden_layers", "vocab_size"):
        if view.get(key) is None and target.get(key) is not None:
            view[key] = target[key]
    archs = target.get("architectures")
    view["architecture"] = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    return view


def _check_format(report: DraftReport, config: dict[str, Any], rules: SGLangRules, kind: str) -> None:
    """What transformers' AutoConfig needs before SGLang reads anything: a model_type."""
    if is_speculators(config):
        archs = ", ".join(report.architectures) or "no architectures"
        try:
            sglang_config(config)
            to = "layers.0" if rules.draft_loader is None or rules.draft_loader.data.get("layer_list") else "midlayer"
            fix = (f"specmon fix-draft-keys {report.path} {report.path}-sglang --to {to} (writes the copy's "
                   "config.json as SGLang reads it)")
        except ValueError as error:
            fix = f"write config.json as SGLang reads it by hand: {error}"
        report.add("error", "draft-speculators-format",
                   f"config.json is the speculators library's ({archs}, the layer's settings nested in "
                   "transformer_layer_config, no model_type): SGLang reads a draft's config through transformers, "
                   "which refuses it at start-up (\"Should have a `model_type` key in its config.json\")", fix)
    elif "model_type" not in config:
        report.add("error", "draft-no-model-type", f"config.json has no model_type: {NO_MODEL_TYPE}",
                   'add the model_type of the model it was saved as ("llama" for an EAGLE-3 head)'
                   if kind in HEAD_KINDS else
                   "add the model_type of the model it was saved as")


def _said(value: Any) -> str:
    """A config value as a message shows it: an integer as written, anything else bounded and escaped."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else shown(value)


def _compare_sizes(report: DraftReport, layer: dict[str, Any], target: dict[str, Any] | None, kind: str) -> None:
    """Hidden size (a head's) and vocabulary against the target's; a comparison that cannot be made is said."""
    if target is None:
        report.notes.append("hidden size, vocabulary and captured layers not compared: no target (give --target "
                            "or --preset)")
        return
    pairs = [("vocab_size", layer.get("vocab_size"))]
    if kind in HEAD_KINDS:
        pairs.insert(0, ("hidden_size", layer.get("target_hidden_size") or layer.get("hidden_size")))
    for key, ours in pairs:
        theirs = target.get(key)
        if ours is None or theirs is None:
            whose = "the draft's config.json" if ours is None else "the target's config.json"
            report.add("warning", "draft-config-unchecked", f"{key} not compared with the target's: {whose} gives "
                       "none (transformers then takes its model type's default)", f"add {key} to {whose}")
        elif ours != theirs and key == "hidden_size":
            report.add("error", "draft-hidden-size", f"the draft head expects target hidden size {_said(ours)}, "
                       f"the target has {_said(theirs)}", "this draft was trained for another target model")
        elif ours != theirs:
            report.add("error", "draft-vocab-size", f"draft vocab_size {_said(ours)} differs from the target's "
                       f"{_said(theirs)}", "this draft was trained for another tokenizer")


def _check_config(report: DraftReport, target: dict[str, Any] | None, rules: SGLangRules, kind: str,
                  target_dir: Path | None) -> None:
    config = report.config or {}
    layer = dict(layer_config(config))
    _check_format(report, config, rules, kind)
    for key in SIZE_KEYS:
        value = config.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**31):
            report.add("error", "draft-size", f"config.json: {key} {shown(value)} cannot be a size (a whole number "
                       "above 0)", "a config.json written by a training script that failed: check it by hand")
    if not report.architectures:
        report.add("error", "draft-no-architectures", "config.json has no architectures list",
                   'add "architectures": ["LlamaForCausalLMEagle3"] for an EAGLE-3 draft'
                   if kind == "eagle3_head" else "copy the architectures list of the model the draft was saved as")
    view = target_view(target) if target is not None else None
    _compare_sizes(report, {**config, **layer}, view, kind)
    if kind == "model" and target_dir is not None:
        _check_tokenizer(report, target_dir)
    if not report.is_eagle3:
        return
    loader = rules.draft_loader
    if "draft_vocab_size" not in config:
        report.add("error", "draft-vocab-missing", "config.json has no draft_vocab_size: SGLang reads it unguarded "
                   "(AttributeError at load)", "set draft_vocab_size (the lm_head rows), or null to use the target's head")
    elif config["draft_vocab_size"] is None and loader is not None and not loader.data.get("draft_vocab_null_ok"):
        report.add("error", "draft-vocab-null", f"draft_vocab_size null is not understood by SGLang {rules.version}")
    layers = layer.get("num_hidden_layers", 1)
    if draft_layers(layer) is None:
        report.add("error", "draft-layers", f"num_hidden_layers {shown(layers)} cannot be a draft's layer count "
                   f"(1 to {MAX_DRAFT_LAYERS}); the keys are checked as for one layer")
    elif loader is not None and loader.data.get("max_layers") == 1 and layers != 1:
        report.add("error", "draft-layers", f"num_hidden_layers is {layers}; SGLang {rules.version} raises "
                   "'EAGLE3 currently only supports 1 layer'")
    names = set(report.names)
    if report.names:
        vocab, draft_vocab = layer.get("vocab_size"), config.get("draft_vocab_size")
        if "d2t" not in names and isinstance(draft_vocab, int) and draft_vocab != vocab:
            report.add("error", "draft-no-d2t", f"no d2t tensor, but the draft vocabulary ({draft_vocab}) is not "
                       f"the target's ({vocab}): draft tokens would map to the wrong target ids")
        if "t2d" not in names and isinstance(draft_vocab, int) and draft_vocab != vocab:
            report.add("warning", "draft-no-t2d", "no t2d tensor (SGLang ignores it, but training tools expect it)")
    if view is not None:
        try:  # a speculators config is checked as the SGLang config it converts to
            as_read = sglang_config(config) if is_speculators(config) else config
        except ValueError:
            report.notes.append("captured target layers not checked: config.json is not SGLang's (see above)")
        else:
            check_captures(as_read, report.shapes, view, rules, report.add, report.notes.append)


def _tokenizer_files(path: Path) -> dict[str, Path]:
    return {name: path / name for name in TOKENIZER_FILES if (path / name).is_file()}


def _vocabulary(file: Path) -> Any:
    """What decides a token's id in a tokenizer file: tokenizer.json's model vocabulary and added tokens, the
    bytes of any other file."""
    try:
        data = read_file(file, MAX_TOKENIZER_BYTES, what="tokenizer file")
    except (OSError, InputError) as error:
        raise CheckpointError(f"too big or unreadable to compare: {error}") from None
    if file.name != "tokenizer.json":
        return data
    try:
        parsed = parse_json(data, where=str(file))
    except (UnicodeDecodeError, ValueError) as error:
        raise CheckpointError(f"{file}: not valid JSON: {error}") from None
    if not isinstance(parsed, dict):
        raise CheckpointError(f"{file}: not a JSON object")
    model, added = parsed.get("model"), parsed.get("added_tokens")
    model, added = model if isinstance(model, dict) else {}, added if isinstance(added, list) else []
    return model.get("vocab"), sorted((t.get("id"), t.get("content")) for t in added if isinstance(t, dict))


def _check_tokenizer(report: DraftReport, target_dir: Path) -> None:
    """A STANDALONE draft proposes token ids that the target verifies as its own: both tokenizers must give
    the same ids (SGLang itself tokenizes with the target's only)."""
    draft_files, target_files = _tokenizer_files(report.path), _tokenizer_files(target_dir)
    shared = [name for name in draft_files if name in target_files]
    if not draft_files or not target_files or not shared:
        report.notes.append("tokenizer not compared (the draft or the target has no tokenizer file of the other's "
                            "kind): only the vocabulary size is checked")
        return
    for name in shared:
        try:
            same = _vocabulary(draft_files[name]) == _vocabulary(target_files[name])
        except (OSError, CheckpointError) as error:
            report.add("warning", "draft-tokenizer-unreadable", f"{name} not compared: {error}")
            continue
        if not same:
            report.add("error", "draft-tokenizer",
                       f"the draft's {name} gives other token ids than the target's: SGLang verifies the draft's "
                       "token ids as the target's, so it would accept almost nothing",
                       "use a draft trained with the target's tokenizer")
            return
    report.notes.append(f"tokenizer: the draft's {', '.join(shared)} give the target's token ids")


def _check_keys(report: DraftReport, rules: SGLangRules) -> None:
    loader = rules.draft_loader
    if loader is None or not report.is_eagle3 or not report.names:
        return
    outcome = loader.simulate(report.names, report.config or {})
    report.outcome = outcome
    attr = loader.data["layer_attr"]
    where = f"SGLang {rules.version}'s {loader.data.get('file', 'llama_eagle3.py')} ({rules.source})"
    layer_keys = [n for n in outcome.dropped if n.split(".")[0] in ("layers", "midlayer", "model")]
    fix = None
    if layer_keys:
        target = "layers.0" if loader.data["layer_list"] else attr
        fix = f"specmon fix-draft-keys {report.path} {report.path}-fixed --to {target}"
    if outcome.crash:
        report.add("error", "draft-keys-crash",
                   f"{where} raises {outcome.crash} on these keys: {_shorten(list(outcome.dropped))}", fix)
    elif outcome.dropped:
        report.add("error", "draft-keys-dropped",
                   f"{where} silently drops {len(outcome.dropped)} of {len(report.names)} keys: "
                   f"{_shorten(list(outcome.dropped))}; left unloaded (random weights, acceptance near 1): "
                   f"{_shorten(list(outcome.unloaded))}", fix or "rename the keys to the names SGLang loads")
    elif outcome.unloaded:
        report.add("error", "draft-params-unloaded",
                   f"{where} leaves these parameters unloaded (random weights): {_shorten(list(outcome.unloaded))}")


def examine_draft(
    path: str | Path, rules: SGLangRules, target: str | Path | None = None, kind: str | None = None
) -> DraftReport:
    """Check the draft checkpoint at `path` for the SGLang whose `rules` are given, as a draft of `kind` (what
    the algorithm loads, `SGLangRules.draft_kind`; guessed from its architectures when None)."""
    report = DraftReport(Path(path))
    if not report.path.is_dir():
        report.add("error", "draft-missing", f"{report.path} is not a directory")
        return report
    try:
        report.config = read_config(report.path)
    except CheckpointError as error:
        report.add("error", "draft-config", str(error))
    target_config = None
    if target is not None and Path(target).is_dir():
        try:
            target_config = read_config(Path(target))
        except CheckpointError as error:
            report.problems.append(Problem("error", "target-config", str(error), None, "--model-path"))
    _read_shards(report)
    if report.config is not None:
        report.kind = kind or guess_kind(report.architectures)
        target_dir = Path(target) if target is not None and target_config is not None else None
        _check_config(report, target_config, rules, report.kind, target_dir)
        _check_keys(report, rules)
    return report
