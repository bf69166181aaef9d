"""Read SGLang's launch flags from its source with `ast`, without importing sglang (and so torch).

`read_source(package_dir)` takes the folder that holds `srt/server_args.py` and returns a JSON-ready dict:
`{"version", "generated_from", "layout", "speculative_algorithms", "flags": [...], "defaults": {...}}`.

Three layouts are known:
- "add_argument" (0.4 to 0.5.9): `ServerArgs.add_cli_args` calls `parser.add_argument(...)` for every flag.
- "annotated-dataclass" (0.5.16): most flags are `ServerArgs` fields annotated `A[T, "help" | Arg(...)]`,
  registered by `add_cli_args_from_dataclass(parser, ServerArgs)`; the rest are `add_argument` calls.
- "field-namespaces" (0.5.23): the annotated fields live in `srt/arg_groups/fields/*.py` classes that
  `server_args.py` lists in `_INPUT_NAMESPACES`, ordered by `POSITIONAL_FIELD_ORDER`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from specmon.inputs import InputError, read_file
from specmon.sglang._evaluate import (
    MAX_SOURCE_BYTES,
    SUPPRESS,
    ClassRef,
    Evaluator,
    FunctionRef,
    Module,
    Package,
    SGLangSourceError,
    Unresolved,
    enum_members,
)

__all__ = ["SGLangSourceError", "SUPPRESS", "read_source", "read_version"]

FLAG_KEYS = ("option_strings", "dest", "type", "default", "choices", "nargs", "action", "help", "metavar",
             "required", "unresolved")
_NO_VALUE_ACTIONS = ("store_true", "store_false", "store_const", "append_const", "count", "help", "version")
_MISSING = object()


def read_version(package_dir: Path) -> str:
    """The version of the sglang package in `package_dir` (its dist-info METADATA, else `version.py`)."""
    for metadata in sorted(package_dir.parent.glob(f"{package_dir.name}-*.dist-info/METADATA")):
        try:
            text = read_file(metadata, MAX_SOURCE_BYTES, what="METADATA file").decode("utf-8", "replace")
        except (OSError, InputError) as error:
            raise SGLangSourceError(f"cannot read {metadata}: {error}") from error
        match = re.search(r"^Version: *(\S+)", text, re.MULTILINE)
        if match:
            return match.group(1)
    version_py = package_dir / "version.py"
    if version_py.is_file():
        module = Module(Package(package_dir), f"{package_dir.name}.version", version_py)
        try:
            version = Evaluator(module).value(module.names.get("__version__"))
        except Unresolved:
            version = None
        if isinstance(version, str) and version:
            return version
    raise SGLangSourceError(f"{package_dir}: no version (neither a dist-info METADATA nor version.py)")


def source_stamp(package_dir: str | Path) -> tuple[str, float]:
    """An sglang package's resolved path and its server_args.py's mtime: the key of a cached read of its
    source. SGLangSourceError when the folder is not an sglang package."""
    path = Path(package_dir).resolve()
    try:
        return str(path), (path / "srt" / "server_args.py").stat().st_mtime
    except OSError as error:
        raise SGLangSourceError(f"{path}: not an sglang package directory ({error})") from error


def read_source(package_dir: str | Path, generated_from: str | None = None) -> dict[str, Any]:
    """SGLang's launch flags, `ServerArgs` defaults, version and speculative algorithms, read from source."""
    root = Path(package_dir)
    if not (root / "srt" / "server_args.py").is_file():
        raise SGLangSourceError(f"{root}: not an sglang package directory (no srt/server_args.py)")
    return _Reader(root).read(generated_from)


