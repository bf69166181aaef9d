"""Write the startup log lines of every SGLang version (specmon/sglang/data/loglines.json) from their sources.

    pip download --no-deps sglang==X -d /tmp/wheels          # for every X on the index, 0.4.0 to the newest
    .venv/bin/python -m scripts.sglang_loglines /tmp/wheels/sglang-*.whl [or unpacked sglang/ dirs]

The same AST reader as `specmon.sglang.loglines.read_loglines`; nothing is imported. One table for all versions:
each milestone's templates with the versions that write them.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from scripts.sglang_flags import shipped_json, unpacked_wheel
from specmon.sglang.loglines import SHIPPED_FILE, merge_versions, read_loglines
from specmon.sglang.source import SGLangSourceError


def read_any(path: Path) -> dict[str, Any]:
    """The milestone templates of a wheel or an sglang package directory (`.../sglang`)."""
    if path.suffix != ".whl":
        return read_loglines(path)
    with unpacked_wheel(path) as package:
        return read_loglines(package)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point: read every source given, write the merged table."""
    paths = [Path(p) for p in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    readings = []
    for path in paths:
        try:
            reading = read_any(path)
        except SGLangSourceError as error:
            print(f"{path}: skipped ({error})", file=sys.stderr)
            continue
        found = sum(1 for templates in reading["lines"].values() if templates)
        print(f"{reading['version']}: {found} milestones", file=sys.stderr)
        readings.append(reading)
    if not readings:
        return 1
    SHIPPED_FILE.write_text(shipped_json(merge_versions(readings)), encoding="utf-8")
    print(SHIPPED_FILE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
