"""Every test's specmon state (server records, logs, benchmark results, sweeps) lives in a directory of this
test session, never in the user's own: a test neither reads a developer's stored runs nor leaves its own there.
Tests that need a state directory of their own still set SPECMON_STATE_DIR or XDG_STATE_HOME themselves."""

from __future__ import annotations

import os

import pytest

TERMINAL_SIZE_VARIABLES = ("COLUMNS", "LINES")


@pytest.fixture(autouse=True, scope="session")
def _session_state_home(tmp_path_factory):
    saved = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("xdg-state"))
    yield
    if saved is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = saved


@pytest.fixture(autouse=True, scope="session")
def _no_inherited_terminal_size():
    """The processes tests start measure their own terminal (or get 80x24), not the one pytest runs in.

    pytest imports readline at start-up, and GNU readline on a terminal exports that terminal's COLUMNS and LINES
    into the process environment (below `os.environ`, which does not see them), so every child inherited them: an
    argparse usage wrapped at 200 columns, an app in an 80x24 tmux pane laid out for 200x50. A test about a width
    sets COLUMNS itself."""
    saved = {name: os.environ.get(name) for name in TERMINAL_SIZE_VARIABLES}
    for name in TERMINAL_SIZE_VARIABLES:
        os.environ.pop(name, None)
        os.unsetenv(name)  # also when only the C environment had it (readline's setenv)
    yield
    for name, value in saved.items():
        if value is not None:
            os.environ[name] = value


@pytest.fixture
def oc(tmp_path):
    """An on-call environment of the test's own (state, presets, the processes it starts, cleaned up after)."""
    from tests.support.oncall import Oncall

    env = Oncall(tmp_path)
    yield env
    env.cleanup()


PROCESS_HEAVY = frozenset({
    "test_app", "test_app_attributes", "test_app_demo", "test_app_oncall", "test_app_presets", "test_app_quit",
    "test_app_screenshots", "test_app_snapshots", "test_app_url_history", "test_baseline_rule", "test_bench_asked",
    "test_bench_cli", "test_bench_divergence", "test_bench_emulator", "test_bench_hostile", "test_bench_panel",
    "test_bench_symptoms", "test_check", "test_check_hostile", "test_cli_front_door", "test_dcgm_stand_in",
    "test_docs_map", "test_emulator", "test_emulator_fleet", "test_emulator_speed_times", "test_emulator_units",
    "test_exits", "test_feed_restarts", "test_file_sd_targets", "test_fleet_app", "test_fleet_prometheus",
    "test_fleet_rules", "test_fleet_selectors", "test_fleet_textfile", "test_fleet_truth", "test_flush_cadence",
    "test_follower", "test_gpu_cli", "test_gpu_leftovers", "test_gpu_model", "test_gpu_nvml", "test_gpu_pane",
    "test_gpu_real_h200", "test_hostile_files", "test_hostile_output", "test_hostile_servers", "test_http_client",
    "test_http_framing", "test_http_outside_reads", "test_http_urls", "test_idle_repaints", "test_import_hygiene",
    "test_live_absurd", "test_live_app", "test_live_once", "test_live_own_traffic", "test_live_ranks",
    "test_live_truth", "test_log_summary", "test_log_summary_acceptance", "test_log_view_render",
    "test_log_view_width", "test_log_waiter", "test_multi_gpu_check", "test_oncall_commands",
    "test_oncall_durations", "test_oncall_identity", "test_oncall_lifetimes", "test_oncall_named",
    "test_oncall_progress", "test_oncall_ps", "test_oncall_startup_lines", "test_oncall_state_dir",
    "test_phase_timeline", "test_port_held_by_specmon", "test_preflight", "test_preflight_bounds",
    "test_preflight_heads", "test_presets_cli", "test_quiet_driver", "test_real_h200_oncall",
    "test_real_h200_trained", "test_real_sglang", "test_secret_echoes", "test_secrets_on_command_lines",
    "test_server_facts", "test_serving_poller", "test_sglang_flags", "test_sglang_metrics", "test_supervisor",
    "test_sweep", "test_sweep_ctrl_c", "test_sweep_grid", "test_sweep_interrupted", "test_sweep_picker",
    "test_switch_before_after", "test_switch_checks_first", "test_switch_new_server_stopped",
    "test_textfile_hostile", "test_textual_patches", "test_toast_repaint", "test_tracker_misreadings", "test_fleet_agreement", "test_tracker_causes", "test_traffic",
    "test_traffic_emulator", "test_typed_records", "test_ui_fit", "test_url_credentials", "test_web",
    "test_web_guard", "test_web_view", "test_live_paying", "test_live_paying_view", "test_grid_panel",
    "test_drill_history", "test_sweep_report_prometheus", "test_production_traffic"
})
"""Test modules that take seconds (they start processes, servers, an app, tmux or a real Prometheus, or read every
real SGLang source): marked `slow`. Without them the
suite runs in about two minutes (`pytest -m "not slow"`); a new module that starts any of these belongs here
(tests/project/test_markers.py checks that each name is a test module)."""
HARDWARE = frozenset({
    "test_dcgm_record", "test_dcgm_stand_in", "test_gpu_cli", "test_gpu_nvml", "test_gpu_real_h200",
    "test_multi_gpu_check", "test_real_h200_oncall", "test_real_h200_trained"
})
"""Test modules about real hardware: NVML, DCGM, nvidia-smi, or replays of runs recorded on the H200: `hardware`."""


def pytest_collection_modifyitems(config, items):
    for item in items:
        stem = item.path.stem
        if stem in PROCESS_HEAVY:
            item.add_marker(pytest.mark.slow)
        if stem in HARDWARE:
            item.add_marker(pytest.mark.hardware)