class _Reader:
    def __init__(self, root: Path) -> None:
        self.package = Package(root)
        server_args = self.package.module(f"{root.name}.srt.server_args")
        if server_args is None:
            raise SGLangSourceError(f"{root}: cannot load srt/server_args.py")
        self.server_args: Module = server_args
        self.cls = self.server_args.class_def("ServerArgs")
        self.layout = "field-namespaces" if "_INPUT_NAMESPACES" in self.server_args.names else "add_argument"
        self.fields = self._fields()  # name -> (module, AnnAssign), in ServerArgs order
        self._defaults: dict[str, Any] = {}
        self.flags: list[dict[str, Any]] = []
        self._seen: set[str] = set()

    # --- ServerArgs fields and their defaults ---

    def _fields(self) -> dict[str, tuple[Module, ast.AnnAssign]]:
        fields: dict[str, tuple[Module, ast.AnnAssign]] = {}
        if self.layout == "field-namespaces":
            evaluator = Evaluator(self.server_args)
            try:
                namespaces = evaluator.value(self.server_args.names["_INPUT_NAMESPACES"])
                order = self._positional_order()
            except Unresolved as error:
                raise SGLangSourceError(f"server_args.py: cannot resolve the field namespaces ({error})") from None
            for namespace in namespaces:
                if not isinstance(namespace, ClassRef):
                    raise SGLangSourceError("server_args.py: _INPUT_NAMESPACES holds something not a class")
                fields.update(_class_fields(namespace.module, namespace.node))
            ordered = [name for name in order if name in fields] + [name for name in fields if name not in order]
            fields = {name: fields[name] for name in ordered}
        fields.update(_class_fields(self.server_args, self.cls))
        return fields

    def _positional_order(self) -> list[str]:
        collect = Evaluator(self.server_args).lookup(self.server_args, "collect_input_fields")
        if not isinstance(collect, FunctionRef):
            return []
        order = Evaluator(collect.module).lookup(collect.module, "POSITIONAL_FIELD_ORDER")
        return [name for name in order if isinstance(name, str)]

    def field_default(self, class_name: str, name: str) -> tuple[bool, Any]:
        """(found, default) for `ServerArgs.name`; found is False for another class or an unknown field."""
        if class_name != "ServerArgs" or name not in self.fields:
            return False, None
        if name not in self._defaults:
            module, node = self.fields[name]
            self._defaults[name] = self._default_of(module, node)
        value = self._defaults[name]
        if value is _MISSING or value is Unresolved:
            return False, None
        return True, value

    def _default_of(self, module: Module, node: ast.AnnAssign) -> Any:
        if node.value is None:
            return _MISSING
        evaluator = Evaluator(module, field_default=self.field_default)
        value = node.value
        if isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] == "field":
            keywords = {k.arg: k.value for k in value.keywords}
            if "default" in keywords:
                value = keywords["default"]
            elif "default_factory" in keywords:
                factory = keywords["default_factory"]
                if isinstance(factory, ast.Lambda):
                    value = factory.body
                elif isinstance(factory, ast.Name) and factory.id in ("list", "dict"):
                    return [] if factory.id == "list" else {}
                else:
                    return Unresolved
            else:
                return _MISSING
        try:
            return _jsonable(evaluator.value(value))
        except Unresolved:
            return Unresolved

    def defaults(self) -> dict[str, Any]:
        result = {}
        for name in self.fields:
            found, value = self.field_default("ServerArgs", name)
            if found:
                result[name] = value
        return result

    # --- The parser ---

    def read(self, generated_from: str | None) -> dict[str, Any]:
        add_cli_args = next(
            (n for n in self.cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args"), None
        )
        if add_cli_args is None:
            raise SGLangSourceError("server_args.py: ServerArgs has no add_cli_args")
        self._walk(add_cli_args.body, {})
        if not self.flags:
            raise SGLangSourceError("server_args.py: add_cli_args registers no flags")
        version = read_version(self.package.root)
        return {
            "version": version,
            "generated_from": generated_from or f"{self.package.root.name} {version} source",
            "layout": self.layout,
            "speculative_algorithms": self._speculative_algorithms(),
            "flags": self.flags,
            "defaults": self.defaults(),
        }

    def _walk(self, body: list[ast.stmt], local: dict[str, ast.AST]) -> None:
        for statement in body:
            if isinstance(statement, ast.Assign):
                for target in statement.targets:
                    if isinstance(target, ast.Name):
                        local[target.id] = statement.value
            elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
                self._call(statement.value, local)
            elif isinstance(statement, ast.If | ast.For | ast.With | ast.Try):
                # Every branch: a flag registered on either side exists; the first registration wins.
                self._walk(statement.body, local)
                self._walk(getattr(statement, "orelse", []), local)

    def _call(self, call: ast.Call, local: dict[str, ast.AST]) -> None:
        name = ast.unparse(call.func).split(".")[-1]
        if name == "add_argument":
            self._add(self._add_argument(call, local))
        elif name == "add_cli_args_from_dataclass":
            if self.layout == "add_argument":
                self.layout = "annotated-dataclass"
            for field, (module, node) in self.fields.items():
                flag = self._annotated_field(field, module, node)
                if flag is not None:
                    self._add(flag)

    def _add(self, flag: dict[str, Any]) -> None:
        if not flag["option_strings"] or any(option in self._seen for option in flag["option_strings"]):
            return
        self._seen.update(flag["option_strings"])
        self.flags.append(flag)

    def _add_argument(self, call: ast.Call, local: dict[str, ast.AST]) -> dict[str, Any]:
        evaluator = Evaluator(self.server_args, dict(local), self.field_default)
        unresolved: list[str] = []

        def value(node: ast.AST | None, key: str, default: Any = None) -> Any:
            if node is None:
                return default
            try:
                return _jsonable(evaluator.value(node))
            except Unresolved:
                unresolved.append(key)
                return default

        options = [value(arg, "option_strings") for arg in call.args]
        if any(not isinstance(option, str) for option in options):
            raise SGLangSourceError(f"server_args.py line {call.lineno}: an option string is not a literal")
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        action, nargs_default = self._action(keywords.get("action"))
        nargs = value(keywords["nargs"], "nargs") if "nargs" in keywords else nargs_default
        default_implied = True if action == "store_false" else False if action == "store_true" else None
        flag = {
            "option_strings": options,
            "dest": value(keywords.get("dest"), "dest") or _auto_dest(options),
            "type": _type_name(keywords.get("type")),
            "default": value(keywords.get("default"), "default", default_implied),
            "choices": value(keywords.get("choices"), "choices"),
            "nargs": nargs,
            "action": action,
            "help": value(keywords.get("help"), "help"),
            "metavar": value(keywords.get("metavar"), "metavar"),
            "required": bool(value(keywords.get("required"), "required", False)),
        }
        flag["unresolved"] = unresolved
        return _normalised(flag)

    def _action(self, node: ast.AST | None) -> tuple[str | None, Any]:
        """(action name, the nargs it implies) for an `action=` value."""
        if node is None:
            return None, None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value, (0 if node.value in _NO_VALUE_ACTIONS else None)
        name = ast.unparse(node).split(".")[-1]
        try:
            ref = Evaluator(self.server_args).value(node)
        except Unresolved:
            return name, None
        if isinstance(ref, ClassRef):
            return name, _init_nargs(ref.node)
        return name, None

    def _annotated_field(self, field: str, module: Module, node: ast.AnnAssign) -> dict[str, Any] | None:
        """The flag `add_cli_args_from_dataclass` makes of an `A[T, "help" | Arg(...)]` field, or None."""
        annotation = node.annotation
        if not (isinstance(annotation, ast.Subscript) and ast.unparse(annotation.value).split(".")[-1] in (
            "A", "Annotated")):
            return None
        parts = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        inner, meta_nodes = parts[0], parts[1:]
        evaluator = Evaluator(module, field_default=self.field_default)
        unresolved: list[str] = []
        meta: dict[str, ast.AST] | None = None
        for meta_node in meta_nodes:
            if isinstance(meta_node, ast.Call) and ast.unparse(meta_node.func).split(".")[-1] == "Arg":
                meta = {k.arg: k.value for k in meta_node.keywords if k.arg}
                break
            if isinstance(meta_node, ast.Constant | ast.JoinedStr | ast.BinOp):
                meta = {"help": meta_node}
                break
        if meta is None:
            return None

        def value(key: str, default: Any = None) -> Any:
            if key not in meta:
                return default
            try:
                return _jsonable(evaluator.value(meta[key]))
            except Unresolved:
                unresolved.append(key)
                return default

        if value("no_cli", False):
            return None
        cli_name = value("cli_name") or "--" + field.replace("_", "-")
        options = [cli_name, *(value("aliases") or [])]
        found, default = self.field_default("ServerArgs", field)
        if not found and node.value is not None:
            unresolved.append("default")
        flag = {"option_strings": options, "dest": field, "type": None, "default": default, "choices": None,
                "nargs": None, "action": None, "help": value("help", ""), "metavar": None, "required": False}
        if "action" in meta:
            action, nargs = self._action(meta["action"])
            flag.update(action=action, nargs=nargs)
            flag.update(self._action_kwargs(meta.get("action_kwargs"), evaluator, unresolved))
        else:
            self._typed_field(flag, inner, meta, value, node.value is None)
        flag["unresolved"] = unresolved
        return _normalised(flag)

    def _action_kwargs(self, node: ast.AST | None, evaluator: Evaluator, unresolved: list[str]) -> dict:
        """The flag keys an `Arg(action_kwargs={...})` dict sets (`type` as a name)."""
        if node is None:
            return {}
        if not isinstance(node, ast.Dict):
            unresolved.append("action_kwargs")
            return {}
        result = {}
        for key_node, value_node in zip(node.keys, node.values, strict=True):
            key = key_node.value if isinstance(key_node, ast.Constant) else None
            if key not in FLAG_KEYS:
                continue
            if key == "type":
                result[key] = _type_name(value_node)
                continue
            try:
                result[key] = _jsonable(evaluator.value(value_node))
            except Unresolved:
                unresolved.append(key)
        return result

    def _typed_field(self, flag: dict[str, Any], inner: ast.AST, meta: dict, value, no_default: bool) -> None:
        inner = _unwrap_optional(inner)
        type_parser = _type_name(meta.get("type_parser"))
        head, arguments = None, []
        if isinstance(inner, ast.Subscript):
            head = ast.unparse(inner.value).split(".")[-1]
            arguments = inner.slice.elts if isinstance(inner.slice, ast.Tuple) else [inner.slice]
        if head == "Literal":
            values = [item.value for item in arguments if isinstance(item, ast.Constant)]
            literal_type = type(values[0]).__name__ if values else "str"
            flag.update(type=type_parser or _infer_type(literal_type), choices=value("choices") or values)
        elif head in ("List", "list") and type_parser is None:
            flag.update(type=_infer_type(ast.unparse(arguments[0])), nargs=value("nargs") or "+",
                        choices=value("choices"))
        elif isinstance(inner, ast.Name) and inner.id == "bool":
            flag.update(action="store_true")
            if flag["default"] is None:
                flag["default"] = False
        else:
            required = value("required")
            flag.update(type=type_parser or _infer_type(ast.unparse(inner)), choices=value("choices"),
                        nargs=value("nargs"), required=required is True or (required is None and no_default))

    def _speculative_algorithms(self) -> list[str]:
        flag = next((f for f in self.flags if "--speculative-algorithm" in f["option_strings"]), None)
        if flag is not None and flag["choices"]:
            return [str(choice) for choice in flag["choices"]]
        spec_info = self.package.module(f"{self.package.root.name}.srt.speculative.spec_info")
        if spec_info is None or "SpeculativeAlgorithm" not in spec_info.names:
            return []
        ref = ClassRef(spec_info, spec_info.class_def("SpeculativeAlgorithm"))
        names = [member.name for member in enum_members(ref) if member.name != "NONE"]
        # NEXTN is an alias the speculative hook turns into EAGLE; it is no enum member.
        hook = self.package.module(f"{self.package.root.name}.srt.arg_groups.speculative_hook")
        if "NEXTN" not in names and any(_mentions(module, "NEXTN") for module in (hook, self.server_args)):
            names.append("NEXTN")
        return names


def _class_fields(module: Module, node: ast.ClassDef) -> dict[str, tuple[Module, ast.AnnAssign]]:
    fields = {}
    for statement in node.body:
        if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
            name = statement.target.id
            if not name.startswith("_") and "ClassVar" not in ast.unparse(statement.annotation):
                fields[name] = (module, statement)
    return fields


def _init_nargs(node: ast.ClassDef) -> Any:
    """The default of an Action class's `nargs` parameter (0 for the store-true-like ones), else None."""
    init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init is None:
        return None
    arguments = init.args
    positional = arguments.posonlyargs + arguments.args
    pairs = list(zip(positional[len(positional) - len(arguments.defaults):], arguments.defaults, strict=True))
    pairs += [(a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True) if d is not None]
    for argument, default in pairs:
        if argument.arg == "nargs" and isinstance(default, ast.Constant):
            return default.value
    return None


def _unwrap_optional(node: ast.AST) -> ast.AST:
    if isinstance(node, ast.Subscript):
        head = ast.unparse(node.value).split(".")[-1]
        if head == "Optional":
            return node.slice
        if head == "Union" and isinstance(node.slice, ast.Tuple):
            rest = [e for e in node.slice.elts if not (isinstance(e, ast.Constant) and e.value is None)]
            if len(rest) == 1:
                return rest[0]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        for side, other in ((node.left, node.right), (node.right, node.left)):
            if isinstance(other, ast.Constant) and other.value is None:
                return side
    return node


def _infer_type(name: str) -> str:
    return name if name in ("int", "float", "str") else "str"


def _type_name(node: ast.AST | None) -> str | None:
    if node is None:
        return None
    if isinstance(node, ast.Name | ast.Attribute):
        return ast.unparse(node).split(".")[-1]
    if isinstance(node, ast.Constant) and node.value is None:
        return None
    return ast.unparse(node)


def _auto_dest(options: list[str]) -> str:
    long = next((o for o in options if o.startswith("--")), options[0] if options else "")
    return long.lstrip("-").replace("-", "_")


def _mentions(module: Module | None, text: str) -> bool:
    return module is not None and any(
        isinstance(n, ast.Constant) and n.value == text for n in ast.walk(module.tree)
    )


def _jsonable(value: Any) -> Any:
    """`value` as JSON data (tuples and sets as lists); Unresolved for anything else."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise Unresolved("non-finite float")
        return value
    if isinstance(value, list | tuple | set):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return {key: _jsonable(item) for key, item in value.items()}
    raise Unresolved(type(value).__name__)


def _normalised(flag: dict[str, Any]) -> dict[str, Any]:
    return {key: flag.get(key) for key in FLAG_KEYS}
