"""The code stays in rooms of a size one can hold: no module over 600 lines and no class over 400, in the core, the
app and the widgets alike (tests/logs/test_logs_shape.py holds the log readers to the same and more)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("specmon", "tui", "widgets")
MODULE_MOST_LINES = 600
CLASS_MOST_LINES = 400


def _modules() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_is_over_600_lines():
    long = {str(p.relative_to(ROOT)): n for p in _modules() if (n := p.read_text().count("\n")) > MODULE_MOST_LINES}
    assert long == {}


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_class_is_over_400_lines(folder):
    big = {}
    for path in _modules():
        if path.relative_to(ROOT).parts[0] != folder:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and (size := node.end_lineno - node.lineno + 1) > CLASS_MOST_LINES:
                big[f"{path.relative_to(ROOT)}:{node.name}"] = size
    assert big == {}
