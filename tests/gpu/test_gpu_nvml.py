"""NvmlSource through a fake NVML module: every failure is a state, never a crash."""

import subprocess
import sys
import time

import psutil
import pynvml
import pytest

from specmon.gpu.nvml import NvmlSource
from specmon.gpu.processes import ProcessInspector
from specmon.testing.fake_nvml import MIB, FakeGpu, FakeNvml


def source_for(fake, **kwargs):
    kwargs.setdefault("inspector", ProcessInspector(container=lambda: False))
    return NvmlSource(fake, **kwargs)


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "libnvidia-ml.so not found"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver is not loaded"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "driver/library version mismatch"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "no permission"),
        (pynvml.NVML_ERROR_UNKNOWN, "NVML failed to initialise: Unknown Error"),
    ],
)
def test_init_failures_become_an_unavailable_snapshot_with_the_reason(code, words):
    snapshot = source_for(FakeNvml(FakeNvml.h200s(2).gpus, init_error=code)).read()
    assert snapshot.available is False
    assert words in snapshot.reason
    assert snapshot.gpus == []


def test_real_pynvml_without_the_library_says_why():
    snapshot = NvmlSource().read()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        assert snapshot.available is False
        assert "libnvidia-ml.so not found" in snapshot.reason
    else:  # a machine with a GPU: the real reading must be available
        pynvml.nvmlShutdown()
        assert snapshot.available is True


def test_a_full_reading_of_eight_h200s():
    fake = FakeNvml.h200s(8)
    fake.gpus[2].throttle_mask = 0x4 | 0x40
    fake.gpus[3].ecc = (5, 1)
    snapshot = source_for(fake, pcie="inline").read()
    assert snapshot.available and snapshot.driver == "570.124.06" and snapshot.nvml_version == "12.570.124.06"
    assert [g.index for g in snapshot.gpus] == list(range(8))
    g0 = snapshot.gpus[0]
    assert g0.name == "NVIDIA H200" and g0.uuid.startswith("GPU-")
    assert g0.memory_used_mib == 128_400 and g0.memory_total_mib == 143_771 and g0.memory_reserved_mib == 540
    assert (g0.util_gpu_pct, g0.util_mem_pct, g0.power_w, g0.power_limit_w) == (88, 41, 512, 700)
    assert (g0.temp_c, g0.sm_clock_mhz, g0.mem_clock_mhz) == (52, 1980, 2619)
    assert (g0.pcie_tx_kbs, g0.pcie_rx_kbs) == (210_000, 95_000)
    assert snapshot.gpus[2].throttle_reasons == ["power cap", "hw thermal"]
    assert (snapshot.gpus[3].ecc_corrected, snapshot.gpus[3].ecc_uncorrected) == (5, 1)
    assert snapshot.gpus[3].to_json()["ecc_errors"] == {"corrected": 5, "uncorrected": 1}
    assert snapshot.gpus[0].to_json()["ecc_errors"] is None
    assert len(snapshot.topology) == 28 and {link.kind for link in snapshot.topology} == {"NVLink"}


def test_topology_is_read_once_and_pcie_words_without_nvlink():
    fake = FakeNvml.h200s(4)
    for gpu in fake.gpus:
        gpu.nvlink = False
    source = source_for(fake)
    first = source.read()
    source.read()
    assert fake.calls["nvmlDeviceGetTopologyCommonAncestor"] == 6
    assert {(link.a, link.b): link.detail for link in first.topology} == {
        (0, 1): "NODE", (2, 3): "NODE", (0, 2): "SYS", (0, 3): "SYS", (1, 2): "SYS", (1, 3): "SYS"
    }
    assert {link.kind for link in first.topology} == {"PCIe"}


def test_unsupported_calls_show_na_and_are_not_repeated():
    fake = FakeNvml.h200s(2)
    fake.gpus[1].throttle_mask = 0x4
    fake.gpus[1].fail = {
        "nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "nvmlDeviceGetTotalEccErrors": pynvml.NVML_ERROR_NOT_SUPPORTED,
        "nvmlDeviceGetTemperature": pynvml.NVML_ERROR_NO_PERMISSION,
        "nvmlDeviceGetCurrentClocksEventReasons": pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    }
    source = source_for(fake)
    for _ in range(3):
        snapshot = source.read()
    g0, g1 = snapshot.gpus
    assert g0.power_w == 512 and g1.power_w is None and g1.temp_c is None
    assert g1.ecc_corrected is None and g1.util_gpu_pct == 89
    assert g1.throttle_reasons == ["power cap"]  # the older ClocksThrottleReasons call answered
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 3
    # power: 3 calls for GPU 0, 1 for GPU 1 (not supported is remembered); temperature is retried
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 4
    assert fake.calls["nvmlDeviceGetTemperature"] == 6


