"""scripts/h200_dcgm_record.py without a GPU: one reading through the fake NVML, in dcgm-exporter's units, and
what NVML cannot give recorded as null with the reason (the real run is tests/fixtures/dcgm/README.md's)."""

from __future__ import annotations

from scripts.h200_dcgm_record import FIELDS, GpmReader, read_gpu
from specmon.testing.fake_nvml import FakeNvml
from tests.support.dcgm_exporter import DEFAULT_COUNTERS


def test_one_reading_in_dcgms_fields_and_units():
    nvml = FakeNvml.h200s(1)
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    gpu = nvml.gpus[0]
    errors: dict[str, str] = {}
    fields = read_gpu(nvml, handle, GpmReader(nvml, handle), errors)
    assert set(fields) == set(FIELDS) == {name for name, *_ in DEFAULT_COUNTERS}
    assert fields["DCGM_FI_DEV_SM_CLOCK"] == gpu.sm_clock and fields["DCGM_FI_DEV_GPU_UTIL"] == gpu.util_gpu
    assert fields["DCGM_FI_DEV_POWER_USAGE"] == gpu.power_mw / 1000  # W
    assert fields["DCGM_FI_DEV_FB_USED"] == gpu.used_mib and fields["DCGM_FI_DEV_FB_RESERVED"] == gpu.reserved_mib
    assert fields["DCGM_FI_DEV_FB_FREE"] == gpu.total_mib - gpu.used_mib - gpu.reserved_mib  # MiB
    assert fields["DCGM_FI_PROF_PCIE_TX_BYTES"] == gpu.pcie_tx_kbs * 1024  # no GPM: the PCIe counter, in B/s
    for name in ("DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"):
        assert fields[name] is None
    assert "DCGM_FI_DEV_MEMORY_TEMP" in errors and "GPM" in errors["DCGM_FI_PROF_*"]
    assert fields["DCGM_FI_DEV_XID_ERRORS"] == 0 and "no XID" in FIELDS["DCGM_FI_DEV_XID_ERRORS"]
