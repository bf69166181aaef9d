"""A small static evaluator for the literal-ish expressions SGLang's launch parser is built from.

It follows names through assignments, classes and `from sglang... import` lines of one package directory and
never imports anything from it. What it cannot work out raises `Unresolved`.
"""

from __future__ import annotations

import ast
import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmon.inputs import MIB, read_text

SUPPRESS = "==SUPPRESS=="  # argparse.SUPPRESS's value
_MAX_DEPTH = 40


class SGLangSourceError(Exception):
    """An SGLang package directory (or a table made from one) is missing or malformed."""


class Unresolved(Exception):
    """An expression has no static value."""


@dataclass(frozen=True)
class ClassRef:
    """A class definition found in the source."""

    module: Module
    node: ast.ClassDef


@dataclass(frozen=True)
class FunctionRef:
    """A function definition found in the source."""

    module: Module
    node: ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class EnumMember:
    """A member of an Enum class (what iterating the class yields)."""

    name: str
    value: Any


MAX_SOURCE_BYTES = 16 * MIB
"""An SGLang source file read by specmon (server_args.py, the largest, is ~250 KB)."""


def parse_module(path: Path, failure: str) -> ast.Module:
    """An installed SGLang source file parsed (read as a regular file of at most MAX_SOURCE_BYTES; nothing
    imported); SGLangSourceError starting with `failure` for anything else, nesting too deep included."""
    try:
        return ast.parse(read_text(path, MAX_SOURCE_BYTES, what="Python source file"), filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError, MemoryError) as error:
        reason = "nested too deeply" if isinstance(error, RecursionError | MemoryError) else error
        raise SGLangSourceError(f"{failure}: {reason}") from None


