"""DemoGpuSource: the emulator's simulated GPUs, read from its `GET /_emulator/gpus` endpoint."""

from __future__ import annotations

import time

import httpx

from specmon.gpu.model import GpuSnapshot


class DemoGpuSource:
    """Reads a GpuSnapshot (the `specmon gpus --json` shape) from `url`, the full endpoint URL such as
    `http://127.0.0.1:30001/_emulator/gpus`. An unreachable or malformed answer becomes an
    unavailable snapshot with the reason; the next read tries again."""

    def __init__(self, url: str, timeout_s: float = 1.0) -> None:
        self.url = url
        self._client = httpx.Client(timeout=timeout_s, trust_env=False)

    def read(self) -> GpuSnapshot:
        started = time.perf_counter()
        try:
            response = self._client.get(self.url)
            response.raise_for_status()
            snapshot = GpuSnapshot.from_json(response.json())
            snapshot.source = "emulator"
        except httpx.HTTPError as exc:
            snapshot = GpuSnapshot.unavailable(f"emulator GPU feed unreachable: {exc or type(exc).__name__}", "emulator")
        except (ValueError, KeyError, TypeError) as exc:
            snapshot = GpuSnapshot.unavailable(f"emulator GPU feed is malformed: {exc}", "emulator")
        if snapshot.poll_ms is None:
            snapshot.poll_ms = (time.perf_counter() - started) * 1000.0
        return snapshot

    def close(self) -> None:
        self._client.close()
