"""`specmon fleet rules`: the fleet's PromQL as a Prometheus rules file, checked by promtool and unit-tested with
`promtool test rules` (DP×TP duplicates, a counter reset, a NaN rank, a host without DCGM, the alerts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.prometheus import promtool_binary


def rules_text(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "specmon", "fleet", "rules", *args], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def series(name: str, values: str, **labels: str) -> dict:
    inner = ",".join(f'{k}="{v}"' for k, v in {"job": "sglang", **labels}.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def sample(record: str, value: float, **labels: str) -> dict:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"labels": f"{record}{{{inner}}}", "value": value}


def run_promtool_test(tmp_path: Path, tests: list[dict]) -> subprocess.CompletedProcess:
    (tmp_path / "rules.yml").write_text(rules_text("--window", "60"))
    (tmp_path / "test.yml").write_text(yaml.safe_dump(
        {"rule_files": ["rules.yml"], "evaluation_interval": "15s", "tests": tests}))
    return subprocess.run([promtool_binary(), "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)


def test_rules_file_passes_promtool_check(tmp_path):
    path = tmp_path / "rules.yml"
    for args in ((), ("--window", "20", "--server-label", "server", "--selector", 'job="sglang",env="prod"')):
        path.write_text(rules_text(*args))
        done = subprocess.run([promtool_binary(), "check", "rules", str(path)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    names = [rule.get("record") or rule.get("alert") for group in yaml.safe_load(path.read_text())["groups"]
             for rule in group["rules"]]
    assert "server:sglang_decode_tokens:rate20s" in names and "SpecmonSpeculationNotAccepting" in names


def test_recording_rules_dedup_dp_tp_survive_a_reset_and_a_nan_rank(tmp_path):
    ranks = [("0", "0", "3"), ("0", "1", "3"), ("1", "0", "12"), ("1", "1", "12")]
    inputs = [series("sglang:num_running_reqs", f"{v}x10", instance="a:1", dp_rank=dp, tp_rank=tp)
              for dp, tp, v in ranks]
    # both counters reset at 60 s (a restart); 4 tokens per verify call throughout
    inputs += [series("sglang:generation_tokens_total", "0 1000 2000 3000 400 1400 2400", instance="a:1"),
               series("sglang:spec_verify_calls_total", "0 250 500 750 100 350 600", instance="a:1"),
               series("sglang:num_requests_total", "0 10 20 30 1 11 21", instance="a:1")]
    inputs += [series("sglang:spec_accept_length", "NaN NaN NaN NaN NaN NaN NaN NaN NaN NaN NaN", instance="a:1", tp_rank="0"),
               series("sglang:spec_accept_length", "2.5x10", instance="a:1", tp_rank="1")]
    inputs += [{"series": 'DCGM_FI_DEV_FB_USED{job="dcgm",Hostname="gpu1",instance="gpu1:9400",gpu="0"}',
                "values": "60000x10"},
               {"series": 'DCGM_FI_DEV_FB_FREE{job="dcgm",Hostname="gpu1",instance="gpu1:9400",gpu="0"}',
                "values": "20000x10"}]
    tests = [{"interval": "15s", "input_series": inputs, "promql_expr_test": [
        {"expr": "instance:sglang_num_running_reqs:sum", "eval_time": "1m",
         "exp_samples": [sample("instance:sglang_num_running_reqs:sum", 15, instance="a:1")]},
        {"expr": "instance:sglang_accept_length:ratio_rate1m", "eval_time": "90s",
         "exp_samples": [sample("instance:sglang_accept_length:ratio_rate1m", 4, instance="a:1")]},
        {"expr": "instance:sglang_restarts:resets15m", "eval_time": "90s",
         "exp_samples": [sample("instance:sglang_restarts:resets15m", 1, instance="a:1")]},
        {"expr": "instance:sglang_spec_accept_length:avg", "eval_time": "1m",
         "exp_samples": [sample("instance:sglang_spec_accept_length:avg", 2.5, instance="a:1")]},
        {"expr": "Hostname_instance:dcgm_fb_used:ratio", "eval_time": "1m",  # the host without DCGM: no series
         "exp_samples": [sample("Hostname_instance:dcgm_fb_used:ratio", 0.75, Hostname="gpu1",
                                instance="gpu1:9400")]},
    ]}]
    done = run_promtool_test(tmp_path, tests)
    assert done.returncode == 0, done.stdout + done.stderr


def test_dcgm_hosts_are_named_by_hostname_or_hostname_as_dcgm_exporter_renamed_it(tmp_path):
    """dcgm-exporter up to 4.8 labels a GPU's host `Hostname`; since NVIDIA/dcgm-exporter#655 `hostname`."""
    inputs = []
    for label, host, used in (("Hostname", "old", "60000"), ("hostname", "new", "30000")):
        for name, value in (("DCGM_FI_DEV_FB_USED", used), ("DCGM_FI_DEV_FB_FREE", "20000"),
                            ("DCGM_FI_DEV_GPU_UTIL", "55")):
            inputs.append({"series": f'{name}{{job="dcgm",{label}="{host}",instance="{host}:9400",gpu="0"}}',
                           "values": f"{value}x10"})
    record = "Hostname_instance:dcgm_fb_used:ratio"
    tests = [{"interval": "15s", "input_series": inputs, "promql_expr_test": [
        {"expr": record, "eval_time": "1m", "exp_samples": [
            sample(record, 0.75, Hostname="old", instance="old:9400"),
            sample(record, 0.6, hostname="new", instance="new:9400")]},
        {"expr": "Hostname_instance:dcgm_gpu_util:min", "eval_time": "1m", "exp_samples": [
            sample("Hostname_instance:dcgm_gpu_util:min", 55, Hostname="old", instance="old:9400"),
            sample("Hostname_instance:dcgm_gpu_util:min", 55, hostname="new", instance="new:9400")]},
    ]}]
    done = run_promtool_test(tmp_path, tests)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_dashboard_s_per_preset_figure_is_the_mean_per_server_not_the_sum_of_replicas(tmp_path):
    """Two replicas of preset a (100 and 300 tok/s) and one of b (200): each preset reads 200 tok/s per server."""
    from specmon.fleet.dashboard import dashboard, panel_queries

    expr = next(e for title, e in panel_queries(dashboard()) if "by preset" in title).replace("$server", ".*")
    inputs = []
    for instance, preset, per_step in (("a:1", "a", 1500), ("a:2", "a", 4500), ("b:1", "b", 3000)):
        inputs += [series("up", "1x10", instance=instance, preset=preset),
                   series("sglang:realtime_tokens_total", f"0+{per_step}x10", instance=instance, mode="decode")]
    tests = [{"interval": "15s", "input_series": inputs, "promql_expr_test": [
        {"expr": expr, "eval_time": "90s", "exp_samples": [sample("", 200, preset="a"), sample("", 200, preset="b")]},
    ]}]
    done = run_promtool_test(tmp_path, tests)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_plain_sum_would_double_count_so_the_test_above_can_fail(tmp_path):
    inputs = [series("sglang:num_running_reqs", "3x10", instance="a:1", dp_rank="0", tp_rank=tp) for tp in "01"]
    tests = [{"interval": "15s", "input_series": inputs, "promql_expr_test": [
        {"expr": "instance:sglang_num_running_reqs:sum", "eval_time": "1m",
         "exp_samples": [sample("instance:sglang_num_running_reqs:sum", 6, instance="a:1")]}]}]
    done = run_promtool_test(tmp_path, tests)
    assert done.returncode != 0 and "instance:sglang_num_running_reqs:sum" in done.stdout + done.stderr