class Module:
    """One parsed source file, with its top-level names."""

    def __init__(self, package: Package, name: str, path: Path) -> None:
        self.package = package
        self.name = name
        self.path = path
        self.tree = parse_module(path, f"cannot parse {path}")
        self.names: dict[str, ast.AST] = {}
        for node in self.tree.body:
            self._index(node)

    def _index(self, node: ast.stmt) -> None:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            self.names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.names[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            self.names[node.target.id] = node.value
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                self.names.setdefault(alias.asname or alias.name, node)
        elif isinstance(node, ast.Try | ast.If):
            # `try: from x import y` / `if TYPE_CHECKING:` blocks: the first definition wins.
            for child in node.body:
                if isinstance(child, ast.ImportFrom | ast.Assign | ast.ClassDef | ast.FunctionDef):
                    self._index(child)

    def class_def(self, name: str) -> ast.ClassDef:
        """The top-level class `name` of this module."""
        # The last `class` statement, even when the name is rebound later (0.5.23's `msgspec.defstruct`).
        classes = [n for n in self.tree.body if isinstance(n, ast.ClassDef) and n.name == name]
        if not classes:
            raise SGLangSourceError(f"{self.path}: no class {name}")
        return classes[-1]


class Package:
    """An sglang package directory: its modules, parsed on demand."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._modules: dict[str, Module | None] = {}

    def module(self, dotted: str) -> Module | None:
        """The module `sglang.x.y` (None when it is not in this package directory)."""
        if dotted in self._modules:
            return self._modules[dotted]
        parts = dotted.split(".")
        module = None
        if parts[0] == self.root.name:
            base = self.root.joinpath(*parts[1:])
            for path in (base.with_suffix(".py"), base / "__init__.py"):
                if path.is_file():
                    module = Module(self, dotted, path)
                    break
        self._modules[dotted] = module
        return module


class Evaluator:
    """Evaluates expressions of one module, with an optional local scope of unevaluated assignments."""

    def __init__(self, module: Module, local: dict[str, ast.AST] | None = None, field_default=None) -> None:
        self.module = module
        self.local = local if local is not None else {}
        self.field_default = field_default  # (class name, field) -> default, for `ServerArgs.x`
        self._depth = 0

    def value(self, node: ast.AST | None) -> Any:
        """The static value of `node`; raises Unresolved."""
        if node is None:
            raise Unresolved("nothing")
        self._depth += 1
        try:
            if self._depth > _MAX_DEPTH:
                raise Unresolved("too deep")
            method = getattr(self, "_" + type(node).__name__, None)
            if method is None:
                raise Unresolved(type(node).__name__)
            return method(node)
        finally:
            self._depth -= 1

    def _Constant(self, node: ast.Constant) -> Any:
        return node.value

    def _List(self, node: ast.List | ast.Tuple | ast.Set) -> list:
        items = []
        for item in node.elts:
            if isinstance(item, ast.Starred):
                items.extend(self._iterate(self.value(item.value)))
            else:
                items.append(self.value(item))
        return items

    _Tuple = _List
    _Set = _List

    def _Dict(self, node: ast.Dict) -> dict:
        result = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                result.update(self.value(value))
                continue
            try:
                result[self.value(key)] = self.value(value)
            except Unresolved:
                result[self.value(key)] = Unresolved  # keys still count (`.keys()`), the value is unknown
        return result

    def _UnaryOp(self, node: ast.UnaryOp) -> Any:
        operand = self.value(node.operand)
        if isinstance(node.op, ast.USub) and isinstance(operand, int | float):
            return -operand
        if isinstance(node.op, ast.Not):
            return not operand
        raise Unresolved("unary")

    def _BinOp(self, node: ast.BinOp) -> Any:
        left, right = self.value(node.left), self.value(node.right)
        if isinstance(node.op, ast.Add) and type(left) is type(right) and isinstance(left, list | str | int):
            return left + right
        if isinstance(left, int | float) and isinstance(right, int | float) and not isinstance(left, bool):
            if isinstance(node.op, ast.Mult):
                return left * right
            if isinstance(node.op, ast.Pow) and abs(right) < 128:
                return left**right
            if isinstance(node.op, ast.Sub):
                return left - right
            if isinstance(node.op, ast.Div) and right:
                return left / right
        raise Unresolved("binop")

    def _Subscript(self, node: ast.Subscript) -> Any:
        base, index = self.value(node.value), self.value(node.slice)
        try:
            if isinstance(base, list | str) and isinstance(index, int) and not isinstance(index, bool):
                return base[index]
            if isinstance(base, dict) and index in base and base[index] is not Unresolved:
                return base[index]
        except IndexError:
            pass
        raise Unresolved("subscript")

    def _JoinedStr(self, node: ast.JoinedStr) -> str:
        parts = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                parts.append(str(part.value))
            elif isinstance(part, ast.FormattedValue):
                try:
                    value = self.value(part.value)
                    parts.append(repr(value) if part.conversion == ord("r") else str(value))
                except Unresolved:
                    parts.append("{" + ast.unparse(part.value) + "}")
        return "".join(parts)

    def _Name(self, node: ast.Name) -> Any:
        if node.id in self.local:
            local = self.local[node.id]
            return local if not isinstance(local, ast.AST) else self.value(local)
        return self.lookup(self.module, node.id)

    def lookup(self, module: Module, name: str) -> Any:
        """A top-level name of `module`, following `from ... import` into the package."""
        for _ in range(_MAX_DEPTH):
            node = module.names.get(name)
            if node is None:
                raise Unresolved(name)
            if isinstance(node, ast.ClassDef):
                return ClassRef(module, node)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                return FunctionRef(module, node)
            if isinstance(node, ast.ImportFrom):
                target = _import_target(module, node)
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        name = alias.name
                        break
                next_module = module.package.module(target) if target else None
                if next_module is None:
                    raise Unresolved(f"{target}.{name}")
                module = next_module
                continue
            return Evaluator(module, field_default=self.field_default).value(node)
        raise Unresolved("import cycle")

    def _Attribute(self, node: ast.Attribute) -> Any:
        if isinstance(node.value, ast.Name) and node.value.id == "argparse" and node.attr == "SUPPRESS":
            return SUPPRESS
        base = self.value(node.value)
        if isinstance(base, ClassRef):
            return self._class_attribute(base, node.attr)
        if isinstance(base, FunctionRef) and node.attr == "__doc__":
            return ast.get_docstring(base.node, clean=False)
        if isinstance(base, EnumMember) and node.attr in ("name", "value"):
            return getattr(base, node.attr)
        raise Unresolved(node.attr)

    def _class_attribute(self, ref: ClassRef, attr: str) -> Any:
        if attr == "__doc__":
            return ast.get_docstring(ref.node, clean=False)
        if self.field_default is not None:
            found, value = self.field_default(ref.node.name, attr)
            if found:
                return value
        # Class-body names see each other (`ALL = (FULL, BREAKABLE)`).
        scope: dict[str, ast.AST] = {
            t.id: n.value for n in ref.node.body if isinstance(n, ast.Assign) for t in n.targets
            if isinstance(t, ast.Name)
        }
        for statement in ref.node.body:
            if isinstance(statement, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == attr for t in statement.targets
            ):
                if _is_enum(ref):
                    return EnumMember(attr, Evaluator(ref.module).value(statement.value))
                return Evaluator(ref.module, dict(scope), self.field_default).value(statement.value)
            if (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and statement.target.id == attr
                and statement.value is not None
            ):
                return Evaluator(ref.module, field_default=self.field_default).value(statement.value)
        raise Unresolved(f"{ref.node.name}.{attr}")

    def _iterate(self, value: Any) -> list:
        if isinstance(value, ClassRef) and _is_enum(value):
            return enum_members(value)
        if isinstance(value, list | tuple | str):
            return list(value)
        if isinstance(value, dict):
            return list(value)
        raise Unresolved("not iterable")

    def _Call(self, node: ast.Call) -> Any:
        func = node.func
        if isinstance(func, ast.Attribute):
            base = self.value(func.value)
            if func.attr in ("keys", "values", "items") and isinstance(base, dict) and not node.args:
                items = list(getattr(base, func.attr)())
                if any(item is Unresolved for item in items):
                    raise Unresolved("dict value")
                return items
            if isinstance(base, str) and func.attr in ("lower", "upper", "strip") and not node.args:
                return getattr(base, func.attr)()
            if isinstance(base, str) and func.attr == "join" and len(node.args) == 1:
                return base.join(str(item) for item in self._iterate(self.value(node.args[0])))
            raise Unresolved(func.attr)
        if isinstance(func, ast.Name):
            if func.id in ("list", "tuple", "sorted", "set", "frozenset") and len(node.args) == 1 and func.id not in self.local:
                items = self._iterate(self.value(node.args[0]))
                return sorted(items) if func.id == "sorted" else items
            if func.id in ("list", "dict") and not node.args and not node.keywords:
                return [] if func.id == "list" else {}
            if (
                self.field_default is not None
                and len(node.args) == 1
                and isinstance(node.args[0], ast.Constant)
                and "default" in func.id
            ):
                # 0.5.23's `_declared_default("field")`: the field's declared default.
                found, value = self.field_default("ServerArgs", node.args[0].value)
                if found:
                    return value
            function = self.value(func)
            if isinstance(function, FunctionRef) and not node.args and not node.keywords:
                return self._return_value(function)
        raise Unresolved("call")

    def _return_value(self, function: FunctionRef) -> Any:
        """What a no-argument function returns at its last top-level `return`, with its local imports."""
        local: dict[str, Any] = {}
        final: ast.expr | None = None
        for statement in function.node.body:
            if isinstance(statement, ast.Assign):
                for target in statement.targets:
                    if isinstance(target, ast.Name):
                        local[target.id] = statement.value
            elif isinstance(statement, ast.ImportFrom):
                target_module = function.module.package.module(_import_target(function.module, statement) or "")
                for alias in statement.names:
                    if target_module is not None:
                        with contextlib.suppress(Unresolved):
                            local[alias.asname or alias.name] = self.lookup(target_module, alias.name)
            elif isinstance(statement, ast.Return):
                final = statement.value
        if final is None:
            raise Unresolved("no return")
        return Evaluator(function.module, local, self.field_default).value(final)

    def _ListComp(self, node: ast.ListComp) -> list:
        if len(node.generators) != 1 or not isinstance(target := node.generators[0].target, ast.Name):
            raise Unresolved("comprehension")
        generator = node.generators[0]
        results = []
        for item in self._iterate(self.value(generator.iter)):
            inner = Evaluator(self.module, {**self.local, target.id: item}, self.field_default)
            if all(inner.value(condition) for condition in generator.ifs):
                results.append(inner.value(node.elt))
        return results

    def _Lambda(self, node: ast.Lambda) -> Any:
        raise Unresolved("lambda")


def _is_enum(ref: ClassRef) -> bool:
    return any(ast.unparse(base).split(".")[-1] in ("Enum", "IntEnum", "StrEnum") for base in ref.node.bases)


def enum_members(ref: ClassRef) -> list[EnumMember]:
    """The members of an Enum class, in definition order (`auto()` values stay unresolved as None)."""
    members = []
    for statement in ref.node.body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target = statement.targets[0]
            if isinstance(target, ast.Name) and not target.id.startswith("_"):
                try:
                    value = Evaluator(ref.module).value(statement.value)
                except Unresolved:
                    value = None
                members.append(EnumMember(target.id, value))
    return members


def _import_target(module: Module, node: ast.ImportFrom) -> str | None:
    if not node.level:
        return node.module
    parts = module.name.split(".")
    is_package = module.path.name == "__init__.py"
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join([*base, node.module]) if node.module else ".".join(base)
