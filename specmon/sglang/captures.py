"""Which hidden states an SGLang version's target model captures for an EAGLE-3 head, read from its source by `ast`.

An EAGLE-3 head's `fc` takes the concatenation of hidden states the TARGET captures: its model class's
`set_eagle3_layers_to_capture(layer_ids)` sets `layers_to_capture`, and the decoder loop appends the residual
stream before layer i for each i in it (`for i in range(start, end): if i in layers_to_capture: ...`), so a
repeated index is captured once and one outside 1..num_layers-1 never (or, before layer 0, with no residual).
`layer_ids` is the draft config's `eagle_config.eagle_aux_hidden_state_layer_ids`, or None without one; then the
class's default applies (0.5.16's Llama: `[2, num_layers // 2, num_layers - 3]`: [2, 3, 3] on 6 layers).

`read_captures(package_dir)` returns a JSON-ready dict (shipped in `data/rules-VERSION.json` as
"eagle3_captures"):

    {"classes": {"LlamaForCausalLM": {"default": ["2", "num_layers // 2", "num_layers - 3"],
                                      "explicit": "plus_one", "where": "srt/models/llama.py:808"}, ...},
     "architectures": {"LlamaForCausalLM": "LlamaForCausalLM", "MistralForCausalLM": "LlamaForCausalLM",
                       "KimiK25ForConditionalGeneration": "DeepseekV2ForCausalLM", ...}}

(each architecture names the class whose method it runs: its own, a base's, or its language model's).

`explicit` says what becomes of given ids: "plus_one" (id + 1: the output of layer id), "as_is",
"plus_one_if_first_is_one" (DeepSeek: + 1 only when the first id is 1) or "ignored" (0.4.x takes none).
`CaptureRule.captured(layer_ids, num_layers)` replays it. Nothing is imported.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmon.inputs import read_text
from specmon.sglang._evaluate import MAX_SOURCE_BYTES

__all__ = ["CaptureRule", "capture_rule", "read_captures"]

MODELS = Path("srt") / "models"
METHOD = "set_eagle3_layers_to_capture"
_CLASS = re.compile(r"^class\s+(\w+)\s*\(([^)]*)\)\s*:", re.MULTILINE)
_ARITHMETIC = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Add, ast.Sub, ast.Mult,
               ast.FloorDiv, ast.USub, ast.Load)
MAX_INHERITANCE = 16


def _is_none_test(node: ast.AST) -> bool:
    return (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Is)
            and isinstance(node.comparators[0], ast.Constant) and node.comparators[0].value is None)


def _list_of(node: ast.AST) -> list[str] | None:
    """A default's elements as source text, when each is arithmetic on `num_layers` and integers."""
    if not isinstance(node, ast.List) or not node.elts:
        return None
    out = []
    for element in node.elts:
        if not all(isinstance(n, _ARITHMETIC) for n in ast.walk(element)):
            return None
        if any(isinstance(n, ast.Name) and n.id != "num_layers" for n in ast.walk(element)):
            return None
        out.append(ast.unparse(element))
    return out


def _captured_list(body: Sequence[ast.stmt]) -> list[str] | None:
    """The list a block gives `*.layers_to_capture` (assigned, or passed to an inner model's setter)."""
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]).endswith("layers_to_capture"):
                found = _list_of(node.value)
            elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith(METHOD) and node.args:
                found = _list_of(node.args[0])
            else:
                continue
            if found is not None:
                return found
    return None


def _explicit(body: Sequence[ast.stmt]) -> str | None:
    text = "\n".join(ast.unparse(statement) for statement in body)
    plus_one = re.search(r"\[\s*(\w+) \+ 1 for \1 in layer_ids\s*\]", text) is not None
    if plus_one and re.search(r"layer_ids\[0\] == 1", text):
        return "plus_one_if_first_is_one"
    if plus_one:
        return "plus_one"
    if re.search(r"list\(layer_ids\)|= layer_ids\b", text):
        return "as_is"
    return None


def _rule(method: ast.FunctionDef, where: str) -> dict[str, Any] | None:
    """A `set_eagle3_layers_to_capture` read: its default list and what it does with given ids; None for one
    that only hands the ids on (to an inner or a language model)."""
    takes_ids = any(arg.arg == "layer_ids" for arg in method.args.args)
    for node in ast.walk(method):
        if isinstance(node, ast.If) and _is_none_test(node.test) and "layer_ids" in ast.unparse(node.test):
            default = _captured_list(node.body)
            explicit = _explicit(node.orelse)
            if default is not None and explicit is not None:
                return {"default": default, "explicit": explicit, "where": where}
    if not takes_ids:
        default = _captured_list(method.body)
        if default is not None:
            return {"default": default, "explicit": "ignored", "where": where}
    return None


_METHOD_LINE = re.compile(rf"^([ \t]+)def {METHOD}\(", re.MULTILINE)
_DELEGATE = re.compile(r"self\.language_model\s*=\s*(\w+)\(")


