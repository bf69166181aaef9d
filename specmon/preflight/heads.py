"""What an EAGLE-3 head's config must say for SGLang, and the target hidden states its `fc` takes.

- The `speculators` library writes an EAGLE-3 head's config as its own (`Eagle3Speculator`, the decoder layer's
  settings nested in `transformer_layer_config`, no `model_type`); SGLang reads a draft's config.json through
  transformers' AutoConfig, which refuses it at start-up ("Should have a `model_type` key in its config.json").
  `sglang_config` writes the same head's config as SGLang reads it.
- The head's `fc` takes `in_features / hidden size` hidden states of the target, captured where the target's
  model class says (`specmon.sglang.captures`): the draft's `eagle_config.eagle_aux_hidden_state_layer_ids`, or
  that SGLang version's default. Too few distinct captures load, capture every CUDA graph, then crash on the
  server's warmup request (real SGLang 0.5.16: [2, 3, 3] on a 6-layer target for a 3-way `fc`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specmon.sglang.rules import SGLangRules
from specmon.text import shown

SPECULATORS_KEYS = ("speculators_config", "transformer_layer_config", "speculators_model_type")
EAGLE3_ARCHITECTURE = "LlamaForCausalLMEagle3"
# speculators' top-level keys SGLang's llama_eagle3.py reads under the same name (the rest it has no use for)
_SAME_NAME = ("draft_vocab_size", "target_hidden_size", "fc_norm", "norm_output", "dtype", "torch_dtype",
              "transformers_version")
# speculators options SGLang has no counterpart for: a head trained with them on would run otherwise
_NO_COUNTERPART = ("norm_before_residual", "norm_before_fc")


def is_speculators(config: Mapping[str, Any]) -> bool:
    """Whether `config` is written the speculators library's way rather than as SGLang reads it."""
    archs = config.get("architectures")
    named = isinstance(archs, list) and any(isinstance(a, str) and a.endswith("Speculator") for a in archs)
    return named or any(key in config for key in SPECULATORS_KEYS)


def layer_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The decoder layer's settings: `transformer_layer_config` in a speculators config, else the config itself."""
    nested = config.get("transformer_layer_config")
    return nested if isinstance(nested, Mapping) else config


