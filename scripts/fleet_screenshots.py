"""Regenerate screenshots/fleet-*.svg: `specmon fleet` on a fleet of emulators behind a real Prometheus
(scripts.fleet_rehearsal, servers named by their `server` label, GPU hosts by `node`) at 80x24 and 200x50, and
one server of it (the recorded DP2×TP2 capture, which has no API to answer from) opened through Prometheus.

    .venv/bin/python -m scripts.fleet_screenshots [--history 120]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "screenshots"


def shoot(argv: list[str], size: str, path: Path, duration: float = 8.0) -> None:
    env = {**os.environ, "SPECMON_HEADLESS_SIZE": size}
    subprocess.run([sys.executable, "-m", "specmon", *argv, "--headless", "--duration", str(duration),  # noqa: S603
                    "--screenshot", str(path)], check=True, env=env, timeout=120)
    print(f"wrote {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=float, default=120.0, help="seconds of traffic before the shots")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fleet = subprocess.Popen([sys.executable, "-m", "scripts.fleet_rehearsal", "--seconds",  # noqa: S603
                                  str(args.history + 180), "--out", tmp], cwd=ROOT)
        try:
            info = Path(tmp) / "fleet.json"
            deadline = time.monotonic() + 120
            while not info.exists():
                if time.monotonic() > deadline or fleet.poll() is not None:
                    raise SystemExit("the rehearsal fleet did not come up")
                time.sleep(0.5)
            data = json.loads(info.read_text())
            time.sleep(args.history)
            base = ["fleet", "--prometheus", data["prometheus"], "--window", "10", "--interval", "2",
                    "--server-label", "server", "--host-label", "node"]
            shoot(base, "80x24", OUT / "fleet-80x24.svg")
            shoot(base, "200x50", OUT / "fleet-200x50.svg")
            shoot([*base, "--server", "dp2tp2-capture"], "200x50", OUT / "fleet-drill-prometheus-200x50.svg")
        finally:
            fleet.terminate()
            fleet.wait(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
