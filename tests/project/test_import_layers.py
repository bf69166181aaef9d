"""No import cycles between specmon's modules, read as import-linter reads them (specmon laid out as installed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.lint_imports import cycles, installed_tree, loop_in, module_imports


@pytest.fixture(scope="module")
def imports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    return module_imports(installed_tree(tmp_path_factory.mktemp("installed")))


def test_the_installed_layout_holds_the_core_the_app_and_the_widgets(imports: dict[str, set[str]]) -> None:
    assert {"specmon.bench.stats", "specmon.tui.app", "specmon.widgets.gpu_pane", "specmon.presets"} <= set(imports)
    assert "specmon.tui.keys" in imports["specmon.tui.app"]


def test_imports_inside_functions_count(imports: dict[str, set[str]]) -> None:
    assert "specmon.bench.summary" in imports["specmon.bench.results"]  # imported in a function body


def test_no_module_takes_part_in_an_import_cycle(imports: dict[str, set[str]]) -> None:
    assert cycles(imports) == []


def test_a_cycle_is_found_however_long(tmp_path: Path) -> None:
    ring = {f"m{i}": {f"m{(i + 1) % 5}"} for i in range(5)}
    assert cycles(ring) == [sorted(ring)]
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}, "d": {"d", "c"}}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert loop_in(sorted(ring), ring) == ["m0", "m1", "m2", "m3", "m4", "m0"]
    two_ways = {"a": {"b", "c"}, "b": {"c"}, "c": {"a"}}
    assert loop_in(cycles(two_ways)[0], two_ways) == ["a", "c", "a"], "the shortest loop"


def test_a_cycle_written_into_the_code_is_found(tmp_path: Path) -> None:
    tree = installed_tree(tmp_path)
    predict = tmp_path / "specmon" / "bench" / "predict.py"
    predict.write_text(predict.read_text() + "\n\ndef _later():\n    from specmon.bench import summary\n")
    assert ["specmon.bench.predict", "specmon.bench.summary"] in cycles(module_imports(tree))
