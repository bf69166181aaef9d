"""The import contracts (import-linter, pyproject.toml) and the module-cycle check, over specmon as installed.

grimp, under import-linter, reads a package from its one folder. In a checkout `specmon/` holds only the core: the
app, the widgets and the presets join it from tui/, widgets/ and presets/ when it is installed (pyproject's
package-dir). So both checks run on a copy of the sources laid out as installed, made from that same mapping.

    python -m scripts.lint_imports       # what CI runs: lint-imports there, then no cycles between modules
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "specmon"


def package_dirs(root: Path = ROOT) -> dict[str, Path]:
    """Import name → folder in the checkout, as pyproject.toml's package-dir says."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    mapping = config["tool"]["setuptools"]["package-dir"]
    return {name: root / folder for name, folder in mapping.items()}


def installed_tree(dest: Path, root: Path = ROOT) -> Path:
    """Copy every .py file into `dest` laid out as installed (specmon/tui/app.py for tui/app.py); returns dest."""
    for name, folder in sorted(package_dirs(root).items()):
        target = dest.joinpath(*name.split("."))
        for source in folder.rglob("*.py"):
            if "__pycache__" in source.parts:
                continue
            copy = target / source.relative_to(folder)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, copy)
    return dest


_READ_GRAPH = """
import json, sys
import grimp
graph = grimp.build_graph(sys.argv[1], exclude_type_checking_imports=True, cache_dir=None)
own = lambda name: name.split(".")[0] == sys.argv[1]
print(json.dumps({m: sorted(filter(own, graph.find_modules_directly_imported_by(m))) for m in graph.modules if own(m)}))
"""


def module_imports(tree: Path) -> dict[str, set[str]]:
    """Each specmon module → the specmon modules it imports, counting imports inside functions and leaving out
    those under `if TYPE_CHECKING:` (grimp's reading, as import-linter's). grimp runs in a fresh interpreter in
    `tree`, so the `specmon` it reads is the tree's, whatever this process has imported."""
    done = subprocess.run(  # noqa: S603 - an argv list of our own
        [sys.executable, "-c", _READ_GRAPH, PACKAGE], cwd=tree, capture_output=True, text=True, check=True, timeout=300
    )
    return {module: set(imported) for module, imported in json.loads(done.stdout).items()}


def cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: strongly connected components of more than one module (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def edges(module: str) -> Iterator[str]:
        yield from sorted(imports.get(module, ()))

    for start in sorted(imports):
        if start in index:
            continue
        work = [(start, edges(start))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            module, pending = work[-1]
            for nxt in pending:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, edges(nxt)))
                    break
                if nxt in on_stack:
                    low[module] = min(low[module], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def loop_in(component: list[str], imports: dict[str, set[str]]) -> list[str]:
    """One import loop through the component's first module, closed: [a, b, ..., a] (breadth-first, so shortest)."""
    members, start = set(component), component[0]
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for nxt in sorted(imports.get(module, ())):
                if nxt == start:
                    path = [module]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if nxt in members and nxt not in came_from:
                    came_from[nxt] = module
                    following.append(nxt)
        frontier = following
    return component


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="specmon-imports-") as tmp:
        tree = installed_tree(Path(tmp))
        contracts = subprocess.run(  # noqa: S603 - an argv list of our own paths
            [str(Path(sys.executable).with_name("lint-imports")), str(ROOT / "pyproject.toml"), "--no-cache"],
            cwd=tree,
            check=False,
        )
        imports = module_imports(tree)
        found = cycles(imports)
    for component in found:
        print(f"import cycle: {' -> '.join(loop_in(component, imports))} (modules in it: {', '.join(component)})",
              file=sys.stderr)
    if not found:
        print("No import cycles between modules.")
    return 1 if contracts.returncode or found else 0


if __name__ == "__main__":
    sys.exit(main())
