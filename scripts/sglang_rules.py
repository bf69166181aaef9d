"""Write SGLang's launch rules (tui/sglang/data/rules-VERSION.json) from SGLang sources.

    pip download --no-deps sglang==0.5.16 -d /tmp/sgl
    .venv/bin/python scripts/sglang_rules.py /tmp/sgl/sglang-0.5.16-*.whl [more wheels or sglang/ dirs]

The same AST reader `specmon.tui.sglang.rules.read_installed_rules` uses; nothing is imported.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from scripts.sglang_flags import unpacked_wheel
from specmon.tui.sglang.flags import DATA_DIR
from specmon.tui.sglang.rules import read_rules
from specmon.tui.sglang.source import SGLangSourceError


def rules_json(data: dict[str, Any]) -> str:
    """The exact text a shipped rules file holds."""
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def read_any(path: Path) -> dict[str, Any]:
    """The rules of a wheel or an sglang package directory."""
    if path.suffix != ".whl":
        return read_rules(path)
    with unpacked_wheel(path) as package:
        return read_rules(package)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sources", nargs="+", type=Path, help="sglang wheels or package directories")
    parser.add_argument("--out", type=Path, default=DATA_DIR, help=f"output folder (default {DATA_DIR})")
    args = parser.parse_args(argv)
    for source in args.sources:
        try:
            data = read_any(source)
        except SGLangSourceError as error:
            print(f"{source}: {error}", file=sys.stderr)
            return 1
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"rules-{data['version']}.json"
        path.write_text(rules_json(data), encoding="utf-8")
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
