"""The DCGM exporter stand-in (tests/support/dcgm_exporter.py) as a real process on loopback: dcgm-exporter's
names, types, labels and number formats, the real H200 readings it replays (units: MiB, %), counters that never
go back, and recordings that cannot be trusted."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specmon.ports import free_port
from tests.support.dcgm_exporter import DEFAULT_COUNTERS, load_recording, newest_fixture

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
IDENTITY = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}
H200_MIB = 143771  # nvidia-smi's memory.total of the recorded H200


@contextlib.contextmanager
def stand_in(*flags: str):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.dcgm_exporter", "--port", str(port), *flags],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, proc.communicate()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).text == "OK":
                    break
            assert time.monotonic() < deadline, "the stand-in did not come up"
            time.sleep(0.05)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(10)


def values(text: str, field: str) -> list[float]:
    """A field's sample values (prometheus_client's parser names a counter's samples with `_total`)."""
    return [s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name in (field, field + "_total")]


def test_dcgm_exporters_names_types_labels_and_formats(tmp_path):
    with stand_in("--phase", "load", "--hostname", "gpu-node-1") as (url, _proc):
        response = httpx.get(url + "/metrics", timeout=5)
        index = httpx.get(url + "/", timeout=5).text
    assert response.headers["content-type"] == "text/plain; charset=utf-8"
    text = response.text
    assert text.startswith("# specmon DCGM stand-in") and "REAL NVML readings" in text
    assert "specmon DCGM stand-in" in index and "REAL NVML readings" in index
    families = {f.name: f for f in text_string_to_metric_families(text)}
    recorded_blank = {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"}  # NVML: Not Supported on the recorded machine
    assert set(families) == {field.removesuffix("_total") if kind == "counter" else field
                             for field, kind, _help, _type in DEFAULT_COUNTERS} - recorded_blank
    for field, kind, help_text, _type in DEFAULT_COUNTERS:
        if field in recorded_blank:
            assert field not in text
            continue
        family = families[field]
        assert family.type == kind and family.documentation == help_text, field
        for sample in family.samples:
            extra = {"err_code", "err_msg"} if field == "DCGM_FI_DEV_XID_ERRORS" else set()
            assert set(sample.labels) == IDENTITY | extra, field
            assert sample.labels["Hostname"] == "gpu-node-1" and sample.labels["device"] == "nvidia0"
            assert sample.labels["modelName"] == "NVIDIA H200" and sample.labels["UUID"].startswith("GPU-")
    first = next(line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_SM_CLOCK{"))
    assert first.startswith('DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-')  # the template's label order
    assert re.search(r"^DCGM_FI_DEV_FB_USED\{.*\} \d+$", text, re.M)  # int64 fields: "%d"
    assert re.search(r"^DCGM_FI_DEV_POWER_USAGE\{.*\} \d+\.\d{6}$", text, re.M)  # double fields: "%f"
    assert 'err_code="0",err_msg="No Error"' in text


def test_the_replayed_values_are_the_h200_readings_in_dcgms_units():
    with stand_in("--phase", "load", "--speed", "20") as (url, _proc):
        deadline = time.monotonic() + 20
        while values(busy := httpx.get(url + "/metrics", timeout=5).text, "DCGM_FI_DEV_GPU_UTIL")[0] < 90:
            assert time.monotonic() < deadline  # the load's first reading still shows 0 %, as NVML gave it
            time.sleep(0.05)
    with stand_in("--phase", "idle") as (url, _proc):
        idle = httpx.get(url + "/metrics", timeout=5).text
    for text in (busy, idle):
        used, free = values(text, "DCGM_FI_DEV_FB_USED")[0], values(text, "DCGM_FI_DEV_FB_FREE")[0]
        reserved = values(text, "DCGM_FI_DEV_FB_RESERVED")[0]
        assert used + free + reserved == pytest.approx(H200_MIB, abs=2)  # MiB
    assert values(busy, "DCGM_FI_DEV_FB_USED")[0] > 20 * 1024  # the 20 GiB the load held
    assert values(idle, "DCGM_FI_DEV_GPU_UTIL")[0] == 0  # %, 0 to 100
    assert values(busy, "DCGM_FI_DEV_POWER_USAGE")[0] > 5 * values(idle, "DCGM_FI_DEV_POWER_USAGE")[0]
    assert 0.5 < values(busy, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")[0] <= 1.0  # a ratio, not %
    recording = load_recording(newest_fixture()).phase("load")
    assert values(busy, "DCGM_FI_DEV_SM_CLOCK")[0] in {r[0]["DCGM_FI_DEV_SM_CLOCK"] for r in recording.readings}


def test_replay_moves_on_and_counters_never_go_back():
    with stand_in("--phase", "load", "--speed", "40") as (url, _proc):  # 20 readings: a loop each 0.5 s
        seen: list[float] = []
        clocks: set[float] = set()
        deadline = time.monotonic() + 20
        while len(clocks) < 3 or len(seen) < 30:
            text = httpx.get(url + "/metrics", timeout=5).text
            seen.append(values(text, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")[0])
            clocks.add(values(text, "DCGM_FI_DEV_SM_CLOCK")[0])
            assert time.monotonic() < deadline
            time.sleep(0.05)
    assert seen == sorted(seen) and seen[-1] > seen[0]


def test_more_gpus_are_labelled_copies_and_hostname_can_be_lowercase():
    with stand_in("--gpus", "8", "--hostname-label", "hostname", "--hostname", "h1") as (url, _proc):
        text = httpx.get(url + "/metrics", timeout=5).text
    assert "GPUs copied 8 times" in text.splitlines()[0]
    util = [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == "DCGM_FI_DEV_GPU_UTIL"]
    assert [s.labels["gpu"] for s in util] == [str(i) for i in range(8)]
    assert len({s.labels["UUID"] for s in util}) == 8
    assert all(s.labels["hostname"] == "h1" and "Hostname" not in s.labels for s in util)


def write(path: Path, data) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def run(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tests.support.dcgm_exporter", "--port", str(free_port()), *flags],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)


def test_untrustworthy_values_are_left_out_like_blank_dcgm_values(tmp_path):
    real = json.loads(newest_fixture().read_text())
    fields = real["samples"][0]["gpus"][0]["fields"]
    fields.update({"DCGM_FI_DEV_GPU_UTIL": -5, "DCGM_FI_DEV_FB_USED": "lots", "DCGM_FI_DEV_SM_CLOCK": 1e300,
                   "DCGM_FI_DEV_GPU_TEMP": True})
    real["samples"] = real["samples"][:1]
    fixture = write(tmp_path / "hostile.json", real)
    with stand_in("--fixture", str(fixture)) as (url, _proc):
        text = httpx.get(url + "/metrics", timeout=5).text
    for field in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_GPU_TEMP"):
        assert field not in text
    assert values(text, "DCGM_FI_DEV_FB_FREE")


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "cannot read"),
    ({"gpus": [], "samples": []}, "records 0 GPUs"),
    ({"gpus": [{"index": 0, "uuid": 'GPU-"x', "pci_bus_id": "0", "name": "H200"}], "samples": []},
     "not a plain label value"),
    ({"gpus": [{"index": 0, "uuid": "GPU-1", "pci_bus_id": "0", "name": "H200"}], "driver": "1",
      "samples": [{"gpus": []}]}, "does not cover every GPU"),
    ({"gpus": [{"index": 0, "uuid": "GPU-1", "pci_bus_id": "0", "name": "H200"}], "driver": "1",
      "samples": []}, "holds no readings"),
])
def test_a_recording_that_cannot_be_replayed_exits_2_with_the_reason(tmp_path, content, message):
    done = run("--fixture", str(write(tmp_path / "bad.json", content)))
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_an_unknown_phase_and_a_taken_port_are_clear_errors(tmp_path):
    done = run("--phase", "warp")
    assert done.returncode == 2 and "no readings in phase 'warp'" in done.stderr
    with stand_in() as (url, _proc):
        taken = subprocess.run([sys.executable, "-m", "tests.support.dcgm_exporter", "--port", url.rsplit(":", 1)[1]],
                               cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert taken.returncode == 1 and "cannot listen" in taken.stderr


def test_sigterm_ends_it_with_0():
    with stand_in() as (_url, proc):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
