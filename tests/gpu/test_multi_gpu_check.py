"""scripts/multi_gpu_check.py's compare on the SYNTHETIC 8-GPU run (tests/fixtures/gpu/multi-gpu-synthetic,
hand-made, see its README), its screenshot step on the fake NVML, and scripts/multi-gpu-check.sh's dry run
on this machine, which has no NVIDIA GPU."""

import html
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

import scripts.multi_gpu_check as check_script

ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC = ROOT / "tests" / "fixtures" / "gpu" / "multi-gpu-synthetic"
SCRIPT = ROOT / "scripts" / "multi_gpu_check.py"



def run_copy(tmp_path: Path, *overlays: Path) -> Path:
    """A copy of the agreeing run with `overlays`' files copied over it."""
    run = tmp_path / "run"
    shutil.copytree(SYNTHETIC / "agree", run)
    for overlay in overlays:
        for path in overlay.iterdir():
            shutil.copy(path, run / path.name)
    return run


def failed(result: dict) -> set[str]:
    return {c["check"] for c in result["checks"] if not c["ok"]}


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_everything_passes_on_the_agreeing_run():
    result = check_script.compare_run(SYNTHETIC / "agree")
    assert failed(result) == set() and result["ok"] and result["gpu_count"] == 8
    labels = [c["check"] for c in result["checks"]]
    for gpu in range(8):
        assert f"GPU {gpu} memory used (MiB) within 1% or 64 MiB of nvidia-smi" in labels
        assert f"GPU {gpu} utilization within 15 points of nvidia-smi" in labels
        assert f"all-reduce rank {gpu} (pid {2101 + gpu}) listed on GPU {gpu}, alive, with its command line" in labels
        assert f"GPU {gpu} NVLink data moved during the all-reduce" in labels
    assert "holder (pid 2188) listed on GPU 0 with at least 10 GiB" in labels
    assert "holder (pid 2188) listed on GPU 1 with at least 10 GiB" in labels
    per_pid = [label for label in labels if label.startswith("pid ") and "memory within 64 MiB" in label]
    assert len(per_pid) == 10  # 8 workers + the holder on 2 GPUs, each (pid, GPU) on its own
    topology = next(c for c in result["checks"] if c["check"].startswith("topology"))
    assert topology["pairs"] == topology["expected_pairs"] == 28 and topology["kinds"] == ["NVLink"]


def test_the_disagreeing_run_fails_on_exactly_its_four_disagreements(tmp_path):
    run = run_copy(tmp_path, SYNTHETIC / "disagree")
    result = check_script.compare_run(run)
    assert not result["ok"]
    assert failed(result) == {
        "GPU 5 memory used (MiB) within 1% or 64 MiB of nvidia-smi",
        "GPU 2 utilization within 15 points of nvidia-smi",
        "every (pid, GPU) nvidia-smi lists is listed by specmon",
        "GPU 4 NVLink data moved during the all-reduce",
    }
    missing = next(c for c in result["checks"] if c["check"].startswith("every (pid, GPU)"))
    assert missing["missing"] == [[3333, 7]]


