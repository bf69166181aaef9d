"""A DCGM exporter stand-in: dcgm-exporter's /metrics format, replaying NVML readings recorded on a real H200.

    python -m tests.support.dcgm_exporter --port 9400 [--fixture F.json] [--phase load] [--hostname gpu-node-1]

The format is dcgm-exporter 4.5.3-4.8.2's (NVIDIA/dcgm-exporter, internal/pkg/rendermetrics/render_metrics.go
and etc/default-counters.csv): its default counters with their Prometheus types and help texts, one sample per
GPU labelled `gpu`, `UUID`, `pci_bus_id`, `device` (`nvidiaN`), `modelName`, `Hostname` (`hostname` on its main
branch since #655: `--hostname-label`), the driver version as a `DCGM_FI_DRIVER_VERSION` label, and `err_code` /
`err_msg` on XID errors. Integer fields are written as integers, double fields with `%f` (DCGM's field types,
dcgm_fields.cpp); a field without a value is left out, as dcgm-exporter skips blank values. FB_USED and FB_FREE
are MiB, GPU_UTIL is %.

The values are the readings of `scripts/h200_dcgm_record.py` (REAL NVML readings; tests/fixtures/dcgm/README.md),
replayed in time: reading i at `i * interval / speed` seconds after the start, looping over the chosen phase.
It is test support, not part of specmon: the demo has no Prometheus to scrape it, and its data are test fixtures.
Every /metrics answer starts with a comment line saying what it is (Prometheus ignores such comments), and `/`
says the same.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm"
MAX_FIXTURE_BYTES = 16 * 1024 * 1024
MAX_GPUS = 64
EXPORTER_VERSION = "4.5.3-4.8.2"

# etc/default-counters.csv at dcgm-exporter 4.5.3-4.8.2: (field, Prometheus type, help); DCGM's field type.
DEFAULT_COUNTERS: tuple[tuple[str, str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "int64"),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "int64"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", "int64"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "int64"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "double"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "Total energy consumption since boot (in mJ).", "int64"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", "int64"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "int64"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "int64"),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", "int64"),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", "int64"),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", "int64"),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "int64"),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "int64"),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", "int64"),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter",
     "Total number of NVLink bandwidth counters for all lanes.", "int64"),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status", "int64"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for uncorrectable errors",
     "int64"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "Number of remapped rows for correctable errors", "int64"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", "int64"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", "double"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active.", "double"),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
     "Ratio of cycles the device memory interface is active sending or receiving data.", "double"),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted over the PCIe bus - including both "
     "protocol headers and data payloads - in bytes per second.", "int64"),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over the PCIe bus - including both "
     "protocol headers and data payloads - in bytes per second.", "int64"),
)
XID_NO_ERROR = "No Error"  # xidErrCodeToText[0]; other codes are left as "Unknown Error" here
_MAX_VALUE = 1e18  # above any real reading: a value past it is treated as blank


class FixtureError(ValueError):
    """A recording that cannot be replayed; the message says why."""


@dataclass(frozen=True)
class Gpu:
    """One GPU's identity labels."""

    index: int
    uuid: str
    pci_bus_id: str
    name: str


@dataclass(frozen=True)
class Recording:
    """A checked recording: GPUs, readings (per reading, per GPU, field -> value or None) and provenance."""

    path: Path
    driver: str
    recorded_at: str
    hostname: str
    interval_s: float
    gpus: tuple[Gpu, ...]
    phases: tuple[str, ...]
    readings: tuple[tuple[dict[str, float | None], ...], ...]

    def phase(self, name: str) -> Recording:
        """The readings of one phase (`all`: every reading)."""
        if name == "all":
            return self
        keep = [r for r, p in zip(self.readings, self.phases, strict=True) if p == name]
        if not keep:
            raise FixtureError(f"{self.path.name} has no readings in phase {name!r} (it has {sorted(set(self.phases))})")
        return Recording(self.path, self.driver, self.recorded_at, self.hostname, self.interval_s, self.gpus,
                         (name,) * len(keep), tuple(keep))


