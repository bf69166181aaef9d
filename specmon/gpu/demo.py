"""DemoGpuSource: the emulator's simulated GPUs, read from its `GET /_emulator/gpus` endpoint."""

from __future__ import annotations

import time

import httpx

from specmon.bounded_http import AnswerRefused, AnswerTooSlow, BlockingFetcher
from specmon.gpu.model import GpuSnapshot
from specmon.inputs import MIB

MAX_FEED_BYTES = 4 * MIB


class DemoGpuSource:
    """Reads a GpuSnapshot (the `specmon gpus --json` shape) from `url`, the full endpoint URL such as
    `http://127.0.0.1:30001/_emulator/gpus`. An unreachable, slow, oversized or malformed answer becomes an
    unavailable snapshot with the reason; the next read tries again."""

    def __init__(self, url: str, timeout_s: float = 1.0) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._fetcher = BlockingFetcher(timeout=timeout_s, trust_env=False)

    def read(self) -> GpuSnapshot:
        started = time.perf_counter()
        try:
            answer = self._fetcher.fetch("GET", self.url, limit=MAX_FEED_BYTES, deadline_s=self.timeout_s)
            if answer.status_code != 200:
                raise httpx.HTTPError(f"HTTP {answer.status_code}")
            snapshot = GpuSnapshot.from_json(answer.json("the emulator GPU feed"))
            snapshot.source = "emulator"
        except (AnswerRefused, AnswerTooSlow) as exc:
            snapshot = GpuSnapshot.unavailable(f"emulator GPU feed not read: {exc}", "emulator")
        except httpx.HTTPError as exc:
            snapshot = GpuSnapshot.unavailable(f"emulator GPU feed unreachable: {exc or type(exc).__name__}", "emulator")
        except Exception as exc:  # any shape of answer: a reason, never a crash
            snapshot = GpuSnapshot.unavailable(f"emulator GPU feed is malformed: {type(exc).__name__}: {exc}"[:300],
                                               "emulator")
        if snapshot.poll_ms is None:
            snapshot.poll_ms = (time.perf_counter() - started) * 1000.0
        return snapshot

    def close(self) -> None:
        self._fetcher.close()