def test_memory_falls_back_to_v1_which_includes_reserved():
    fake = FakeNvml.h200s(1, memory_v2=False)
    snapshot = source_for(fake).read()
    assert snapshot.gpus[0].memory_used_mib == 128_400 + 540
    assert snapshot.gpus[0].memory_reserved_mib is None


def test_a_lost_gpu_keeps_its_row_and_comes_back():
    fake = FakeNvml.h200s(3)
    source = source_for(fake)
    fake.gpus[1].lost = True
    snapshot = source.read()
    assert snapshot.available
    assert [g.error is not None for g in snapshot.gpus] == [False, True, False]
    assert "lost" in snapshot.gpus[1].error and snapshot.gpus[1].memory_used_mib is None
    assert snapshot.gpus[2].memory_used_mib is not None
    fake.gpus[1].lost = False
    assert source.read().gpus[1].error is None


def test_a_gpu_lost_between_calls_is_reported_not_raised():
    fake = FakeNvml.h200s(2)
    fake.gpus[0].fail = {"nvmlDeviceGetUtilizationRates": pynvml.NVML_ERROR_GPU_IS_LOST}
    snapshot = source_for(fake).read()
    assert "lost" in snapshot.gpus[0].error and snapshot.gpus[1].error is None


def test_driver_gone_mid_run_then_back_recovers():
    fake = FakeNvml.h200s(2)
    source = source_for(fake)
    assert source.read().available
    fake.driver_gone()
    gone = source.read()
    assert not gone.available and "driver is not loaded" in gone.reason
    assert not source.read().available
    fake.driver_back()
    back = source.read()
    assert back.available and len(back.gpus) == 2 and back.topology
    assert fake.calls["nvmlInit"] == 3  # first, then retried on each read while gone


def test_an_unexpected_library_error_is_a_state():
    class Broken(FakeNvml):
        def nvmlDeviceGetCount(self):
            raise RuntimeError("boom")

    snapshot = source_for(Broken(FakeNvml.h200s(1).gpus)).read()
    assert not snapshot.available and "could not count" in snapshot.reason


def test_background_pcie_runs_between_polls_and_never_holds_one():
    fake = FakeNvml.h200s(8, pcie_delay_s=0.4)
    source = source_for(fake)  # pcie="background"
    started = time.perf_counter()
    first = source.read()
    assert time.perf_counter() - started < 0.35  # the 0.4 s calls run after the read, not in it
    assert first.gpus[0].pcie_tx_kbs is None
    assert source.read().gpus[0].pcie_tx_kbs is None  # the round is still running: not started twice
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 16  # all 16 started at once, on 16 threads
    time.sleep(0.5)
    third = source.read()
    assert [g.pcie_tx_kbs for g in third.gpus] == [210_000 + 1000 * i for i in range(8)]
    assert [g.pcie_rx_kbs for g in third.gpus] == [95_000 + 500 * i for i in range(8)]
    deadline = time.monotonic() + 2
    while fake.calls["nvmlDeviceGetPcieThroughput"] < 32 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 32  # the third read started the next round
    source.close()


def test_inline_pcie_is_in_the_same_reading():
    fake = FakeNvml.h200s(8, pcie_delay_s=0.02)
    source = source_for(fake, pcie="inline")
    snapshot = source.read()
    assert [g.pcie_rx_kbs for g in snapshot.gpus] == [95_000 + 500 * i for i in range(8)]
    source.close()


def test_inline_pcie_waits_at_most_pcie_wait_s():
    fake = FakeNvml.h200s(4, pcie_delay_s=0.4)
    source = source_for(fake, pcie="inline", pcie_wait_s=0.05)
    started = time.perf_counter()
    first = source.read()
    assert time.perf_counter() - started < 0.35
    assert first.gpus[0].pcie_tx_kbs is None
    time.sleep(0.45)
    assert source.read().gpus[3].pcie_tx_kbs == 213_000  # collected late, then a new round waited for
    source.close()


