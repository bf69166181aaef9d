"""Rewrite docs/architecture.md's module map ("## Where things live") from the code: each module's path and the
first line of its docstring (tests/project/test_docs_map.py checks the same). Run: `python -m scripts.architecture_map`."""

from __future__ import annotations

import ast
from pathlib import Path

from scripts.lint_imports import package_dirs

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAP_MARKER = "## Where things live"
MAP_CUT = 95


def map_line(path: Path) -> str:
    """A module's line in the map: its path, then its first docstring line cut at MAP_CUT characters."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    first = doc.splitlines()[0] if doc else ""
    if len(first) > MAP_CUT:
        first = first[: MAP_CUT - 3].rstrip() + "..."
    return f"{path.relative_to(ROOT).as_posix():<33} {first}".rstrip()  # a space after the longest paths too


def modules() -> dict[str, Path]:
    """Every module of the installed packages, by its path from the repository's root."""
    return {p.relative_to(ROOT).as_posix(): p for folder in package_dirs().values()
            for p in folder.rglob("*.py") if "__pycache__" not in p.parts}


def code_block_span(text: str, marker: str) -> tuple[int, int]:
    """Where the first code block after `marker` holds its lines (start, end offsets)."""
    opened = text.index("```\n", text.index(marker)) + 4
    return opened, text.index("```", opened)


def main() -> None:
    text = ARCHITECTURE.read_text()
    start, end = code_block_span(text, MAP_MARKER)
    lines = [map_line(path) for _, path in sorted(modules().items())]
    ARCHITECTURE.write_text(text[:start] + "\n".join(lines) + "\n" + text[end:])


if __name__ == "__main__":
    main()
