"""The server's own step times, where SGLang records them (`SGLANG_RECORD_STEP_TIME=1`: its scheduler appends,
at each decode log window, the window's wall time over the log interval to `step_time_dict[running requests]`,
given by /server_info). Read as SGLang's `scripts/playground/bench_speculative.py` reads them: the 20th
percentile at the batch size measured (numpy's linear percentile), here over the windows a cell added (the dict
is kept since the server started: read before and after each cell)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from specmon.bench.stats import percentile

StepTimes = dict[int, list[float]]
MAX_BATCH_SIZES = 4096
MAX_WINDOWS = 1_000_000
PERCENTILE = 20


def step_times_of(info: Any) -> StepTimes | None:
    """A /server_info answer's `step_time_dict` (top level, as older SGLang gives it, or in its first
    `internal_states`), batch sizes as ints and times in seconds; None when it has none. Entries that are not a
    whole batch size with finite, positive times are left out."""
    if not isinstance(info, dict):
        return None
    found = info.get("step_time_dict")
    states = info.get("internal_states")
    if found is None and isinstance(states, list) and states and isinstance(states[0], dict):
        found = states[0].get("step_time_dict")
    if not isinstance(found, dict):
        return None
    out: StepTimes = {}
    total = 0
    for key, times in list(found.items())[:MAX_BATCH_SIZES]:
        text = str(key)
        if not text.isdigit() or len(text) > 7 or not isinstance(times, list):
            continue
        kept = [float(t) for t in times[: MAX_WINDOWS - total]
                if isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t) and t > 0]
        total += len(kept)
        out[int(text)] = kept
    return out


def read_step_times(url: str, api_key: str | None) -> StepTimes | None:
    """The server's step times now (None: it records none, or its /server_info cannot be read)."""
    from specmon.http.client import HttpClient
    from specmon.http.headers import auth_headers
    from specmon.live.scrape import read_server_info
    from specmon.urls import base_url

    async def read() -> StepTimes | None:
        async with HttpClient(base_url(url), headers=auth_headers(api_key), connect_timeout_s=5.0) as http:
            return step_times_of((await read_server_info(http)).info)

    try:
        return asyncio.run(read())
    except (OSError, ValueError, RuntimeError):
        return None


def cell_step_time_ms(before: StepTimes | None, after: StepTimes | None, batch: int) -> tuple[float, int] | None:
    """The 20th percentile (ms) of the step times recorded at `batch` between two readings, and how many log
    windows it is over; None when none was recorded there."""
    if after is None:
        return None
    done = len((before or {}).get(batch, []))
    new = after.get(batch, [])[done:]
    if not new:
        return None
    return round(percentile(new, PERCENTILE) * 1000, 3), len(new)