def sglang_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A speculators EAGLE-3 config written as SGLang reads it: the layer settings at the top level,
    `LlamaForCausalLMEagle3`, and the captured layers under `eagle_config`. ValueError naming what cannot be
    carried over."""
    layer = layer_config(config)
    if layer is config:
        raise ValueError("no transformer_layer_config object to take the decoder layer's settings from")
    if layer.get("model_type") != "llama":
        raise ValueError(f"its transformer_layer_config has model_type {shown(layer.get('model_type'))}; SGLang's "
                         f"EAGLE-3 head ({EAGLE3_ARCHITECTURE}) is a Llama decoder layer")
    kept = [key for key in _NO_COUNTERPART if config.get(key)]
    if kept:
        raise ValueError(f"{', '.join(kept)} is on, and SGLang's {EAGLE3_ARCHITECTURE} has no such option: the "
                         "head would run otherwise than it was trained")
    out: dict[str, Any] = {"architectures": [EAGLE3_ARCHITECTURE], **layer}
    out.update({key: config[key] for key in _SAME_NAME if config.get(key) is not None})
    ids = config.get("eagle_aux_hidden_state_layer_ids")
    if isinstance(ids, list) and ids:
        out["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True}
    return out


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return value
    return None


def aux_layer_ids(config: Mapping[str, Any]) -> tuple[list[int] | None, str]:
    """The layer ids SGLang hands the target's `set_eagle3_layers_to_capture` for this draft config: only
    `eagle_config.eagle_aux_hidden_state_layer_ids` (0.5.16's spec_aux_hidden_state.py), else None; and where
    they came from, in words. ValueError when that key holds no list of integers."""
    eagle = config.get("eagle_config")
    if isinstance(eagle, Mapping) and "eagle_aux_hidden_state_layer_ids" in eagle:
        ids = _int_list(eagle["eagle_aux_hidden_state_layer_ids"])
        if ids is None:
            raise ValueError(f"eagle_config.eagle_aux_hidden_state_layer_ids is "
                             f"{shown(eagle['eagle_aux_hidden_state_layer_ids'])}, not a list of layer numbers")
        return ids, "eagle_config.eagle_aux_hidden_state_layer_ids"
    if _int_list(config.get("eagle_aux_hidden_state_layer_ids")):
        return None, ("no eagle_config (a top-level eagle_aux_hidden_state_layer_ids, which SGLang does not read "
                      "for the target's captures)")
    return None, "no eagle_config.eagle_aux_hidden_state_layer_ids"


def fc_inputs(config: Mapping[str, Any], shapes: Mapping[str, Any]) -> tuple[int | None, int | None, str]:
    """How many hidden states the head's fc takes: from the checkpoint's fc.weight ([hidden, hidden_in x n]),
    and from the config as SGLang sizes it (num_aux_hidden_states, else len(eagle_config ids), else 3)."""
    hidden_in = config.get("target_hidden_size") or config.get("hidden_size")
    shape = next((s for name, s in shapes.items() if name == "fc.weight" or name.endswith(".fc.weight")), None)
    from_weights = None
    if isinstance(hidden_in, int) and hidden_in > 0 and (dims := _int_list(shape)) and len(dims) == 2:
        width = dims[1]
        from_weights = width // hidden_in if width % hidden_in == 0 else -1
    eagle = config.get("eagle_config")
    eagle = eagle if isinstance(eagle, Mapping) else {}
    ids = _int_list(eagle.get("eagle_aux_hidden_state_layer_ids"))
    number = config.get("num_aux_hidden_states")
    if isinstance(number, int) and not isinstance(number, bool):
        return from_weights, number, "num_aux_hidden_states"
    if ids:
        return from_weights, len(ids), "len(eagle_config.eagle_aux_hidden_state_layer_ids)"
    return from_weights, 3, "SGLang's default of 3 (no eagle_config ids)"


def check_captures(config: Mapping[str, Any], shapes: Mapping[str, Any], target: Mapping[str, Any],
                   rules: SGLangRules, add, note) -> None:
    """The captures the target gives against what the head's fc takes. `target` is the target's text config
    (hidden size, layer count, architecture); `add(severity, code, message, hint)` and `note(text)` report."""
    version = rules.version
    if not rules.knows_captures:
        note(f"captured target layers not checked: the rules of SGLang {version} here hold no capture facts")
        return
    arch, layers = target.get("architecture"), target.get("num_hidden_layers")
    rule = rules.capture_rule(arch)
    if rule is None:
        add("warning", "draft-captures-unknown", f"SGLang {version}'s source shows no EAGLE-3 capture for a "
            f"{shown(arch)} target: if it has none, SGLang fails when it sets the captured layers",
            "check that this SGLang version serves EAGLE-3 for that target")
        return
    if not isinstance(layers, int) or isinstance(layers, bool) or layers < 1:
        note(f"captured target layers not checked: the target's config gives no num_hidden_layers ({shown(layers)})")
        return
    from_weights, from_config, said = fc_inputs(config, shapes)
    try:
        ids, source = aux_layer_ids(config)
    except ValueError as error:
        add("error", "draft-captures", f"{error}: SGLang {version} fails when it sets the target's captured layers",
            "give the target layers the head was trained on as a list of integers")
        return
    if from_weights == -1:
        add("error", "draft-fc-shape", "fc.weight's input width is no multiple of the hidden size: this is not "
            "an EAGLE-3 head for a target of that width", None)
        return
    if from_weights is not None and from_weights != from_config:
        add("error", "draft-fc-shape", f"fc.weight takes {from_weights} hidden states, but SGLang {version} builds "
            f"fc for {from_config} ({said}): loading the weights fails on their shape",
            f"set eagle_config.eagle_aux_hidden_state_layer_ids to the {from_weights} target layers the head was "
            "trained on")
        return
    wanted = from_weights if from_weights is not None else from_config
    positions, how = rule.captured(ids, layers)
    valid = sorted({p for p in positions if 1 <= p <= layers - 1})
    outside = sorted({p for p in positions if not 1 <= p <= layers - 1})
    given = f"layer ids {ids} from {source}" if how == "given" else f"its default ({source})"
    what = (f"a {layers}-layer {arch} target captures before layers {positions} with {given} "
            f"(SGLang {version}, {rule.where})")
    if len(valid) == wanted and not outside:
        note(f"captured target layers: {wanted} distinct, as fc takes ({what})")
        return
    lacks = []
    repeated = sorted({p for p in positions if positions.count(p) > 1})
    if repeated:
        lacks.append(f"{', '.join(map(str, repeated))} repeated, captured once")
    if outside:
        lacks.append(f"{', '.join(map(str, outside))} outside 1..{layers - 1}, never captured")
    add("error", "draft-captures",
        f"{what}: {len(valid)} distinct hidden states for an fc that takes {wanted}"
        + (f" ({'; '.join(lacks)})" if lacks else "") + ": SGLang loads both models, captures every CUDA graph, "
        "then crashes on its warmup request",
        f"set eagle_config.eagle_aux_hidden_state_layer_ids in the draft's config.json to the {wanted} distinct "
        "target layers the head was trained on"
        + (f" (ids 0..{layers - 2}: id k is the output of layer k)" if rule.explicit == "plus_one" else ""))
