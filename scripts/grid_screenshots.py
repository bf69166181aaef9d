"""Regenerate screenshots/grid-sweep-*.svg: the app's Benchmark pane on a grid sweep (4 configurations at 5
concurrencies) stored with the emulator's own speed model, as the grid-panel tests store it, weighted by an
observed load.

    .venv/bin/python -m scripts.grid_screenshots
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "screenshots"
SIZES = ((80, 24), (200, 50))


async def shoot(size: tuple[int, int]) -> Path:
    from specmon.bench.results import ResultStore
    from specmon.oncall.state import state_dir
    from specmon.widgets.grid_panel import GridPanel
    from tests.support.app_harness import ready_app, wait_for
    from tests.support.grid_sweeps import write_grid_sweep

    write_grid_sweep(state_dir(), "20261203-100000-aaaa", [(3, 1, 4), (1, 1, 2), (2, 2, 6), (5, 1, 6)],
                     [1, 2, 4, 8, 16])
    results = sorted(ResultStore(state_dir() / "results").load_all(), key=lambda r: r.run_id)
    app = ready_app()
    app.live.running_history = lambda: ([1, 1, 2, 2, 16], 3480.0, "the Live view")  # type: ignore[method-assign]
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.3)
        app.main.show_bench_results(results)
        await pilot.press("3")
        await wait_for(pilot, lambda: app.main.query_one(GridPanel).model is not None, timeout=30)
        await pilot.pause(0.5)
        filename = f"grid-sweep-{size[0]}x{size[1]}.svg"
        app.save_screenshot(filename=filename, path=str(OUT))
    return OUT / filename


def main() -> None:
    with tempfile.TemporaryDirectory() as state:
        os.environ["SPECMON_STATE_DIR"] = state
        for size in SIZES:
            print(asyncio.run(shoot(size)))


if __name__ == "__main__":
    main()