def test_alerting_rules_fire_on_stall_no_acceptance_and_full_kv(tmp_path):
    inputs = [
        series("sglang:num_running_reqs", "4x20", instance="stuck:1", tp_rank="0"),
        series("sglang:realtime_tokens_total", "500x20", instance="stuck:1", tp_rank="0", mode="decode"),
        series("sglang:generation_tokens_total", "0+1000x20", instance="nodraft:1"),
        series("sglang:spec_verify_calls_total", "0+980x20", instance="nodraft:1"),
        series("sglang:num_used_tokens", "970x20", instance="full:1", tp_rank="0"),
        series("sglang:max_total_num_tokens", "1000x20", instance="full:1", tp_rank="0"),
        series("sglang:num_queue_reqs", "7x20", instance="full:1", tp_rank="0"),
        series("up", "1x20", instance="stuck:1"),
    ]
    tests = [{"interval": "15s", "input_series": inputs, "alert_rule_test": [
        {"eval_time": "4m", "alertname": "SpecmonDecodeStalled", "exp_alerts": [
            {"exp_labels": {"severity": "critical", "instance": "stuck:1"},
             "exp_annotations": {"summary": "stuck:1: requests running, no decode progress for 1m"}}]},
        {"eval_time": "4m", "alertname": "SpecmonSpeculationNotAccepting", "exp_alerts": [
            {"exp_labels": {"severity": "critical", "instance": "nodraft:1"},
             "exp_annotations": {"summary": "nodraft:1: acceptance 1.02 ≈ 1 token per verify step over 1m: did "
                                            "the draft's weights load?"}}]},
        {"eval_time": "4m", "alertname": "SpecmonKVCacheFull", "exp_alerts": [
            {"exp_labels": {"severity": "warning", "instance": "full:1"},
             "exp_annotations": {"summary": "full:1: KV cache 97% full with requests queued"}}]},
        {"eval_time": "4m", "alertname": "SpecmonServerDown", "exp_alerts": []},
    ]}]
    done = run_promtool_test(tmp_path, tests)
    assert done.returncode == 0, done.stdout + done.stderr
