"""Simulated GPUs: memory that rises through weight load, KV allocation and capture; load while generating.

Served as JSON in the `specmon gpus --json` shape on the emulator's side port (`GET /_emulator/gpus`),
open from process start, since SGLang's own port only opens after the load.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GPU_NAME = "Emulated NVIDIA H200"
TOTAL_MIB = 143771
CONTEXT_MIB = 530  # CUDA context + NCCL buffers once a scheduler starts
DRIVER = "570.133.20-emulated"
NVML_VERSION = "12.570.133.20-emulated"
IDLE_POWER_W = 76.0
POWER_LIMIT_W = 700.0


class SimulatedGpus:
    """Per-GPU memory and activity of the emulated server; thread-safe."""

    def __init__(self, count: int, pid: int | None = None, clock=time.monotonic) -> None:
        self.count = max(1, count)
        self.pid = pid or os.getpid()
        self._clock = clock
        self._lock = threading.Lock()
        self._used_mib = [0.0] * self.count
        self._started = False
        self._busy = 0.0  # 0..1, how loaded the GPUs are now
        self._transfer_kbs = 0.0
        self._temp = [31.0 + i for i in range(self.count)]
        self._last = clock()

    def start_process(self) -> None:
        """The scheduler processes came up: each GPU holds a CUDA context."""
        with self._lock:
            self._started = True
            self._used_mib = [CONTEXT_MIB + 0.0 for _ in range(self.count)]

    def add_gib(self, gib: float) -> None:
        """Allocate gib GiB on every GPU (weights, KV pool or graphs are sharded evenly)."""
        with self._lock:
            self._used_mib = [min(TOTAL_MIB, used + gib * 1024) for used in self._used_mib]

    def avail_gib(self) -> float:
        """Free memory on GPU 0, as SGLang's `avail mem=` reports it."""
        with self._lock:
            return (TOTAL_MIB - self._used_mib[0]) / 1024

    def set_transfer(self, kbs: float) -> None:
        with self._lock:
            self._transfer_kbs = kbs

    def set_busy(self, fraction: float) -> None:
        with self._lock:
            self._busy = max(0.0, min(1.0, fraction))

    def snapshot(self) -> dict:
        """One reading in the `specmon gpus --json` shape."""
        now_wall = time.time()
        with self._lock:
            now = self._clock()
            dt = max(0.0, now - self._last)
            self._last = now
            gpus = []
            for index in range(self.count):
                wobble = 0.5 + 0.5 * math.sin(now * 1.7 + index)
                busy = self._busy
                util = round(busy * (88 + 10 * wobble)) if busy > 0 else 0
                target_temp = 31 + index + 38 * busy
                self._temp[index] += (target_temp - self._temp[index]) * min(1.0, dt / 20.0)
                processes = []
                if self._started:
                    processes.append(
                        {
                            "pid": self.pid,
                            "used_mib": int(self._used_mib[index]),
                            "name": f"sglang::scheduler_TP{index}" if self.count > 1 else "sglang::scheduler",
                            "alive": True,
                        }
                    )
                gpus.append(
                    {
                        "index": index,
                        "name": GPU_NAME,
                        "uuid": f"GPU-e0000000-0000-4000-8000-{index:012d}",
                        "memory_used_mib": int(self._used_mib[index]),
                        "memory_total_mib": TOTAL_MIB,
                        "util_gpu_pct": util,
                        "util_mem_pct": round(util * 0.55),
                        "power_w": round(IDLE_POWER_W + busy * (480 + 60 * wobble), 1),
                        "power_limit_w": POWER_LIMIT_W,
                        "temp_c": round(self._temp[index]),
                        "sm_clock_mhz": 1980 if busy > 0 else 345,
                        "pcie_tx_kbs": round(self._transfer_kbs * 0.02),
                        "pcie_rx_kbs": round(self._transfer_kbs),
                        "throttle_reasons": [],
                        "processes": processes,
                    }
                )
        return {
            "available": True,
            "reason": None,
            "driver": DRIVER,
            "nvml_version": NVML_VERSION,
            "gpus": gpus,
            "taken_at": now_wall,
            "emulator": True,
        }


class _GpuHandler(BaseHTTPRequestHandler):
    server: GpuEndpoint
    server_version = "specmon-emulator"
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path.split("?", 1)[0] != "/_emulator/gpus":
            body = b'{"detail":"Not Found"}'
            status = 404
        else:
            body = json.dumps(self.server.gpus.snapshot()).encode()
            status = 200
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - quiet: not part of SGLang's log
        return


class GpuEndpoint(ThreadingHTTPServer):
    """The side HTTP server answering `GET /_emulator/gpus`; it binds loopback whatever `--host` says."""

    daemon_threads = True
    HOST = "127.0.0.1"

    def __init__(self, port: int, gpus: SimulatedGpus) -> None:
        self.gpus = gpus
        super().__init__((self.HOST, port), _GpuHandler)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="emulator-gpus", daemon=True)
        thread.start()
        return thread
