"""A grid with --skip-predicted-worse launches the fewest servers: the longest chain, measured first, predicts
the shorter chains at each concurrency (with a CI); one predicted slower than no speculation beyond its CI at
every asked concurrency is not launched, its cells shown as predicted; one whose prediction may win is measured.
Checked against the emulator's own speed model, on real emulated servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specmon.emulator.speed_model import SpecShape, SpeedModel
from specmon.ports import free_port_pair
from tests.support.oncall import Oncall, write_preset

ACCEPT_PROB = 0.75  # the emulator's default


def truth(config: tuple[int, int, int], concurrency: int) -> float:
    spec = SpeedModel(SpecShape(*config), ACCEPT_PROB).expected_tokens_per_s(concurrency)
    return spec / SpeedModel(SpecShape(), ACCEPT_PROB).expected_tokens_per_s(concurrency)


@pytest.fixture
def oncall(tmp_path: Path):
    env = Oncall(tmp_path)
    yield env
    env.cleanup()


def grid_base(oncall: Oncall, name: str = "grid-base") -> None:
    write_preset(oncall.presets, name, "demo-eagle3-5", f"port = {free_port_pair()}")
    path = oncall.presets / f"{name}.toml"  # decode slow enough that the speed model, not the CPU, decides
    text = path.read_text().replace("emulator-decode-speed = 20", "emulator-decode-speed = 4")
    path.write_text(text.split("[bench]")[0] + "[bench]\nrequests = 6\nmax-new-tokens = 40\nwarmup = 0\n")


@pytest.mark.timeout(600)
def test_a_chain_predicted_slower_everywhere_is_not_launched_and_its_cells_say_predicted(oncall: Oncall) -> None:
    # at 8 concurrent requests the emulator's s5 chain is well slower than no speculation (0.7x) and s1 faster
    # (1.1x: far enough from 1 that a busy machine's noise does not predict it slower beyond its CI)
    assert truth((5, 1, 6), 8) < 0.8 and truth((1, 1, 2), 8) > 1.05
    grid_base(oncall)
    done = oncall.run("sweep", "--presets", str(oncall.presets), "grid-base", "--steps", "1,5,7", "--topk", "1",
                      "--concurrency", "8", "--skip-predicted-worse", "--json", "--leave", "none", timeout=500,
                      presets=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the longest chain (grid-base@s7k1d8) is measured first" in done.stderr  # the plan says it
    report = json.loads(done.stdout)
    assert report["configs"] == 3 and report["launched"] == 2 and report["restarts_saved"] == 1, report
    assert report["startup_saved_s"] and report["startup_saved_s"] > 0
    cells = {(c["steps"], c["draft_tokens"]): c for c in report["cells"]}
    skipped = cells[(5, 6)]
    assert skipped["state"] == "predicted" and skipped["run_id"] is None, skipped
    assert "not launched" in skipped["reason"] and "every concurrency" in skipped["reason"]
    assert skipped["ci"][1] < 1 and abs(skipped["speedup"] - truth((5, 1, 6), 8)) < 0.2, skipped
    assert skipped["predicted"]["predicted_from"].startswith("run ")
    assert cells[(7, 8)]["state"] == "measured" and cells[(1, 2)]["state"] == "measured"
    # a launched chain carries its prediction beside its measurement
    measured_short = cells[(1, 2)]
    assert measured_short["predicted"]["accept_length"] > 1
    assert abs(measured_short["predicted"]["accept_length"] - measured_short["accept_length"]) < 0.35
    crossing = {(x["steps"], x["draft_tokens"]): x for x in report["crossover"]}
    assert crossing[(5, 6)]["predicted"] and crossing[(5, 6)]["text"].startswith("predicted (not launched)")
    assert all(band["steps"] != 5 for band in report["recommendation"])  # only measured cells are recommended
    assert all("step_time_ms" not in c for c in report["cells"])  # this server records no step times


@pytest.mark.timeout(600)
def test_the_servers_own_step_times_are_read_per_cell_as_bench_speculative_reads_them(oncall: Oncall) -> None:
    grid_base(oncall)
    path = oncall.presets / "grid-base.toml"
    head, bench = path.read_text().split("[bench]")
    path.write_text(head.rstrip() + "\ndecode-log-interval = 4\n[server.env]\nSGLANG_RECORD_STEP_TIME = \"1\"\n"
                    "[bench]" + bench)
    done = oncall.run("sweep", "--presets", str(oncall.presets), "grid-base", "--steps", "3", "--topk", "1",
                      "--concurrency", "1,4", "--json", "--leave", "none", timeout=500, presets=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    rows = [((c["steps"], c["topk"], c["draft_tokens"]), c) for c in report["cells"]]
    rows += [((0, 1, 1), b) for b in report["baseline"]]
    assert len(rows) == 4
    for config, row in rows:
        # the emulator's true step time at that batch (its decode speed factor 4), and what the server recorded
        true_ms = SpeedModel(SpecShape(*config), ACCEPT_PROB, 4).step_seconds(row["concurrency"]) * 1000
        assert true_ms * 0.95 <= row["step_time_ms"] <= true_ms * 1.6 + 3, (config, row["concurrency"],
                                                                          row["step_time_ms"], true_ms)
    from specmon.sweep.grid_report import format_grid

    text = format_grid(report)  # beside specmon's own ITL in the report
    assert "server step time (SGLang's step_time_dict, 20th percentile) / specmon's ITL median, ms:" in text
    assert "  s3 k1 d4: c=1 " in text and "  no speculation: c=1 " in text, text


@pytest.mark.timeout(600)
def test_a_chain_slower_than_a_longer_one_at_low_load_is_launched_where_it_may_win_at_high_load(oncall: Oncall) -> None:
    # s1 is the emulator's slowest chain at 1 stream and its fastest at 8: a grid recommends per load, so being
    # predicted slower than the best measured chain (a named sweep's skip) does not skip it
    assert truth((1, 1, 2), 1) < truth((5, 1, 6), 1) and truth((1, 1, 2), 8) > 1.05 > truth((5, 1, 6), 8)
    grid_base(oncall)
    done = oncall.run("sweep", "--presets", str(oncall.presets), "grid-base", "--steps", "1,5,7", "--topk", "1",
                      "--concurrency", "1,8", "--skip-predicted-worse", "--json", "--leave", "none", timeout=500,
                      presets=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "skipped (predicted clearly worse" not in done.stderr
    report = json.loads(done.stdout)
    assert report["configs"] == 3 and report["launched"] == 3 and report["restarts_saved"] == 0, report
    short = {c["concurrency"]: c for c in report["cells"] if c["steps"] == 1}
    assert [short[c]["state"] for c in (1, 8)] == ["measured", "measured"], short
    assert all(short[c]["run_id"] and short[c]["speedup"] > 0 for c in (1, 8)), short  # each its own run
