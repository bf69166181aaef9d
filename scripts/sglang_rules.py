"""Write SGLang's launch rules (specmon/sglang/data/rules-VERSION.json) from SGLang sources.

    pip download --no-deps sglang==0.5.16 -d /tmp/sgl
    .venv/bin/python scripts/sglang_rules.py /tmp/sgl/sglang-0.5.16-*.whl [more wheels or sglang/ dirs]

The same AST reader `specmon.sglang.rules.read_installed_rules` uses; nothing is imported.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from scripts.sglang_flags import shipped_json, unpacked_wheel, write_each_source
from specmon.sglang.rules import read_rules


def read_any(path: Path) -> dict[str, Any]:
    """The rules of a wheel or an sglang package directory."""
    if path.suffix != ".whl":
        return read_rules(path)
    with unpacked_wheel(path) as package:
        return read_rules(package)


def write_rules(data: dict[str, Any], out_dir: Path) -> str:
    """Write one rules file as `rules-VERSION.json` under `out_dir`; says its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"rules-{data['version']}.json"
    path.write_text(shipped_json(data), encoding="utf-8")
    return str(path)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    return write_each_source(argv, __doc__.split("\n\n")[0], read_any, write_rules)


if __name__ == "__main__":
    sys.exit(main())
