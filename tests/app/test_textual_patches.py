"""The workarounds that reach into Textual's private API stay in specmon.tui.patches, each naming its version."""

from __future__ import annotations

import ast
import re
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATCHES = ROOT / "tui" / "patches"


def _private_textual_imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        names += [m for m in modules if m.startswith("textual") and any(p.startswith("_") for p in m.split("."))]
    return names


def test_only_the_patches_import_textuals_private_modules():
    outside = {}
    for folder in ("specmon", "tui", "widgets"):
        for path in (ROOT / folder).rglob("*.py"):
            if PATCHES in path.parents:
                continue
            found = _private_textual_imports(path)
            if found:
                outside[str(path.relative_to(ROOT))] = found
    assert outside == {}


def test_each_patch_names_the_textual_version_and_its_upstream():
    pinned = re.search(r'"textual>=([\d.]+),<(\d+)"', (ROOT / "pyproject.toml").read_text())
    assert pinned, "textual is pinned below a major version because of the patches"
    for path in sorted(PATCHES.glob("*.py")):
        if path.name == "__init__.py":
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert re.search(r"Textual \d+\.\d+", doc), f"{path.name} names no Textual version"
        assert "Textualize/textual#" in doc or "no upstream issue" in doc, f"{path.name} names no upstream issue"


def test_the_installed_textual_is_the_major_version_the_patches_were_written_for():
    pinned = re.search(r'"textual>=[\d.]+,<(\d+)"', (ROOT / "pyproject.toml").read_text())
    assert pinned and int(version("textual").split(".")[0]) == int(pinned.group(1)) - 1
