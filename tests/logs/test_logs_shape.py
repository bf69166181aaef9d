"""The shape of specmon/logs: no module over 600 lines and no class over 400 (the startup tracker is a dispatcher
and its parts, each in its own module), and the tracker's side imports nothing that reads a file or a pipe, not
even for a type hint (the items and progress frames it reads are logs/frames.py's, below the follower and it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

LOGS = Path(__file__).resolve().parents[2] / "specmon" / "logs"
MODULES = sorted(LOGS.glob("*.py"))
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 400
# The modules that read files, pipes or the clock, and those above the tracker (they import it).
READERS = {"specmon.logs.follower", "specmon.logs.waiter", "specmon.logs.summary", "specmon.logs.cli"}


def module_name(path: Path) -> str:
    return f"specmon.logs.{path.stem}"


def imported(path: Path) -> set[str]:
    """The specmon.logs modules a file imports, wherever the import stands (in a function, under TYPE_CHECKING)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in found if (LOGS / f"{name.removeprefix('specmon.logs.')}.py").exists()
            and name.startswith("specmon.logs.")}


def reachable(start: str) -> set[str]:
    """``start`` and every specmon.logs module it imports, directly or through others."""
    seen, todo = {start}, [start]
    while todo:
        for name in imported(LOGS / f"{todo.pop().removeprefix('specmon.logs.')}.py") - seen:
            seen.add(name)
            todo.append(name)
    return seen


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_module_over_600_lines(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.name}: {lines} lines"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_class_over_400_lines(path):
    classes = [node for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ClassDef)]
    too_long = {node.name: node.end_lineno - node.lineno + 1 for node in classes}
    assert {name: n for name, n in too_long.items() if n > MAX_CLASS_LINES} == {}, path.name


def test_the_tracker_side_imports_no_reader_even_for_a_type():
    side = reachable("specmon.logs.tracker")
    assert {"specmon.logs.failures", "specmon.logs.patterns", "specmon.logs.model"} <= side  # the walk works
    assert side & READERS == set()


def test_the_follower_does_not_import_the_tracker():
    assert "specmon.logs.tracker" not in reachable("specmon.logs.follower")


def test_the_walk_sees_imports_under_type_checking_and_in_functions(tmp_path, monkeypatch):
    module = tmp_path / "probe.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from specmon.logs.follower import "
                      "LogItem\n\ndef f():\n    from specmon.logs import waiter\n")
    assert imported(module) == {"specmon.logs.follower", "specmon.logs.waiter"}