def _methods(text: str) -> list[tuple[str, int, str, str]]:
    """Each `set_eagle3_layers_to_capture` in a module's text: (its class, line, the method's source, the class's
    source up to it). Only these blocks are parsed: a whole model file takes ~50 ms, dozens of them seconds."""
    headers = [(m.start(), m.group(1)) for m in _CLASS.finditer(text)]
    found = []
    for match in _METHOD_LINE.finditer(text):
        owner = [(start, name) for start, name in headers if start < match.start()]
        if not owner:
            continue
        indent = len(match.group(1).expandtabs())
        lines: list[str] = []
        end = match.start()
        for line in text[match.start():].splitlines(keepends=True):
            if lines and line.strip() and len(line) - len(line.lstrip()) <= indent and not line.lstrip().startswith(")"):
                break
            lines.append(line)
            end += len(line)
        source = textwrap.dedent("".join(lines))
        found.append((owner[-1][1], text.count("\n", 0, match.start()) + 1, source, text[owner[-1][0]:end]))
    return found


def read_captures(package_dir: str | Path) -> dict[str, Any] | None:
    """The capture rule of every target architecture of the sglang package in `package_dir` (see the module doc),
    None when its models folder is missing. Only the methods themselves are parsed; the class lines of every
    file give the inheritance (a `MistralForCausalLM(LlamaForCausalLM)` inherits Llama's rule)."""
    root = Path(package_dir)
    folder = root / MODELS
    if not folder.is_dir():
        return None
    bases: dict[str, list[str]] = {}
    classes: dict[str, dict[str, Any]] = {}
    delegates: dict[str, str] = {}
    for path in sorted(folder.glob("*.py")):
        try:
            text = read_text(path, MAX_SOURCE_BYTES, what="Python source file")
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        text = text.replace("\r\n", "\n").replace("\r", "\n")  # 0.5.9's apertus.py has CRLF lines
        for name, parents in _CLASS.findall(text):
            bases.setdefault(name, [p.strip().split(".")[-1] for p in parents.split(",") if p.strip()])
        if METHOD not in text:
            continue
        relative = f"{MODELS.as_posix()}/{path.name}"
        for owner, line, source, body in _methods(text):
            try:
                method = ast.parse(source).body[0]
            except (SyntaxError, ValueError, RecursionError, MemoryError, IndexError):
                continue
            rule = _rule(method, f"{relative}:{line}") if isinstance(method, ast.FunctionDef) else None
            if rule is not None:
                classes.setdefault(owner, rule)
            elif _DELEGATE.search(body):
                delegates[owner] = _DELEGATE.findall(body)[-1]
    architectures = {}
    for name in sorted(bases):
        resolved = _resolve(name, bases, classes, delegates)
        if resolved is not None and re.search(r"For(CausalLM|ConditionalGeneration)\w*$", name):
            architectures[name] = resolved
    return {"classes": {name: classes[name] for name in sorted(set(architectures.values()))},
            "architectures": architectures}


def _resolve(name: str, bases: Mapping[str, list[str]], classes: Mapping[str, Any], delegates: Mapping[str, str],
             depth: int = 0) -> str | None:
    """The class whose capture method `name` runs."""
    if depth > MAX_INHERITANCE:
        return None
    if name in classes:
        return name
    if name in delegates:
        return _resolve(delegates[name], bases, classes, delegates, depth + 1)
    for parent in bases.get(name, []):
        found = _resolve(parent, bases, classes, delegates, depth + 1)
        if found is not None:
            return found
    return None


def _evaluate(expression: str, num_layers: int) -> int | None:
    """One default element (arithmetic on `num_layers`, checked when read) for a target of `num_layers`."""
    try:
        node = ast.parse(expression, mode="eval")
    except SyntaxError:
        return None
    if not all(isinstance(n, _ARITHMETIC) for n in ast.walk(node)):
        return None

    def value(n: ast.AST) -> int:
        if isinstance(n, ast.Expression):
            return value(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool):
            return n.value
        if isinstance(n, ast.Name) and n.id == "num_layers":
            return num_layers
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -value(n.operand)
        if isinstance(n, ast.BinOp):
            a, b = value(n.left), value(n.right)
            if isinstance(n.op, ast.Add):
                return a + b
            if isinstance(n.op, ast.Sub):
                return a - b
            if isinstance(n.op, ast.Mult):
                return a * b
            if isinstance(n.op, ast.FloorDiv) and b != 0:
                return a // b
        raise ValueError(ast.unparse(n))

    try:
        return value(node)
    except ValueError:
        return None


@dataclass(frozen=True)
class CaptureRule:
    """One target class's capture: its default positions and what it does with given layer ids."""

    default: tuple[str, ...]
    explicit: str
    where: str

    def captured(self, layer_ids: Sequence[int] | None, num_layers: int) -> tuple[list[int], str]:
        """The positions SGLang sets in `layers_to_capture` (before layer i), and how they came: "default" or
        "given" (the draft's ids, shifted as the class does)."""
        if layer_ids is None or self.explicit == "ignored":
            return [v for v in (_evaluate(e, num_layers) for e in self.default) if v is not None], "default"
        shift = 1 if self.explicit == "plus_one" or (
            self.explicit == "plus_one_if_first_is_one" and layer_ids and layer_ids[0] == 1) else 0
        return [i + shift for i in layer_ids], "given"


def capture_rule(data: Mapping[str, Any] | None, architecture: str | None) -> CaptureRule | None:
    """The capture rule of `architecture` in a version's "eagle3_captures" data, None when unknown."""
    if not isinstance(data, Mapping) or architecture is None:
        return None
    owner = (data.get("architectures") or {}).get(architecture)
    rule = (data.get("classes") or {}).get(owner) if isinstance(owner, str) else None
    if not isinstance(rule, Mapping):
        return None
    return CaptureRule(tuple(str(e) for e in rule.get("default") or ()), str(rule.get("explicit")),
                       str(rule.get("where")))