def test_pcie_every_nth_poll_reuses_the_last_values_and_off_never_calls():
    fake = FakeNvml.h200s(2)
    source = source_for(fake, pcie="inline", pcie_every=3)
    for _ in range(4):
        snapshot = source.read()
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 8  # reads 1 and 4
    assert snapshot.gpus[1].pcie_rx_kbs == 95_500
    source.close()
    off = FakeNvml.h200s(2)
    snapshot = source_for(off, pcie="off").read()
    assert "nvmlDeviceGetPcieThroughput" not in off.calls and snapshot.gpus[0].pcie_tx_kbs is None
    with pytest.raises(ValueError):
        NvmlSource(off, pcie="sometimes")


def test_processes_are_live_gone_or_defunct_with_their_memory():
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    quitter = subprocess.Popen([sys.executable, "-c", "pass"])  # exits and stays unreaped: defunct
    reaped = subprocess.Popen([sys.executable, "-c", "pass"])
    reaped.wait()
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(quitter.pid).status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.02)
        fake = FakeNvml([FakeGpu(used_mib=30_000, processes=[(sleeper.pid, 20_000 * MIB), (quitter.pid, 3_000 * MIB)]),
                         FakeGpu(used_mib=9_000, processes=[(reaped.pid, 8_000 * MIB)],
                                 graphics_processes=[(sleeper.pid, None)])])
        snapshot = source_for(fake).read()
        by_pid = {(p.gpu_index, p.pid): p for p in snapshot.processes}
        live = by_pid[(0, sleeper.pid)]
        assert live.alive and live.used_mib == 20_000 and "time.sleep(30)" in live.name and live.user
        zombie = by_pid[(0, quitter.pid)]
        assert not zombie.alive and zombie.state == "defunct" and zombie.zombie
        gone = by_pid[(1, reaped.pid)]
        assert not gone.alive and gone.state == "gone" and gone.zombie and gone.used_mib == 8_000
        graphics = by_pid[(1, sleeper.pid)]
        assert graphics.kind == "graphics" and graphics.used_mib is None and not graphics.zombie
        assert snapshot.gpus[0].zombie_mib == 3_000
    finally:
        sleeper.kill()
        sleeper.wait()
        quitter.wait()


def test_a_padded_process_title_is_shown_without_its_padding():
    # On a real H200, SGLang's scheduler (`setproctitle("sglang::scheduler")`) read back padded with spaces.
    padded = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", " " * 40])
    try:
        deadline = time.monotonic() + 30  # on a busy machine the child may not have exec'd Python yet
        while "time.sleep(30)" not in " ".join(psutil.Process(padded.pid).cmdline()) and time.monotonic() < deadline:
            time.sleep(0.02)
        fake = FakeNvml([FakeGpu(processes=[(padded.pid, 1_000 * MIB)])])
        name = source_for(fake).read().processes[0].name
    finally:
        padded.kill()
        padded.wait()
    assert name.endswith("time.sleep(30)")


def test_in_a_container_host_pids_are_not_visible_rather_than_gone():
    reaped = subprocess.Popen([sys.executable, "-c", "pass"])
    reaped.wait()
    fake = FakeNvml([FakeGpu(processes=[(reaped.pid, 1_000 * MIB)])])
    snapshot = NvmlSource(fake, inspector=ProcessInspector(container=lambda: True)).read()
    proc = snapshot.processes[0]
    assert proc.state == "not visible" and not proc.zombie


def test_close_waits_for_pcie_calls_in_flight_before_shutting_nvml_down():
    # A background PCIe round still inside NVML while nvmlShutdown runs crashed a process once on a real H200.
    class Recording(FakeNvml):
        in_flight = 0
        overlapped = False

        def nvmlDeviceGetPcieThroughput(self, handle, counter):
            type(self).in_flight += 1
            try:
                return super().nvmlDeviceGetPcieThroughput(handle, counter)
            finally:
                type(self).in_flight -= 1

        def nvmlShutdown(self):
            type(self).overlapped |= type(self).in_flight > 0
            super().nvmlShutdown()

    fake = Recording([FakeGpu(), FakeGpu()], pcie_delay_s=0.2)
    source = source_for(fake, pcie="background")
    source.read()  # leaves the PCIe round running in the background
    assert Recording.in_flight > 0
    source.close()
    assert not Recording.overlapped and Recording.in_flight == 0
