"""Write SGLang's Prometheus metric tables (specmon/sglang/data/metrics-VERSION.json) from SGLang sources.

    pip download --no-deps sglang==0.5.16 -d /tmp/sgl
    .venv/bin/python -m scripts.sglang_metrics /tmp/sgl/sglang-0.5.16-*.whl [more wheels or sglang/ dirs]

The same AST reader `specmon.sglang.metrics.read_metrics` uses; nothing is imported.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from scripts.sglang_flags import shipped_json, unpacked_wheel, write_each_source
from specmon.sglang.metrics import read_metrics


def read_any(path: Path) -> dict[str, Any]:
    """The metric table of a wheel or an sglang package directory."""
    if path.suffix != ".whl":
        return read_metrics(path)
    with unpacked_wheel(path) as package:
        return read_metrics(package, generated_from=path.name)


def write_metrics(data: dict[str, Any], out_dir: Path) -> str:
    """Write one table as `metrics-VERSION.json` under `out_dir`; says its path and size."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"metrics-{data['version']}.json"
    path.write_text(shipped_json(data), encoding="utf-8")
    return f"{path}: {len(data['families'])} metric families"


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    return write_each_source(argv, __doc__.split("\n\n")[0], read_any, write_metrics)


if __name__ == "__main__":
    sys.exit(main())
