"""mypy over specmon as installed: the core, the app and the widgets, each module checked once.

mypy finds a module by its folder, and does not run the import hook of an editable install: in a checkout
`specmon/` holds only the core, so `specmon.tui` and `specmon.widgets` (the tui/ and widgets/ folders, pyproject's
package-dir) are not found from it. So mypy runs on a copy of the sources laid out as installed, made as
scripts.lint_imports makes it, with the configuration in pyproject.toml ([tool.mypy]); the paths in its report are
written back as the checkout's (tui/app.py, not specmon/tui/app.py), so an editor can jump to them.

    python -m scripts.typecheck          # what CI runs
    python -m scripts.typecheck -- ARGS  # ARGS passed on to mypy (e.g. --no-incremental)
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from scripts.lint_imports import ROOT, installed_tree, package_dirs


def checkout_path(installed: str, root: Path = ROOT) -> str:
    """The checkout's path, relative to root, of a file named by its path in the installed tree; others as given."""
    parts = Path(installed).parts
    # The longest import name first: specmon/tui/app.py is tui/app.py, not specmon/ + tui/app.py.
    for name, folder in sorted(package_dirs(root).items(), key=lambda item: -item[0].count(".")):
        prefix = tuple(name.split("."))
        if parts[: len(prefix)] == prefix:
            return str(folder.relative_to(root).joinpath(*parts[len(prefix) :]))
    return installed


_LOCATION = re.compile(r"^(?P<path>[^\s:]+\.pyi?)(?P<rest>:\d+.*)$")


def in_checkout(line: str, root: Path = ROOT) -> str:
    """One line of mypy's report with the file's path made the checkout's."""
    found = _LOCATION.match(line)
    if found is None:
        return line
    return checkout_path(found["path"], root) + found["rest"]


def main(argv: list[str], root: Path = ROOT) -> int:
    """mypy over root's sources laid out as installed, with root's pyproject.toml; its report on stdout."""
    extra = argv[1:] if argv[:1] == ["--"] else argv
    with tempfile.TemporaryDirectory(prefix="specmon-types-") as tmp:
        tree = installed_tree(Path(tmp), root)
        done = subprocess.run(  # noqa: S603 - an argv list of our own paths
            [
                str(Path(sys.executable).with_name("mypy")),
                "--config-file", str(root / "pyproject.toml"),
                "--cache-dir", str(root / ".mypy_cache"),
                *extra,
            ],
            cwd=tree,
            capture_output=True,
            text=True,
            check=False,
        )
    for line in done.stdout.splitlines():
        print(in_checkout(line, root))
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
