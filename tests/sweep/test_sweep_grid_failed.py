"""A grid configuration whose launch fails (as on the H200: SGLang found no memory left for the KV cache) says
why in each of its cells, the sweep goes on to the next, the report lists it, and `--resume` launches it again
and measures it once the cause is gone. Real emulated servers, failing at startup the way SGLang does."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from specmon.ports import free_port_pair
from tests.support.oncall import Oncall, wait_for, write_preset

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def oc(tmp_path: Path):
    env = Oncall(tmp_path)
    yield env
    env.cleanup()


def test_a_failed_launch_is_said_per_cell_and_resume_launches_it_again(oc: Oncall) -> None:
    write_preset(oc.presets, "grid-base", "demo-eagle3-5", f"port = {free_port_pair()}\n"
                 'emulator-fail = "not-enough-memory"')
    preset = oc.presets / "grid-base.toml"
    sweep = ("sweep", "--presets", str(oc.presets), "grid-base", "--steps", "2,3", "--topk", "1", "--concurrency",
             "1,2", "--requests", "2", "--json", "--leave", "none")
    done = oc.run(*sweep, timeout=400, presets=False)
    assert done.returncode == 1, (done.returncode, done.stderr[-3000:])
    assert "--resume launches it again" in done.stderr  # the plan says what a resume retries
    report = json.loads(done.stdout)
    assert report["launched"] == 2 and len(report["cells"]) == 4, report  # every configuration was tried
    for cell in report["cells"]:
        assert cell["state"] == "skipped" and cell["reason"].startswith("launch failed: "), cell
        assert "pending" not in cell["reason"] and len(cell["reason"]) > len("launch failed: ") + 10, cell
    listed = {(f["steps"], f["draft_tokens"]) for f in report["launch_failed"]}
    assert listed == {(0, 1), (2, 3), (3, 4)}, report["launch_failed"]

    preset.write_text(preset.read_text().replace('emulator-fail = "not-enough-memory"', ""))  # memory freed
    resumed = oc.run("sweep", "--presets", str(oc.presets), "--resume", report["run_id"], "--json", "--leave",
                     "none", timeout=400, presets=False)
    assert "resume: launching again grid-base@s2k1d3" in resumed.stderr, resumed.stderr[-3000:]
    again = json.loads(resumed.stdout)
    assert [c["state"] for c in again["cells"]] == ["measured"] * 4, again["cells"]
    assert again["launch_failed"] == [] and all(c["speedup"] for c in again["cells"])


def test_a_grid_sweep_killed_mid_cell_resumes_cell_by_cell_measuring_none_twice(oc: Oncall) -> None:
    write_preset(oc.presets, "grid-base", "demo-eagle3-5", f"port = {free_port_pair()}")
    proc = oc.popen("sweep", "--presets", str(oc.presets), "grid-base", "--steps", "2,3", "--topk", "1",
                    "--concurrency", "1,2", "--requests", "2", "--json", "--leave", "none")
    sweeps = oc.state / "sweeps"

    def measured_cells(data: dict) -> dict[tuple[int, str, int], str]:
        return {(index, step["preset"], cell["concurrency"]): cell["bench_run_id"]
                for index, step in enumerate(data["steps"]) for cell in step.get("cells", [])
                if cell["state"] == "measured"}

    def mid_grid() -> dict | None:  # a configuration measured at one concurrency, not yet at the other
        for path in sweeps.glob("*.json") if sweeps.is_dir() else []:
            data = json.loads(path.read_text())
            done = measured_cells(data)
            spec = [key for key in done if not key[1].endswith("@nospec")]
            if len(spec) == 1:
                return data
        return None

    before = wait_for(mid_grid, timeout=300, what="the grid between two cells of a configuration")
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    kept = measured_cells(before)
    resumed = oc.run("sweep", "--presets", str(oc.presets), "--resume", before["run_id"], "--json", "--leave",
                     "none", "--yes", timeout=400, presets=False)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    report = json.loads(resumed.stdout)
    assert [c["state"] for c in report["cells"]] == ["measured"] * 4, report["cells"]
    after = json.loads((sweeps / f"{before['run_id']}.json").read_text())
    now = measured_cells(after)
    assert all(now[key] == run_id for key, run_id in kept.items())  # kept, not measured again
    assert len(set(now.values())) == len(now)  # no cell measured twice, none lost
    assert len(now) == 4 * 2  # the baseline first and last and 2 configurations, at 2 concurrencies each


def test_a_server_that_dies_mid_cell_skips_its_cells_with_the_cause_and_the_grid_goes_on(oc: Oncall) -> None:
    # A decode step of 8 tokens runs the emulated GPU out of memory: only steps 3 (4 draft tokens) at 2 running
    # requests reaches it; steps 2 (3 tokens, 6 at 2 running) and no speculation (2) never do.
    write_preset(oc.presets, "grid-base", "demo-eagle3-5", f"port = {free_port_pair()}\n"
                 "emulator-oom-at-step-tokens = 7")
    sweep = ("sweep", "--presets", str(oc.presets), "grid-base", "--steps", "2,3", "--topk", "1", "--concurrency",
             "1,2", "--requests", "2", "--json", "--leave", "none")
    done = oc.run(*sweep, timeout=400, presets=False)
    assert done.returncode == 1, (done.returncode, done.stderr[-3000:])
    report = json.loads(done.stdout)
    cells = {(c["steps"], c["concurrency"]): c for c in report["cells"]}
    assert len(cells) == 4 and report["launched"] == 2, report["cells"]
    died = cells[(3, 2)]
    assert died["state"] == "skipped" and died["speedup"] is None, died
    assert died["reason"].startswith("the server died during concurrency 2: "), died
    assert "CUDA out of memory" in died["reason"], died  # the cause, from its log
    assert [c["state"] for key, c in cells.items() if key != (3, 2)] == ["measured"] * 3, report["cells"]
    assert cells[(2, 2)]["speedup"] and cells[(3, 1)]["speedup"]  # the sweep went on to the next configuration
    assert [(d["steps"], d["concurrency"]) for d in report["server_died"]] == [(3, 2)], report["server_died"]
    assert [row["concurrency"] for row in report["baseline"] if row["decode_tok_s"]] == [1, 2]

    resumed = oc.run("sweep", "--presets", str(oc.presets), "--resume", report["run_id"], "--leave", "none",
                     timeout=400, presets=False)  # the cause is the configuration's own: it dies again
    assert resumed.returncode == 1, resumed.stderr[-3000:]
    assert "resume: launching again grid-base@s3k1d4 (1 cell(s) to measure)" in resumed.stderr, resumed.stderr
    assert "server died: steps 3 topk 1 draft 4: during concurrency 2: torch.OutOfMemoryError: CUDA out of memory" \
        in resumed.stdout, resumed.stdout
    plan = json.loads((oc.state / "sweeps" / f"{report['run_id']}.json").read_text())
    kept = {(step["grid_config"][0], cell["concurrency"]): cell["bench_run_id"]
            for step in plan["steps"][1:-1] for cell in step["cells"] if cell["state"] == "measured"}
    assert kept == {key: c["run_id"] for key, c in cells.items() if key != (3, 2)}  # none measured again
