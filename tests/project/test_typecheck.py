"""scripts.typecheck: mypy sees the app and the widgets where they are installed, and names the checkout's files;
its configuration mutes no module of ours."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.typecheck import checkout_path, in_checkout, main

PYPROJECT = """
[tool.setuptools]
package-dir = {"pkg" = "pkg", "pkg.app" = "app"}

[tool.mypy]
python_version = "3.11"
packages = ["pkg"]
"""


def test_installed_paths_are_written_back_as_the_checkouts() -> None:
    assert checkout_path("specmon/tui/screens/main.py") == "tui/screens/main.py"
    assert checkout_path("specmon/widgets/gpu_pane.py") == "widgets/gpu_pane.py"
    assert checkout_path("specmon/bench/stats.py") == "specmon/bench/stats.py"
    assert checkout_path("specmon/tuition.py") == "specmon/tuition.py", "a whole folder name, not a prefix"
    assert in_checkout('specmon/tui/app.py:12: error: Name "x" is not defined  [name-defined]') == (
        'tui/app.py:12: error: Name "x" is not defined  [name-defined]'
    )
    assert in_checkout("Found 2 errors in 1 file (checked 3 source files)") == (
        "Found 2 errors in 1 file (checked 3 source files)"
    )


def test_a_mapped_folder_is_checked_as_installed_and_reported_where_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "core.py").write_text("def width() -> int:\n    return 80\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    # The app imports the core and itself by their installed names, as specmon.tui does.
    (tmp_path / "app" / "keys.py").write_text("KEYS = ['q']\n")
    (tmp_path / "app" / "view.py").write_text(
        "from pkg.app.keys import KEYS\nfrom pkg.core import width\n\ntitle: str = width()\nfirst: int = KEYS[0]\n"
    )
    assert main([], root=tmp_path) == 1
    report = capsys.readouterr().out.splitlines()
    assert [line.split(": error:")[0] for line in report if ": error:" in line] == ["app/view.py:4", "app/view.py:5"]
    assert report[-1].startswith("Found 2 errors in 1 file (checked 5 source files)")


def test_the_type_checker_mutes_no_module_of_ours() -> None:
    """Only third-party packages without types may be excused (missing imports); no module of specmon has its
    errors ignored, nor is any left out of the check."""
    import tomllib

    config = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["tool"]["mypy"]
    muted = [
        module
        for override in config.get("overrides", [])
        for module in ([override["module"]] if isinstance(override["module"], str) else override["module"])
        if set(override) - {"module", "ignore_missing_imports"} or module.split(".")[0] == "specmon"
    ]
    assert muted == []
    assert not {"exclude", "ignore_errors", "follow_imports"} & set(config)
