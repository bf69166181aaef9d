"""GpuSampler on its own thread, its history and time windows, and DemoGpuSource over real HTTP."""

import json
import threading
import time
from pathlib import Path

import psutil
import pytest

from specmon.gpu.demo import DemoGpuSource
from specmon.gpu.model import GpuReading, GpuSnapshot
from specmon.gpu.nvml import NvmlSource
from specmon.gpu.processes import ProcessInspector
from specmon.gpu.sampler import GpuSampler
from specmon.testing.fake_nvml import FakeNvml
from tests.support.serving_replay import ReplayServer

FIXTURES = Path(__file__).parents[1] / "fixtures" / "gpu"


class ScriptedSource:
    """Hands out prepared snapshots (or raises), one per read."""

    def __init__(self, items):
        self.items = list(items)
        self.closed = False

    def read(self):
        item = self.items.pop(0) if len(self.items) > 1 else self.items[0]
        if isinstance(item, Exception):
            raise item
        return item

    def close(self):
        self.closed = True


def snap(at, *reasons_per_gpu):
    gpus = [GpuReading(index=i, throttle_reasons=list(r), util_gpu_pct=50.0) for i, r in enumerate(reasons_per_gpu)]
    return GpuSnapshot(available=True, gpus=gpus, taken_at=at)


def test_the_thread_reports_snapshots_and_stops():
    fake = FakeNvml.h200s(2)
    source = NvmlSource(fake, inspector=ProcessInspector(container=lambda: False))
    got, done = [], threading.Event()

    def on_sample(snapshot):
        got.append((threading.current_thread().name, snapshot))
        if len(got) >= 3:
            done.set()

    sampler = GpuSampler(source, interval_s=0.05, on_sample=on_sample)
    sampler.start()
    assert done.wait(5)
    sampler.stop()
    assert not sampler.running
    assert all(name == "gpu-sampler" for name, _ in got)
    assert all(s.available and len(s.gpus) == 2 for _, s in got)
    assert sampler.latest is sampler.snapshots()[-1] and len(sampler.snapshots()) >= 3
    assert not fake.initialized  # stop() closed the source, which shut NVML down


def test_pace_changes_how_often_the_gpus_are_read_and_wakes_the_thread_at_once():
    reads = []
    source = ScriptedSource([snap(0.0, [])])
    sampler = GpuSampler(source, interval_s=600.0, on_sample=lambda snapshot: reads.append(time.monotonic()))
    sampler.start()
    try:
        deadline = time.monotonic() + 10
        while not reads and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(reads) == 1  # the first read at once, the next one 10 minutes later
        sampler.pace(0.05)  # a benchmark starts: read now, and often
        while len(reads) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(reads) >= 4
        sampler.pace(600.0)  # idle again: one read at the change, then none for 10 minutes
        time_of_change, count = time.monotonic(), len(reads)
        while len(reads) < count + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        settled = len(reads)
        assert settled <= count + 2 and all(t < time_of_change + 5 for t in reads)
    finally:
        sampler.stop()
    assert not sampler.running


def test_the_app_reads_its_gpus_seldom_only_while_a_ready_server_idles():
    from specmon.view.state import gpu_sample_interval

    assert gpu_sample_interval(False, "ready", 10.0) == 10.0
    assert gpu_sample_interval(True, "ready", 10.0) == 1.0  # a benchmark runs
    for state in ("starting", "failed", "unreachable", "exited", None):
        assert gpu_sample_interval(False, state, 10.0) == 1.0


def test_a_failing_source_and_a_failing_callback_never_kill_the_thread():
    source = ScriptedSource([RuntimeError("nvml exploded"), snap(time.time(), [])])
    seen, done = [], threading.Event()

    def on_sample(snapshot):
        seen.append(snapshot)
        if len(seen) >= 3:
            done.set()
        raise ValueError("a broken consumer")

    sampler = GpuSampler(source, interval_s=0.02, on_sample=on_sample)
    sampler.start()
    assert done.wait(5)
    sampler.stop()
    assert not seen[0].available and "nvml exploded" in seen[0].reason
    assert seen[1].available
    assert sampler.callback_errors >= 3 and source.closed


def test_history_is_bounded_by_time():
    base = 1_000_000.0
    source = ScriptedSource([snap(base + t, []) for t in range(100)])
    sampler = GpuSampler(source, interval_s=1.0, history_s=30)
    for _ in range(100):
        sampler.sample_once()
    kept = sampler.snapshots()
    assert kept[0].taken_at == base + 69 and kept[-1].taken_at == base + 99
    assert len(sampler.history(0, seconds=10)) == 11


