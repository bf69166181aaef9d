"""GpuSnapshot JSON shape, throttle decoding and zombie flags."""

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from specmon.gpu.model import GpuProcess, GpuReading, GpuSnapshot, decode_throttle_reasons

FIXTURES = Path(__file__).parents[1] / "fixtures" / "gpu"
SPEC_GPU_KEYS = {
    "index", "name", "uuid", "memory_used_mib", "memory_total_mib", "util_gpu_pct", "util_mem_pct", "power_w",
    "power_limit_w", "temp_c", "sm_clock_mhz", "pcie_tx_kbs", "pcie_rx_kbs", "throttle_reasons", "processes",
}


def test_json_round_trip_of_every_fixture_keeps_the_issue_shape():
    for path in sorted(FIXTURES.glob("*.json")):
        data = json.loads(path.read_text())
        snapshot = GpuSnapshot.from_json(data)
        out = snapshot.to_json()
        assert {"available", "reason", "driver", "nvml_version", "gpus"} <= out.keys(), path
        for gpu in out["gpus"]:
            assert gpu.keys() >= SPEC_GPU_KEYS, path
            for proc in gpu["processes"]:
                assert {"pid", "used_mib", "name", "alive"} <= proc.keys()
        assert GpuSnapshot.from_json(json.loads(json.dumps(out))).to_json() == out


def test_from_json_tolerates_missing_and_extra_keys():
    snapshot = GpuSnapshot.from_json(
        {"available": True, "gpus": [{"index": 2, "memory_used_mib": "12", "extra": 1, "processes": [{"pid": 7}]}]}
    )
    gpu = snapshot.gpus[0]
    assert gpu.index == 2 and gpu.memory_used_mib == 12.0 and gpu.power_w is None
    assert gpu.processes[0].gpu_index == 2 and gpu.processes[0].alive


def test_throttle_mask_decodes_into_words_and_slowdowns():
    assert decode_throttle_reasons(0) == []
    assert decode_throttle_reasons(0x4 | 0x20) == ["power cap", "thermal"]
    assert decode_throttle_reasons(0x1 | 0x10000) == ["idle", "bit 0x10000"]
    reading = GpuReading(index=0, throttle_reasons=decode_throttle_reasons(0x1 | 0x10 | 0x40))
    assert reading.slowdowns == ["hw thermal"]


def test_dead_processes_holding_memory_are_zombies():
    gone = GpuProcess(pid=1, used_mib=2048.0, name="x", alive=False, state="gone")
    defunct = GpuProcess(pid=2, used_mib=1024.0, name="y", alive=False, state="defunct")
    hidden = GpuProcess(pid=3, used_mib=1024.0, name="z", alive=False, state="not visible")
    live = GpuProcess(pid=4, used_mib=1024.0, name="w", alive=True, state="running")
    assert gone.zombie and defunct.zombie and not hidden.zombie and not live.zombie
    reading = GpuReading(index=0, processes=[gone, defunct, hidden, live])
    assert reading.zombie_mib == 3072.0
    assert GpuProcess.from_json(gone.to_json()).zombie


def test_fixture_8x_h200_flags_the_zombie_and_the_power_cap():
    snapshot = GpuSnapshot.from_json(json.loads((FIXTURES / "h200x8-sglang-tp8.json").read_text()))
    assert len(snapshot.gpus) == 8
    assert [p.pid for p in snapshot.processes if p.zombie] == [2869913]
    assert [g.index for g in snapshot.gpus if g.slowdowns] == [5]

_opt = st.one_of(st.none(), st.floats(min_value=0, max_value=1e7, allow_nan=False))
_process = st.builds(
    GpuProcess, pid=st.integers(1, 2**22), used_mib=_opt, name=st.text(max_size=40), alive=st.booleans(),
    user=st.one_of(st.none(), st.text(max_size=8)), state=st.sampled_from(["running", "defunct", "gone", "not visible"]),
)


@given(
    st.lists(
        st.builds(
            GpuReading, index=st.integers(0, 15), name=st.one_of(st.none(), st.text(max_size=20)),
            memory_used_mib=_opt, memory_total_mib=_opt, util_gpu_pct=_opt, power_w=_opt, sm_clock_mhz=_opt,
            pcie_tx_kbs=_opt, throttle_reasons=st.lists(st.sampled_from(["idle", "power cap", "thermal"])),
            ecc_corrected=st.one_of(st.none(), st.integers(0, 99)), processes=st.lists(_process, max_size=3),
        ),
        max_size=8,
    ),
    st.booleans(),
)
def test_any_snapshot_survives_a_json_round_trip(gpus, available):
    for gpu in gpus:
        for proc in gpu.processes:
            proc.gpu_index = gpu.index
    snapshot = GpuSnapshot(available=available, gpus=gpus, taken_at=1.0)
    data = json.loads(json.dumps(snapshot.to_json()))
    assert GpuSnapshot.from_json(data).to_json() == data


@given(st.integers(0, 2**16 - 1))
def test_every_throttle_bit_gets_one_word(mask):
    words = decode_throttle_reasons(mask)
    assert len(words) == len(set(words)) == bin(mask).count("1")
