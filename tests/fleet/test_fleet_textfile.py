"""specmon's figures out to Prometheus: `--textfile-dir` on start, bench and stop writes `specmon.prom` atomically
(promtool check metrics passes), and `specmon ps --prometheus-sd` prints file_sd JSON; all as real processes."""

from __future__ import annotations

import json
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specmon.ports import free_port_pair
from specmon.textfile import FILE_NAME, Textfile
from tests.support.oncall import Oncall
from tests.support.prometheus import promtool_binary

pytestmark = pytest.mark.timeout(180)


def samples(path) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(path.read_text()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def promtool_check(path) -> None:
    done = subprocess.run([promtool_binary(), "check", "metrics"], input=path.read_text(), capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr


def test_update_sets_adds_drops_keeps_the_rest_and_writes_atomically(tmp_path):
    textfile = Textfile(tmp_path)
    labels = {"server": "h:1", "preset": "p"}
    textfile.update(set_=[("specmon_bench_accept_length", labels, 3.5)])
    textfile.update(add=[("specmon_startup_failures", {"server": "h:1", "reason": "cuda_oom"}, 1.0)])
    textfile.update(add=[("specmon_startup_failures", {"server": "h:1", "reason": "cuda_oom"}, 1.0)],
                    set_=[("specmon_bench_ttft_seconds", labels, float("nan"))])  # NaN is never written
    got = samples(tmp_path / FILE_NAME)
    assert got[("specmon_bench_accept_length", (("preset", "p"), ("server", "h:1")))] == 3.5
    assert got[("specmon_startup_failures_total", (("reason", "cuda_oom"), ("server", "h:1")))] == 2.0
    assert not any(name == "specmon_bench_ttft_seconds" for name, _ in got)
    textfile.update(drop=[("specmon_bench_accept_length", labels)])
    assert not any(name == "specmon_bench_accept_length" for name, _ in samples(tmp_path / FILE_NAME))
    assert sorted(p.name for p in tmp_path.iterdir()) == [".specmon.prom.lock", FILE_NAME]  # no temp file left
    promtool_check(tmp_path / FILE_NAME)


def test_a_garbage_file_is_started_afresh_not_a_traceback(tmp_path):
    (tmp_path / FILE_NAME).write_bytes(b"\xff\x00 not { metrics\n")
    Textfile(tmp_path).update(set_=[("specmon_leftover_gpu_memory_bytes", {"server": "h:1"}, 1024.0)])
    assert samples(tmp_path / FILE_NAME) == {("specmon_leftover_gpu_memory_bytes", (("server", "h:1"),)): 1024.0}


def test_start_bench_stop_write_the_textfile_and_ps_prints_file_sd(tmp_path):
    oncall = Oncall(tmp_path)
    out = tmp_path / "textfile"
    port = free_port_pair()
    try:
        started = oncall.json("start", "fast-a", "--port", str(port), "--wait", "--textfile-dir", str(out))
        server = f"127.0.0.1:{port}"
        assert started["state"] == "ready"
        got = samples(out / FILE_NAME)
        assert got[("specmon_startup_capture_progress_ratio", (("server", server),))] == 1.0
        assert got[("specmon_startup_ready_seconds", (("preset", "fast-a"), ("server", server)))] > 0
        phases = {dict(labels)["phase"] for name, labels in got if name == "specmon_startup_phase_seconds"}
        assert phases and all(dict(labels)["server"] == server for name, labels in got)

        sd = json.loads(oncall.run("ps", "--prometheus-sd").stdout)
        assert sd == [{"targets": [server], "labels": {"server": started["id"], "preset": "fast-a",
                                                       "role": "unified"}}]

        oncall.env["SPECMON_TEXTFILE_DIR"] = str(out)  # the environment variable works as the flag does
        bench = oncall.json("bench", "--url", started["url"], "--preset", "fast-a", "--presets", str(oncall.presets),
                            "--requests", "3")
        got = samples(out / FILE_NAME)
        key = (("preset", "fast-a"), ("server", server))
        assert got[("specmon_bench_decode_tokens_per_second", key)] == pytest.approx(
            bench["summary"]["decode_tok_s"]["median"])
        assert got[("specmon_bench_accept_length", key)] == pytest.approx(
            bench["summary"]["accept_length"]["token_weighted"])
        assert ("specmon_startup_ready_seconds", key) in got  # the start's figures are kept

        oncall.json("stop", "--yes")
        got = samples(out / FILE_NAME)
        assert ("specmon_startup_capture_progress_ratio", (("server", server),)) not in got
        assert ("specmon_bench_accept_length", key) in got
        promtool_check(out / FILE_NAME)
        text = (out / FILE_NAME).read_text()
        assert str(tmp_path) not in text and f"{started['pid']}" not in text.replace(str(port), "")
    finally:
        oncall.cleanup()


def test_a_failed_start_counts_a_failure_by_its_kind(tmp_path):
    oncall = Oncall(tmp_path)
    out = tmp_path / "textfile"
    (oncall.presets / "broken.toml").write_text(
        'name = "broken"\nextends = "fast-a"\ndemo = true\n[server.args]\nemulator-fail = "oom-during-capture"\n')
    port = free_port_pair()
    try:
        done = oncall.run("start", "broken", "--port", str(port), "--wait", "--no-preflight", "--textfile-dir",
                          str(out), "--json")
        assert done.returncode == 1, done.stderr
        got = samples(out / FILE_NAME)
        failures = {dict(labels)["reason"]: value for (name, labels), value in got.items()
                    if name == "specmon_startup_failures_total"}
        assert failures == {"cuda_oom": 1.0}, done.stdout  # the log's error kind
    finally:
        oncall.cleanup()
