"""Write SGLang's launch-flag tables (tui/sglang/data/sglang-VERSION.json) from SGLang sources.

    pip download --no-deps sglang==0.5.16 -d /tmp/sgl        # a wheel is a zip file
    .venv/bin/python -m scripts.sglang_flags /tmp/sgl/sglang-0.5.16-*.whl [more wheels or sglang/ dirs]

Each argument is a wheel, or an sglang package directory (the folder holding srt/server_args.py). The
source is read with the same AST reader `specmon.tui.sglang.flags.read_installed` uses; nothing is imported.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from specmon.tui.sglang.flags import DATA_DIR
from specmon.tui.sglang.source import SGLangSourceError, read_source


def table_json(data: dict[str, Any]) -> str:
    """The exact text a shipped table file holds."""
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


@contextlib.contextmanager
def unpacked_wheel(wheel: Path) -> Iterator[Path]:
    """The `sglang/` folder of a wheel, its Python sources and METADATA unpacked in a temporary folder."""
    try:
        with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if name.endswith(".py") and name.startswith("sglang/") or name.endswith(".dist-info/METADATA"):
                    archive.extract(name, tmp)
            yield Path(tmp) / "sglang"
    except (OSError, zipfile.BadZipFile) as error:
        raise SGLangSourceError(f"cannot read {wheel}: {error}") from error


def read_any(path: Path) -> dict[str, Any]:
    """The table data of a wheel or an sglang package directory."""
    if path.suffix == ".whl":
        with unpacked_wheel(path) as package:
            return read_source(package, generated_from=path.name)
    return read_source(path, generated_from=f"sglang {path.name}/ source")


def write_table(data: dict[str, Any], out_dir: Path) -> Path:
    """Write one table as `sglang-VERSION.json` under `out_dir`; returns its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"sglang-{data['version']}.json"
    path.write_text(table_json(data), encoding="utf-8")
    return path


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
        path = write_table(data, args.out)
        print(f"{path}: {len(data['flags'])} flags, {len(data['defaults'])} defaults ({data['layout']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
