"""Write SGLang's launch-flag tables (specmon/sglang/data/sglang-VERSION.json) from SGLang sources.

    pip download --no-deps sglang==0.5.16 -d /tmp/sgl        # a wheel is a zip file
    .venv/bin/python -m scripts.sglang_flags /tmp/sgl/sglang-0.5.16-*.whl [more wheels or sglang/ dirs]

Each argument is a wheel, or an sglang package directory (the folder holding srt/server_args.py). The
source is read with the same AST reader `specmon.sglang.flags.read_installed` uses; nothing is imported.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from specmon.sglang.flags import DATA_DIR
from specmon.sglang.source import SGLangSourceError, read_source


def shipped_json(data: dict[str, Any]) -> str:
    """The exact text a shipped data file (a flag table or a rules file) holds."""
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


@contextlib.contextmanager
def unpacked_wheel(wheel: Path) -> Iterator[Path]:
    """The `sglang/` folder of a wheel, its Python sources, METADATA and Rust server library unpacked in a
    temporary folder."""
    try:
        with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as archive:
            for name in archive.namelist():
                if name.endswith(".py") and name.startswith("sglang/") or name.endswith(".dist-info/METADATA") \
                        or name.startswith("sglang/srt/rust_extensions/_server"):
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
    path.write_text(shipped_json(data), encoding="utf-8")
    return path


def write_each_source(
    argv: list[str] | None,
    description: str,
    read: Callable[[Path], dict[str, Any]],
    write: Callable[[dict[str, Any], Path], str],
) -> int:
    """The scripts' command line: `read` each wheel or sglang directory given, `write` it under --out and print
    what `write` says; 1 at the first source that cannot be read."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("sources", nargs="+", type=Path, help="sglang wheels or package directories")
    parser.add_argument("--out", type=Path, default=DATA_DIR, help=f"output folder (default {DATA_DIR})")
    args = parser.parse_args(argv)
    for source in args.sources:
        try:
            data = read(source)
        except SGLangSourceError as error:
            print(f"{source}: {error}", file=sys.stderr)
            return 1
        print(write(data, args.out))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""

    def write(data: dict[str, Any], out_dir: Path) -> str:
        path = write_table(data, out_dir)
        return f"{path}: {len(data['flags'])} flags, {len(data['defaults'])} defaults ({data['layout']})"

    return write_each_source(argv, __doc__.split("\n\n")[0], read_any, write)


if __name__ == "__main__":
    sys.exit(main())