def _number(value: Any) -> float | None:
    """A recorded value, or None (blank) when it is not a finite, non-negative, plausible number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) and 0 <= value <= _MAX_VALUE else None


def _label(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 200 or any(c in value for c in '"\\\n'):
        raise FixtureError(f"{what} is not a plain label value: {value!r}")
    return value


def load_recording(path: Path) -> Recording:
    """Read and check a recording of `scripts/h200_dcgm_record.py`; FixtureError says what is wrong."""
    try:
        size = path.stat().st_size
        if size > MAX_FIXTURE_BYTES:
            raise FixtureError(f"{path} is {size} bytes, more than {MAX_FIXTURE_BYTES}")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise FixtureError(f"cannot read {path}: {error}") from error
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list) or not isinstance(data.get("samples"), list):
        raise FixtureError(f"{path} is not a recording (no gpus and samples lists)")
    if not 0 < len(data["gpus"]) <= MAX_GPUS:
        raise FixtureError(f"{path} records {len(data['gpus'])} GPUs (1 to {MAX_GPUS} replayable)")
    gpus = []
    for i, gpu in enumerate(data["gpus"]):
        if not isinstance(gpu, dict) or gpu.get("index") != i:
            raise FixtureError(f"{path}: GPU {i} is not listed in index order")
        gpus.append(Gpu(i, _label(gpu.get("uuid"), "uuid"), _label(gpu.get("pci_bus_id"), "pci_bus_id"),
                        _label(gpu.get("name"), "name")))
    readings, phases = [], []
    for n, sample in enumerate(data["samples"]):
        rows = sample.get("gpus") if isinstance(sample, dict) else None
        if not isinstance(rows, list) or len(rows) != len(gpus):
            raise FixtureError(f"{path}: reading {n} does not cover every GPU")
        per_gpu = []
        for row in rows:
            fields = row.get("fields") if isinstance(row, dict) else None
            if not isinstance(fields, dict):
                raise FixtureError(f"{path}: reading {n} has a GPU without fields")
            per_gpu.append({name: _number(fields.get(name)) for name, *_ in DEFAULT_COUNTERS})
        readings.append(tuple(per_gpu))
        phases.append(str(sample.get("phase") or "all"))
    if not readings:
        raise FixtureError(f"{path} holds no readings")
    interval = _number(data.get("interval_s")) or 1.0
    return Recording(path, _label(data.get("driver"), "driver"), str(data.get("recorded_at") or "?"),
                     str(data.get("hostname") or "?"), max(0.05, interval), tuple(gpus), tuple(phases),
                     tuple(readings))


def newest_fixture(folder: Path = FIXTURES) -> Path:
    """The most recent recording in tests/fixtures/dcgm (file names sort by date)."""
    found = sorted(folder.glob("*.json"))
    if not found:
        raise FixtureError(f"no recording (*.json) in {folder}")
    return found[-1]


def _span(recording: Recording, gpu: int, field: str) -> float:
    """How much a counter rose over the whole recording (0 when it did not, or a reading is blank)."""
    first, last = recording.readings[0][gpu].get(field), recording.readings[-1][gpu].get(field)
    return last - first if first is not None and last is not None and last >= first else 0.0


def _format(value: float, kind: str) -> str:
    return f"{round(value):d}" if kind == "int64" else f"{value:f}"


def render(recording: Recording, index: int, hostname: str, hostname_label: str = "Hostname",
           copies: int = 1) -> str:
    """dcgm-exporter's /metrics text for reading `index` (modulo the readings), GPUs repeated `copies` times.

    Counters keep rising across loops of the recording (each loop adds what the recording's span added), as a
    real counter never goes back."""
    count = len(recording.readings)
    reading = recording.readings[index % count]
    loops = index // count
    lines = [f"# specmon DCGM stand-in (dcgm-exporter {EXPORTER_VERSION} format): REAL NVML readings recorded "
             f"{recording.recorded_at} on {recording.gpus[0].name}, {recording.path.name} reading "
             f"{index % len(recording.readings) + 1}/{len(recording.readings)}"
             + (f"; GPUs copied {copies} times" if copies > 1 else "")]
    for field, prom_type, help_text, kind in DEFAULT_COUNTERS:
        samples = []
        for copy in range(copies):
            for gpu, values in zip(recording.gpus, reading, strict=True):
                value = values.get(field)
                if value is None:
                    continue
                if prom_type == "counter" and loops:
                    value += loops * _span(recording, gpu.index, field)
                number = copy * len(recording.gpus) + gpu.index
                uuid = gpu.uuid if copy == 0 else f"{gpu.uuid[:-4]}{copy:04x}"
                labels = (f'gpu="{number}",UUID="{uuid}",pci_bus_id="{gpu.pci_bus_id}",device="nvidia{number}",'
                          f'modelName="{gpu.name}"')
                if hostname:
                    labels += f',{hostname_label}="{hostname}"'
                labels += f',DCGM_FI_DRIVER_VERSION="{recording.driver}"'
                if field == "DCGM_FI_DEV_XID_ERRORS":
                    code = round(value)
                    labels += f',err_code="{code}",err_msg="{XID_NO_ERROR if code == 0 else "Unknown Error"}"'
                samples.append(f"{field}{{{labels}}} {_format(value, kind)}")
        if samples:
            lines += [f"# HELP {field} {help_text}", f"# TYPE {field} {prom_type}", *samples]
    return "\n".join(lines) + "\n"


class _Handler(BaseHTTPRequestHandler):
    server: DcgmStandIn
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            body, kind = self.server.metrics_text().encode(), "text/plain; charset=utf-8"
        elif path == "/health":
            body, kind = b"OK", "text/plain; charset=utf-8"
        elif path == "/":
            body, kind = (f"<html><body><h1>specmon DCGM stand-in</h1><p>{self.server.describe()}</p>"
                          '<p><a href="./metrics">Metrics</a></p></body></html>').encode(), "text/html; charset=utf-8"
        else:
            body, kind = b"404 page not found\n", "text/plain; charset=utf-8"
            self.send_response(404)
            self._finish(body, kind)
            return
        self.send_response(200)
        self._finish(body, kind)

    def _finish(self, body: bytes, kind: str) -> None:
        self.send_header("Content-Type", kind)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        return


class StopRequested(Exception):
    """`DcgmStandIn.serve_forever` returns by raising this once `stop_requested` is set."""


class DcgmStandIn(ThreadingHTTPServer):
    """The HTTP server: `/metrics`, `/health` (`OK`) and `/`, as dcgm-exporter serves them."""

    daemon_threads = True
    stop_requested = False
    """Set by the SIGTERM handler, which takes no lock (a thread started there can deadlock the main thread)."""

    def service_actions(self) -> None:
        if self.stop_requested:
            raise StopRequested

    def __init__(self, address: tuple[str, int], recording: Recording, *, hostname: str,
                 hostname_label: str = "Hostname", speed: float = 1.0, copies: int = 1) -> None:
        self.recording = recording
        self.hostname = hostname
        self.hostname_label = hostname_label
        self.speed = speed
        self.copies = copies
        self.started = time.monotonic()
        super().__init__(address, _Handler)

    def reading_index(self) -> int:
        return int((time.monotonic() - self.started) * self.speed / self.recording.interval_s)

    def metrics_text(self) -> str:
        return render(self.recording, self.reading_index(), self.hostname, self.hostname_label, self.copies)

    def describe(self) -> str:
        r = self.recording
        return (f"dcgm-exporter {EXPORTER_VERSION}'s format, replaying REAL NVML readings of {r.gpus[0].name} "
                f"recorded {r.recorded_at} ({r.path.name}, {len(r.readings)} readings, phase {r.phases[0]})")

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, name="dcgm-stand-in", daemon=True)
        thread.start()
        return thread


def main(argv: list[str] | None = None) -> int:
    """Command line entry point: serve until SIGTERM / Ctrl-C; 2 when the recording cannot be replayed."""
    parser = argparse.ArgumentParser(prog="python -m tests.support.dcgm_exporter",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=9400, help="dcgm-exporter's default port 9400")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--fixture", type=Path, default=None, help="a recording (default: the newest in "
                        "tests/fixtures/dcgm)")
    parser.add_argument("--phase", default="all", help="replay only this phase's readings (idle, load, cool)")
    parser.add_argument("--hostname", default=socket.gethostname(), help="the Hostname label (default: this host)")
    parser.add_argument("--hostname-label", choices=("Hostname", "hostname"), default="Hostname",
                        help="Hostname (releases up to 4.5.3-4.8.2) or hostname (dcgm-exporter's main since #655)")
    parser.add_argument("--speed", type=float, default=1.0, help="replay this many times faster than recorded")
    parser.add_argument("--gpus", type=int, default=None, help="copies of the recorded GPUs to show (synthetic "
                        "beyond the recorded count; the comment line says so)")
    args = parser.parse_args(argv)
    try:
        recording = load_recording(args.fixture or newest_fixture()).phase(args.phase)
        _label(args.hostname, "--hostname")
    except FixtureError as error:
        print(f"dcgm stand-in: {error}", file=sys.stderr)
        return 2
    gpus = args.gpus or len(recording.gpus)
    copies = max(1, -(-gpus // len(recording.gpus)))
    if args.speed <= 0 or not math.isfinite(args.speed):
        print("dcgm stand-in: --speed must be a positive number", file=sys.stderr)
        return 2
    try:
        server = DcgmStandIn((args.host, args.port), recording, hostname=args.hostname,
                             hostname_label=args.hostname_label, speed=args.speed, copies=copies)
    except OSError as error:
        print(f"dcgm stand-in: cannot listen on {args.host}:{args.port}: {error.strerror}", file=sys.stderr)
        return 1
    print(f"dcgm stand-in listening on http://{args.host}:{args.port}/metrics: {server.describe()}", flush=True)
    signal.signal(signal.SIGTERM, lambda signum, frame: setattr(server, "stop_requested", True))
    with contextlib.suppress(KeyboardInterrupt, StopRequested):
        server.serve_forever(poll_interval=0.2)
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
