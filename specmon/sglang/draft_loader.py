"""Which weight names an SGLang version's EAGLE-3 draft model loads, read from its `llama_eagle3.py` by `ast`.

`read_draft_loader(package_dir)` returns a JSON-ready dict (shipped per version in `data/rules-VERSION.json`):

    {"layer_attr": "midlayer", "layer_list": false, "renames": {}, "stacked": [[".qkv_proj", ".q_proj"], ...],
     "unknown_names": "skipped", "max_layers": 1, "modules": {"embed_tokens": ..., "fc": ..., ...}}

- `layer_attr`/`layer_list`: the decoder layer's attribute in the draft's model (`self.midlayer = Layer(...)`,
  or `self.layers = nn.ModuleList([...])` in 0.5.16+), so its weights are `midlayer.*` or `layers.N.*`.
- `renames`: the legacy-name map `load_weights` applies first (0.5.16: `midlayer` -> `layers.0`).
- `unknown_names`: "skipped" when `load_weights` drops a name it has no parameter for without a word
  (`if param_name in params_dict`), "delegated" when it hands names to `LlamaForCausalLM.load_weights`
  (0.4.x: a stacked q/k/v/gate/up name it lacks raises KeyError, another name logs a warning).

`DraftLoader.simulate(names, config)` replays that `load_weights` on a checkpoint's key names: what loads,
what is dropped, and which parameters stay unloaded. Nothing is imported.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specmon.sglang._evaluate import parse_module
from specmon.sglang.source import SGLangSourceError

__all__ = ["MAX_DRAFT_LAYERS", "DraftLoader", "LoadOutcome", "draft_layers", "read_draft_loader"]

MODEL_FILE = Path("srt") / "models" / "llama_eagle3.py"
# The parameters of SGLang's Llama decoder layer after stacking (llama.py's LlamaDecoderLayer; the same in
# every version read). The EAGLE-3 subclass adds its own norms, read from llama_eagle3.py.
_LAYER_PARAMS = (
    "self_attn.qkv_proj.weight",
    "self_attn.o_proj.weight",
    "mlp.gate_up_proj.weight",
    "mlp.down_proj.weight",
    "input_layernorm.weight",
    "post_attention_layernorm.weight",
)
_DEFAULT_STACKED = [[".qkv_proj", ".q_proj"], [".qkv_proj", ".k_proj"], [".qkv_proj", ".v_proj"],
                    [".gate_up_proj", ".gate_proj"], [".gate_up_proj", ".up_proj"]]


def read_draft_loader(package_dir: str | Path) -> dict[str, Any]:
    """The EAGLE-3 draft loader's facts of the sglang package in `package_dir` (see the module doc)."""
    path = Path(package_dir) / MODEL_FILE
    tree = parse_module(path, f"cannot read {MODEL_FILE}")
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    model, layer, causal = classes.get("LlamaModel"), classes.get("LlamaDecoderLayer"), classes.get(
        "LlamaForCausalLMEagle3")
    if model is None or causal is None:
        raise SGLangSourceError(f"{MODEL_FILE}: no LlamaModel or LlamaForCausalLMEagle3 class")
    modules = _model_modules(model)
    layer_attr = next((name for name, kind in modules.items() if kind["kind"] in ("layer", "layer_list")), None)
    if layer_attr is None:
        raise SGLangSourceError(f"{MODEL_FILE}: LlamaModel builds no decoder layer")
    load = _method(causal, "load_weights")
    if load is None:
        raise SGLangSourceError(f"{MODEL_FILE}: LlamaForCausalLMEagle3 has no load_weights")
    return {
        "file": str(MODEL_FILE),
        "layer_attr": layer_attr,
        "layer_list": modules[layer_attr]["kind"] == "layer_list",
        "layer_extra_params": sorted(_layer_norms(layer)) if layer is not None else ["hidden_norm.weight"],
        "renames": _renames(load),
        "stacked": _stacked(load) or _DEFAULT_STACKED,
        "unknown_names": "delegated" if "super().load_weights" in ast.unparse(load) else "skipped",
        "max_layers": 1 if "only supports 1 layer" in ast.unparse(causal) else None,
        "draft_vocab_null_ok": "draft_vocab_size is None" in ast.unparse(causal),
        "modules": {name: info for name, info in modules.items() if name != layer_attr},
    }


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _self_assignments(function: ast.FunctionDef) -> Iterable[tuple[str, ast.expr, bool]]:
    """(attribute, value, conditional) for every `self.X = value` in `function`, branches and `with` included.

    An attribute assigned on both sides of an `if` is not conditional."""

    def walk(body: list[ast.stmt], conditional: bool) -> list[tuple[str, ast.expr, bool]]:
        found: list[tuple[str, ast.expr, bool]] = []
        for statement in body:
            if isinstance(statement, ast.Assign) and not (
                    isinstance(statement.value, ast.Constant) and statement.value.value is None):
                for target in statement.targets:
                    if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                            and target.value.id == "self"):
                        found.append((target.attr, statement.value, conditional))
            elif isinstance(statement, ast.With):
                found.extend(walk(statement.body, conditional))
            elif isinstance(statement, ast.If):
                body_side, else_side = walk(statement.body, True), walk(statement.orelse, True)
                both = {a for a, *_ in body_side} & {a for a, *_ in else_side}
                for attr, value, _ in body_side + else_side:
                    found.append((attr, value, conditional or attr not in both))
        return found

    return walk(function.body, False)


def _callee(node: ast.expr) -> str:
    return ast.unparse(node.func).split(".")[-1] if isinstance(node, ast.Call) else ""