def test_window_and_throttled_during_flag_only_slowdowns_in_the_window():
    base = 2_000_000.0
    items = [
        snap(base + 0, ["idle"], []),
        snap(base + 1, ["power cap"], []),          # before the window
        snap(base + 2, ["sync boost"], ["thermal"]),
        snap(base + 3, ["power cap", "hw thermal"], ["thermal"]),
        snap(base + 4, [], []),
        snap(base + 5, [], ["power brake"]),         # after the window
    ]
    sampler = GpuSampler(ScriptedSource(items))
    for _ in items:
        sampler.sample_once()
    assert [s.taken_at - base for s in sampler.window(base + 2, base + 4)] == [2, 3, 4]
    flags = sampler.throttled_during(base + 2, base + 4)
    assert [(f.gpu_index, f.reason, f.samples) for f in flags] == [
        (0, "hw thermal", 1), (0, "power cap", 1), (1, "thermal", 2)
    ]
    assert flags[2].first_at == base + 2 and flags[2].last_at == base + 3
    assert sampler.throttled_during(base + 4, base + 4.5) == []


def test_summarize_keeps_clocks_temperature_and_slowdowns_of_the_window():
    base = 3_000_000.0
    items = []
    for step, (clock, temp, reasons) in enumerate(
        [(1980, 50, []), (1980, 60, ["power cap"]), (1755, 71, ["power cap", "thermal"]), (1900, 65, [])]
    ):
        s = snap(base + step, reasons, [])
        s.gpus[0].sm_clock_mhz, s.gpus[0].temp_c, s.gpus[0].power_w = clock, temp, 600.0 + step
        s.gpus[1].error = "GPU is lost" if step == 3 else None
        items.append(s)
    sampler = GpuSampler(ScriptedSource(items))
    for _ in items:
        sampler.sample_once()
    gpu0, gpu1 = sampler.summarize(base + 1, base + 3)
    assert (gpu0.samples, gpu0.sm_clock_median_mhz, gpu0.sm_clock_min_mhz) == (3, 1900, 1755)
    assert (gpu0.temp_max_c, gpu0.power_max_w, gpu0.util_mean_pct) == (71, 603.0, 50.0)
    assert gpu0.slowdowns == ("power cap", "thermal")
    assert gpu1.samples == 2 and gpu1.sm_clock_median_mhz is None and gpu1.slowdowns == ()
    assert gpu0.to_json()["slowdowns"] == ["power cap", "thermal"]


@pytest.fixture
def feed():
    with ReplayServer() as server:
        yield server


def test_demo_source_reads_the_emulator_endpoint(feed):
    feed.behaviour.gpus = (FIXTURES / "h200x8-sglang-tp8.json").read_bytes()
    source = DemoGpuSource(f"{feed.url}/_emulator/gpus")
    snapshot = source.read()
    source.close()
    assert snapshot.available and snapshot.source == "emulator"
    assert len(snapshot.gpus) == 8 and snapshot.gpus[5].slowdowns == ["power cap"]
    assert snapshot.to_json()["gpus"] == json.loads(feed.behaviour.gpus)["gpus"]


def test_demo_source_failures_are_states(feed):
    url = f"{feed.url}/_emulator/gpus"
    feed.behaviour.gpus = b"not json"
    assert "malformed" in DemoGpuSource(url).read().reason
    feed.behaviour.gpus, feed.behaviour.gpus_status = b"{}", 503
    assert not DemoGpuSource(url).read().available
    feed.stop()
    gone = DemoGpuSource(url, timeout_s=0.5).read()
    assert not gone.available and "unreachable" in gone.reason


def test_a_source_closed_twice_or_read_after_closing_leaves_no_warning(feed):
    """As the app ends its sources are stopped by more than one owner (the quit dialog's stop, then unmount): a
    second close printed `RuntimeWarning: coroutine 'BlockingFetcher._aclose' was never awaited`."""
    import gc
    import warnings

    feed.behaviour.gpus = (FIXTURES / "h200x8-sglang-tp8.json").read_bytes()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        used, unused = DemoGpuSource(f"{feed.url}/_emulator/gpus"), DemoGpuSource(f"{feed.url}/_emulator/gpus")
        assert used.read().available
        for source in (used, unused, used, unused):
            source.close()
        late = used.read()  # a sampler's thread asking once more
        del used, unused
        gc.collect()
    assert not late.available
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []


def test_the_emulator_feed_s_processes_get_their_owner_from_the_os(feed):
    """The GPU pane's USER column was empty in the demo: the emulator's feed names no user. Its pids are this
    machine's (a loopback feed), so each gets the user it runs as; a pid that is gone stays without one."""
    import getpass
    import os

    gpus = json.loads((FIXTURES / "h200x8-sglang-tp8.json").read_bytes())
    gone_pid = max(psutil.pids()) + 100_000
    for reading, pid in zip(gpus["gpus"], (os.getpid(), gone_pid), strict=False):
        reading["processes"] = [{"pid": pid, "used_mib": 1024, "name": "sglang::scheduler", "alive": True}]
    for reading in gpus["gpus"][2:]:
        reading["processes"] = []
    feed.behaviour.gpus = json.dumps(gpus).encode()
    source = DemoGpuSource(f"{feed.url}/_emulator/gpus")
    snapshot = source.read()
    source.close()
    assert snapshot.available, snapshot.reason
    assert snapshot.gpus[0].processes[0].user == getpass.getuser()
    assert snapshot.gpus[1].processes[0].user is None
