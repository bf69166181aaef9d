"""Real SGLang sources for tests: `pip install --no-deps --target` once per session, under the pytest tmp root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

VERSIONS = ("0.4.6.post5", "0.5.9", "0.5.16", "0.5.23")  # 0.5.23: the newest on the index when written


def install(version: str, root: Path) -> Path:
    """The site directory holding sglang==version (installed without dependencies; nothing imported)."""
    target = root / f"sglang-{version}"
    if not (target / "sglang" / "srt" / "server_args.py").is_file():
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--target", str(target),
             f"sglang=={version}"],
            check=True, capture_output=True, timeout=600,
        )
    return target

