"""The docs that are a map of the code stay the code's: docs/architecture.md lists every module with its own first
docstring line and draws the import layers pyproject.toml enforces, README.md stays a front page, and every
relative link in README.md and docs/*.md reaches a file (and a heading) that exists. A branch merged without its
doc changes fails here, naming the line to write."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from scripts.architecture_map import code_block_span, map_line, modules

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
README_MOST_LINES = 300


def code_block_after(text: str, marker: str) -> list[str]:
    start, end = code_block_span(text, marker)
    return text[start:end].splitlines()


def test_the_architecture_map_lists_every_module_with_its_first_docstring_line() -> None:
    listed = {line.split()[0]: line.rstrip() for line in code_block_after(ARCHITECTURE.read_text(), "## Where things live")
              if line.strip()}
    found = modules()
    wrong = [f"write: {map_line(path)}" for name, path in sorted(found.items()) if listed.get(name) != map_line(path)]
    gone = [f"remove: {name}" for name in sorted(set(listed) - set(found))]
    assert not wrong + gone, ("docs/architecture.md's map is not the code's (`python -m scripts.architecture_map` "
                              "rewrites it):\n" + "\n".join(wrong + gone))


def test_the_layer_diagram_is_the_one_pyproject_enforces() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (layers,) = [c["layers"] for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    drawn = [re.split(r"\s{2,}", line)[0].strip()
             for line in code_block_after(ARCHITECTURE.read_text(), "the layers, top to bottom")
             if line and not line[0].isspace()]
    assert drawn == layers


def test_the_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_MOST_LINES, f"README.md has {lines} lines: move the reference into docs/"


def heading_anchors(path: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation but '-' and '_' left out, spaces as '-'."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
            for title in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE)}


def test_every_relative_link_reaches_a_file_and_a_heading() -> None:
    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            linked = (page.parent / file).resolve() if file else page
            if not linked.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in heading_anchors(linked):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
