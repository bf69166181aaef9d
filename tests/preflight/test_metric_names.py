"""SGLang's metric names are written once, in `specmon.sglang.metric_names`: each is in the shipped table of
every SGLang version specmon expects it in (and of no other), each constant is named after its metric, and no
other module of specmon writes an `sglang:` name (a source scan: a literal elsewhere would escape the check)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from specmon import textfile
from specmon.sglang import metric_names
from specmon.sglang.flags import version_key
from specmon.sglang.metric_names import EXPECTED_IN, PREFIX, Versions
from specmon.sglang.metrics import load_shipped_metrics, shipped_metric_versions

ROOT = Path(__file__).parents[2]
SCANNED = ("specmon", "tui", "widgets", "scripts", "benchmarks")
CONSTANTS_MODULE = Path("specmon/sglang/metric_names.py")
_METRIC_NAME = re.compile(r"sglang:(?!:)")  # `sglang::scheduler` is a process title, not a metric


def expected_in(versions: Versions, version: str) -> bool:
    later = version_key(version) >= version_key(versions.since)
    return later and (versions.gone_in is None or version_key(version) < version_key(versions.gone_in))


def test_each_name_is_in_the_shipped_tables_of_exactly_the_versions_it_is_expected_in():
    tables = {version: load_shipped_metrics(version).families for version in shipped_metric_versions()}
    wrong = [(name, version, "missing" if expected_in(versions, version) else "there, not expected")
             for name, versions in EXPECTED_IN.items() for version, families in tables.items()
             if (name in families) != expected_in(versions, version)]
    assert wrong == []
    assert [name for name in EXPECTED_IN if not any(name in families for families in tables.values())] == []


def test_each_constant_is_named_after_its_metric_and_has_its_versions():
    constants = {key: value for key, value in vars(metric_names).items()
                 if key.isupper() and key != "PREFIX" and isinstance(value, str)}
    assert {key: value for key, value in constants.items() if key != value.removeprefix(PREFIX).upper()} == {}
    assert set(constants.values()) == set(EXPECTED_IN)
    assert all(name.startswith(PREFIX) for name in EXPECTED_IN)


def sglang_literals(path: Path) -> list[tuple[int, str]]:
    """The string (and bytes) literals of a module that hold an `sglang:` name, docstrings aside (an expression
    statement that is only a string documents; it is no value)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    documentation = {id(node.value) for node in ast.walk(tree)
                     if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in documentation:
            value = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
            if isinstance(value, str) and _METRIC_NAME.search(value):
                found.append((node.lineno, value))
    return found


def test_no_module_but_the_constants_module_writes_an_sglang_metric_name():
    found = {}
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if relative != CONSTANTS_MODULE and (literals := sglang_literals(path)):
                found[str(relative)] = literals
    assert found == {}


def test_the_scan_sees_names_in_strings_f_strings_and_bytes_but_not_in_docstrings(tmp_path):
    module = tmp_path / "module.py"
    module.write_text('"""Reads `sglang:num_running_reqs`."""\n'
                      'A = "sglang:num_queue_reqs"\n'
                      'B = f"rate(sglang:generation_tokens_total{A}[1m])"\n'
                      'C = b"sglang:startup_time_seconds" in b""\n'
                      'D = "sglang::scheduler_TP0"\n'
                      'def f():\n    """`sglang:token_usage`."""\n    return {"x": "sglang:token_usage"}\n')
    assert [line for line, _value in sglang_literals(module)] == [2, 3, 4, 8]


def test_specmons_own_names_are_the_textfiles_families_and_none_is_sglangs():
    own = {key: value for key, value in vars(textfile).items()
           if key.isupper() and isinstance(value, str) and value.startswith("specmon_")}
    assert set(own.values()) == set(textfile.FAMILIES)
    assert {key: value for key, value in own.items() if key != value.removeprefix("specmon_").upper()} == {}
    assert set(own.values()) & set(EXPECTED_IN) == set()