def _model_modules(model: ast.ClassDef) -> dict[str, dict[str, Any]]:
    init = _method(model, "__init__")
    modules: dict[str, dict[str, Any]] = {}
    if init is None:
        return modules
    for attr, value, conditional in _self_assignments(init):
        callee, text = _callee(value), ast.unparse(value)
        if callee == "LlamaDecoderLayer":
            kind = "layer"
        elif callee == "ModuleList" and "LlamaDecoderLayer" in text:
            kind = "layer_list"
        elif callee == "ModuleList" and "RMSNorm" in text:
            kind = "norm_list"
        elif callee == "RMSNorm":
            kind = "norm"
        elif callee == "Linear":
            kind = "linear"
        elif callee == "VocabParallelEmbedding":
            kind = "embedding"
        else:
            continue
        modules[attr] = {"kind": kind, "optional": conditional or kind == "embedding"}
    return modules


def _layer_norms(layer: ast.ClassDef) -> set[str]:
    init = _method(layer, "__init__")
    if init is None:
        return set()
    return {f"{attr}.weight" for attr, value, _ in _self_assignments(init) if _callee(value) == "RMSNorm"}


def _renames(load: ast.FunctionDef) -> dict[str, str]:
    for node in ast.walk(load):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            if value and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
                return value
    return {}


def _stacked(load: ast.FunctionDef) -> list[list[str]]:
    for node in ast.walk(load):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.List) and any(
                isinstance(t, ast.Name) and t.id == "stacked_params_mapping" for t in node.targets)):
            try:
                entries = ast.literal_eval(node.value)
            except ValueError:
                return []
            return [[str(entry[0]), str(entry[1])] for entry in entries]
    return []


MAX_DRAFT_LAYERS = 64
"""An EAGLE-3 draft has one decoder layer (SGLang 0.5.16+ loads a list); more than this is no draft."""


def draft_layers(config: Mapping[str, Any]) -> int | None:
    """The draft's `num_hidden_layers` when it is a count a draft can have (1 to MAX_DRAFT_LAYERS), else None."""
    layers = config.get("num_hidden_layers", 1)
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= MAX_DRAFT_LAYERS:
        return None
    return layers


@dataclass(frozen=True)
class LoadOutcome:
    """What one version's `load_weights` does with a checkpoint's names."""

    loaded: dict[str, str] = field(default_factory=dict)  # checkpoint name -> parameter it fills
    dropped: tuple[str, ...] = ()  # names no parameter takes, dropped without a word (or with a warning)
    unloaded: tuple[str, ...] = ()  # required parameters no name fills
    crash: str | None = None  # the exception the load raises, when it raises
    ignored: tuple[str, ...] = ()  # names the loader skips on purpose (t2d)


@dataclass(frozen=True)
class DraftLoader:
    """One SGLang version's EAGLE-3 draft loader (from `read_draft_loader`'s dict)."""

    data: Mapping[str, Any]

    def parameters(self, config: Mapping[str, Any]) -> tuple[dict[str, bool], set[str]]:
        """(parameter name -> required, names SGLang fills from elsewhere) for a draft with `config`."""
        layers = draft_layers(config) or 1  # an absurd count is the doctor's error, never an allocation
        attr = self.data["layer_attr"]
        prefixes = [f"model.{attr}.{i}." for i in range(layers)] if self.data["layer_list"] else [
            f"model.{attr}."]
        params: dict[str, bool] = {}
        for prefix in prefixes:
            for name in (*_LAYER_PARAMS, *self.data.get("layer_extra_params", [])):
                params[prefix + name] = True
        for name, info in self.data["modules"].items():
            kind = info["kind"]
            if kind == "norm_list":
                if config.get("fc_norm") or config.get("use_aux_norm"):
                    for i in range(3):
                        params[f"model.{name}.{i}.weight"] = True
            elif kind == "linear":
                params[f"model.{name}.weight"] = True
                if config.get("bias"):
                    params[f"model.{name}.bias"] = True
            else:
                params[f"model.{name}.weight"] = not info["optional"]
        from_target: set[str] = {f"model.{n}.weight" for n, i in self.data["modules"].items()
                                 if i["kind"] == "embedding"}
        if config.get("tie_word_embeddings"):
            pass  # lm_head is embed_tokens
        elif config.get("draft_vocab_size", 0) is None and self.data.get("draft_vocab_null_ok"):
            params["lm_head.weight"] = False
            from_target.add("lm_head.weight")
        else:
            params["lm_head.weight"] = True
        return params, from_target

    def simulate(self, names: Iterable[str], config: Mapping[str, Any]) -> LoadOutcome:
        """Replay this version's `load_weights` on checkpoint key `names`."""
        params, _ = self.parameters(config)
        delegated = self.data["unknown_names"] == "delegated"
        loaded: dict[str, str] = {}
        dropped, ignored = [], []
        crash = None
        for original in names:
            name = original
            for legacy, new in self.data["renames"].items():
                if legacy in name:
                    name = name.replace(legacy, new)
            if "d2t" in name:
                loaded[original] = "hot_token_id (d2t)"
                continue
            if "t2d" in name:
                ignored.append(original)
                continue
            if delegated and "lm_head" not in name:
                name = f"model.{name}"
            stacked = next((pair for pair in self.data["stacked"] if pair[1] in name), None)
            if stacked is not None:
                name = name.replace(stacked[1], stacked[0])
            target = name if name in params else f"model.{name}"
            if delegated:
                target = name
            if target in params:
                loaded[original] = target
            else:
                dropped.append(original)
                if delegated and stacked is not None and crash is None:
                    crash = f"KeyError: {name!r}"
        filled = set(loaded.values())
        unloaded = tuple(sorted(p for p, required in params.items() if required and p not in filled))
        return LoadOutcome(loaded, tuple(dropped), unloaded, crash, tuple(ignored))
