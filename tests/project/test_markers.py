"""The markers that pick the fast subset (`pytest -m "not slow"`) name test modules that exist."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import HARDWARE, PROCESS_HEAVY

TESTS = Path(__file__).resolve().parents[1]


def test_every_marked_module_exists_once():
    modules = [p.stem for p in TESTS.glob("*/test_*.py")]
    assert len(modules) == len(set(modules)), "two test modules share a name"
    assert PROCESS_HEAVY - set(modules) == set() and HARDWARE - set(modules) == set()


def test_the_marked_modules_are_the_ones_pytest_marks(pytestconfig):
    marks = {m.split(":")[0] for m in pytestconfig.getini("markers")}
    assert {"slow", "hardware"} <= marks