def test_the_cli_writes_compare_json_and_exits_1_on_a_disagreement(tmp_path):
    run = run_copy(tmp_path, SYNTHETIC / "disagree")
    done = subprocess.run([sys.executable, "-m", "scripts.multi_gpu_check", "compare", str(run)], capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 1, done.stderr
    assert "FAIL  GPU 5 memory used" in done.stdout and done.stdout.rstrip().endswith("SOME CHECKS FAILED")
    assert json.loads((run / "compare.json").read_text()) == check_script.compare_run(run)


def test_a_worker_on_the_wrong_gpu_and_a_holder_short_of_memory_are_caught(tmp_path):
    run = run_copy(tmp_path)

    def misplace(data):
        gpus = data["gpus"]
        worker = gpus[3]["processes"].pop(0)  # rank 3's process read on GPU 4 instead
        gpus[4]["processes"].append({**worker, "gpu_index": 4})
        gpus[1]["processes"][1]["used_mib"] = 5000.0  # the holder's 10 GiB on GPU 1 read as 5000 MiB

    edit_json(run / "specmon-gpus.json", misplace)
    assert failed(check_script.compare_run(run)) == {
        "every (pid, GPU) nvidia-smi lists is listed by specmon",
        "all-reduce rank 3 (pid 2104) listed on GPU 3, alive, with its command line",
        "all-reduce rank 3 (pid 2104) holds memory on no other GPU",
        "pid 2188 on GPU 1 memory within 64 MiB of nvidia-smi",
        "holder (pid 2188) listed on GPU 1 with at least 10 GiB",
    }


def test_topology_is_read_from_nvidia_smi_and_a_wrong_link_is_caught(tmp_path):
    pairs = check_script.parse_topology((SYNTHETIC / "agree" / "nvidia-smi-topo.txt").read_text())
    assert len(pairs) == 28 and set(pairs.values()) == {"NV18"}
    real_single = ROOT / "tests" / "fixtures" / "gpu" / "h200-real-2026-11-29" / "nvidia-smi-topo.txt"
    assert check_script.parse_topology(real_single.read_text()) == {}  # one GPU: no pairs

    run = run_copy(tmp_path)
    edit_json(run / "specmon-gpus.json",
              lambda d: d["topology"].__setitem__(5, {"gpus": [0, 6], "kind": "PCIe", "detail": "SYS"}))
    result = check_script.compare_run(run)
    assert failed(result) == {"topology: every GPU pair as nvidia-smi topo -m says"}
    topology = next(c for c in result["checks"] if c["check"].startswith("topology"))
    assert [d["gpus"] for d in topology["disagreements"]] == [[0, 6]]


def test_on_a_pcie_only_host_the_traffic_comes_from_specmons_pcie_readings(tmp_path):
    run = run_copy(tmp_path)
    topo = run / "nvidia-smi-topo.txt"
    topo.write_text(topo.read_text().replace("NV18", "PHB"))

    def pcie_only(data):
        data["topology"] = [{**link, "kind": "PCIe", "detail": "PHB"} for link in data["topology"]]
        for gpu in data["gpus"]:
            if gpu["index"] == 6:
                gpu["pcie_tx_kbs"] = gpu["pcie_rx_kbs"] = 0.0

    edit_json(run / "specmon-gpus.json", pcie_only)
    lines = [json.loads(line) for line in (run / "specmon-watch.jsonl").read_text().splitlines()]
    for line in lines:
        pcie_only(line)
    (run / "specmon-watch.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = check_script.compare_run(run)
    assert failed(result) == {"GPU 6 PCIe traffic (specmon) during the all-reduce"}
    assert "GPU 5 PCIe traffic (specmon) during the all-reduce" in [c["check"] for c in result["checks"]]


@pytest.mark.parametrize(
    ("name", "change", "label"),
    [
        ("nvml_poll.json", lambda d: d["full_poll_background"].update(max_ms=140.0),
         "one full poll of all GPUs (PCIe in the background, as the sampler does) under 100 ms"),
        ("nvml_poll.json", lambda d: d["full_poll_background"].update(gpus_without_pcie_values=3),
         "one full poll of all GPUs (PCIe in the background, as the sampler does) under 100 ms"),
        ("ui-thread.json", lambda d: d.update(max_ui_gap_ms=420.0),
         "NVML read off the UI thread, which never stalled 100 ms"),
        ("ui-thread.json", lambda d: d.update(read_threads=["MainThread"]),
         "NVML read off the UI thread, which never stalled 100 ms"),
    ],
)
def test_a_slow_poll_or_a_read_on_the_ui_thread_fails(tmp_path, name, change, label):
    run = run_copy(tmp_path)
    edit_json(run / name, change)
    assert failed(check_script.compare_run(run)) == {label}


def test_an_empty_run_folder_fails_without_crashing(tmp_path):
    result = check_script.compare_run(tmp_path)
    assert not result["ok"]
    assert {"specmon sees NVML", "nvidia-smi listed GPUs", "the memory holder started"} <= failed(result)


def svg_text(path: Path) -> str:
    """An SVG screenshot with its entities (spaces are `&#160;`) turned back into plain characters."""
    return html.unescape(path.read_text()).replace("\xa0", " ")


def test_the_screenshot_step_reads_on_the_samplers_thread_and_saves_both_sizes(tmp_path):
    done = subprocess.run([sys.executable, "-m", "scripts.multi_gpu_check", "screenshot", str(tmp_path), "--seconds", "2.5",
                           "--fake", "8"], capture_output=True, text=True, timeout=60, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "ui-thread.json").read_text())
    assert report["read_threads"] == ["gpu-sampler"] and report["ui_thread"] == "MainThread"
    assert report["gpus"] == 8 and report["layout"] == "compact" and report["reads"] >= 2
    for size in ("80x24", "200x50"):
        svg = svg_text(tmp_path / f"gpu-pane-8gpu-{size}.svg")
        assert svg.startswith("<svg") and "8 × NVIDIA H200 (fake NVML)" in svg
    svg = svg_text(tmp_path / "gpu-pane-8gpu-200x50.svg")
    for gpu in range(8):  # every GPU's row, with its PCIe reading (fake: 210+i MB/s out)
        assert f"↑{210 + gpu} MB/s" in svg


def run_shell(tmp_path: Path, path_dirs: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "OUT": str(tmp_path / "out"), "WORK": str(tmp_path / "work"), "PATH": ":".join(path_dirs)}
    return subprocess.run(["bash", str(ROOT / "scripts" / "multi-gpu-check.sh")], capture_output=True, text=True,
                          timeout=60, check=False, env=env)


def archived(tmp_path: Path) -> dict[str, str]:
    with tarfile.open(tmp_path / "out" / "multi-gpu.tgz") as tar:
        return {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}


def test_the_dry_run_without_a_gpu_fails_early_and_still_writes_its_archive(tmp_path):
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi")
    done = run_shell(tmp_path, [str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    assert done.returncode == 2
    assert "no NVIDIA GPU: nvidia-smi is not on PATH" in done.stderr
    files = archived(tmp_path)
    assert files["work/FAILED"].startswith("no NVIDIA GPU")
    assert files["work/exit-status.txt"] == "exit 2\n"
    said = json.loads(files["work/specmon-gpus-detect.json"])
    assert said["available"] is False and "libnvidia-ml.so not found" in said["reason"]
    assert "NCCL_NVLS_ENABLE=0" in files["work/environment.txt"]


def test_the_dry_run_with_one_gpu_says_it_needs_two(tmp_path):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    smi = fake_bin / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-6ed86cf1-37f2-6bc8-7a32-d907f727c3f0)'\n")
    smi.chmod(0o755)
    done = run_shell(tmp_path, [str(fake_bin), str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    assert done.returncode == 2
    files = archived(tmp_path)
    assert files["work/FAILED"] == "needs at least 2 GPUs (the holder takes GPUs 0,1), nvidia-smi lists 1\n"
    assert "work/workers/rank-0.log" not in files  # nothing was started


def test_a_step_that_crashed_before_writing_its_json_fails_its_check_only(tmp_path):
    run = run_copy(tmp_path)
    (run / "nvml_poll.json").write_text("")  # what the one-GPU rehearsal's segfaulted nvml_poll.py left
    assert failed(check_script.compare_run(run)) == {
        "one full poll of all GPUs (PCIe in the background, as the sampler does) under 100 ms"}


class FieldValueNvml:
    """nvmlDeviceGetFieldValues answering with pynvml's own c_nvmlFieldValue_t structures: `counters` maps
    (field, link) to a value; a field it lacks answers NVML_ERROR_NOT_SUPPORTED."""

    def __init__(self, counters: dict[tuple[int, int], int], link_count: int | None):
        self.counters = counters
        self.link_count = link_count
        self.asked: list[list] = []

    def nvmlDeviceGetFieldValues(self, handle, fields):
        import pynvml

        self.asked.append(list(fields))
        values = (pynvml.c_nvmlFieldValue_t * len(fields))()
        for value, field in zip(values, fields, strict=True):
            field_id, link = field if isinstance(field, tuple) else (field, 0)
            value.fieldId, value.scopeId = field_id, link
            if field_id == check_script.NVLINK_LINK_COUNT and self.link_count is not None:
                value.value.uiVal = self.link_count
            elif (field_id, link) in self.counters:
                value.value.ullVal = self.counters[(field_id, link)]
            else:
                value.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return values


def test_nvlink_counters_are_summed_over_the_links_that_answer():
    tx, rx = check_script.NVLINK_DATA_TX, check_script.NVLINK_DATA_RX
    nvml = FieldValueNvml({(tx, 0): 100, (rx, 0): 40, (tx, 1): 5, (rx, 1): 7}, link_count=3)
    assert check_script.read_nvlink_counters(nvml, None) == (2, 105, 47)  # link 2 did not answer
    assert len(nvml.asked[1]) == 6
    no_count = FieldValueNvml({(tx, 17): 9, (rx, 17): 1}, link_count=None)
    assert check_script.read_nvlink_counters(no_count, None) == (1, 9, 1)
    assert len(no_count.asked[1]) == 2 * check_script.HOPPER_NVLINKS
    assert check_script.read_nvlink_counters(FieldValueNvml({}, link_count=0), None) == (0, 0, 0)


def test_the_real_one_gpu_rehearsal_gets_the_same_verdict_again():
    """The real one-H200 rehearsal (see its README): everything agrees but topology, which needs GPU pairs."""
    run = ROOT / "tests" / "fixtures" / "gpu" / "multi-gpu-rehearsal-1gpu-2026-11-29"
    result = check_script.compare_run(run)
    assert result == json.loads((run / "compare.json").read_text())
    assert failed(result) == {"topology: every GPU pair as nvidia-smi topo -m says"}
    holder = next(c for c in result["checks"] if c["check"].startswith("holder (pid 1004) listed on GPU 0"))
    assert holder["found"]["used_mib"] == 10850.0 and "multi_gpu_check.py hold" in holder["found"]["name"]


REAL_RUNS = sorted((ROOT / "tests" / "fixtures" / "gpu").glob("multi-gpu-real-*"))


@pytest.mark.parametrize("run", REAL_RUNS, ids=[path.name for path in REAL_RUNS])
def test_a_saved_real_multi_gpu_run_passes_again(run):
    """Each real multi-GPU run saved from scripts/multi-gpu-check.sh (none until a multi-GPU machine is
    lent): the compare reaches the device run's verdict again, and that verdict is a pass on 2+ GPUs."""
    result = check_script.compare_run(run)
    assert result == json.loads((run / "compare.json").read_text())
    assert result["ok"] and result["gpu_count"] >= 2, sorted(failed(result))
