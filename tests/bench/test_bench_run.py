"""BenchRun end to end against the loopback server on 127.0.0.1 (real HTTP, real threads, real files)."""

from __future__ import annotations

import json
import stat
import threading
import time

import pytest

from specmon.bench.prompts import Prompt
from specmon.bench.results import ResultStore
from specmon.bench.run import BenchRun, RunSettings
from specmon.testing.loopback_server import LoopbackConfig, LoopbackServer

PROMPTS = [Prompt(id=f"p{i}", text=f"Question number {i}: explain caching.") for i in range(6)]


def _run(server, tmp_path, settings, **kwargs):
    updates = []
    bench = BenchRun(
        server.url, kwargs.pop("preset", "eagle"), settings, on_update=updates.append,
        results_dir=str(tmp_path / "results"), prompts=kwargs.pop("prompts", PROMPTS), flush_delay_s=0.01, **kwargs,
    )
    return bench.run_blocking(), bench, updates


def test_measured_figures_match_what_the_server_sent(tmp_path):
    config = LoopbackConfig(tokens_per_s=200, chunk_tokens=[3, 1, 4, 2])
    with LoopbackServer(config) as server:
        result, bench, updates = _run(server, tmp_path, RunSettings(requests=4, max_new_tokens=40, warmup=1))
    assert result.status == "finished", result.notes
    measured = result.measured
    assert len(measured) == 4 and all(r.ok for r in measured)
    assert sum(r.warmup for r in result.requests) == 1
    # the server's own send times are the truth; requests ran one at a time, in order (the tight 1 %/2 %
    # figures come from benchmarks/bench_accuracy.py on a quiet machine; here other tests share the CPU)
    for request, sent in zip(sorted(result.requests, key=lambda r: (not r.warmup, r.index)), server.sent, strict=True):
        assert request.decode_tok_s == pytest.approx(sent.decode_tok_s, rel=0.05)
        assert request.completion_tokens == sent.tokens[-1] == 40
    steps = server.verify_calls
    assert result.summary.accept_length.token_weighted == pytest.approx(4 * 40 / (steps * 4 / 5))
    assert result.summary.requests_ok == 4 and result.summary.requests_failed == 0
    assert result.cross_checks["flushed"] is True
    assert result.cross_checks["metrics"]["accept_length"] == pytest.approx(
        result.summary.accept_length.token_weighted
    )
    assert result.cross_checks["mismatches"] == {}
    assert result.server.speculative.algorithm == "EAGLE3"
    assert server.requests_seen[0]["sampling_params"] == {"max_new_tokens": 40, "temperature": 0.0, "ignore_eos": True}
    assert server.requests_seen[0]["stream"] is True
    # warmup uses other prompts than the first measured ones, and the measured prompts keep their order
    assert [r["text"] for r in server.requests_seen[1:]] == [p.text for p in PROMPTS[:4]]
    assert updates[-1].phase == "finished" and updates[-1].done == 4
    assert len(updates) < 20


def test_each_request_is_saved_as_it_finishes_in_private_files(tmp_path):
    store = ResultStore(tmp_path / "state" / "results")
    seen_lines = []

    def on_update(progress):
        path = store.path_for(progress.run_id)
        if path.exists():
            seen_lines.append(len(path.read_text().splitlines()))

    with LoopbackServer(LoopbackConfig(tokens_per_s=150)) as server:
        bench = BenchRun(server.url, "p", RunSettings(requests=3, max_new_tokens=40, warmup=0), on_update=on_update,
                         store=store, prompts=PROMPTS)
        result = bench.run_blocking()
    path = store.path_for(result.run_id)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["kind"] for r in records] == ["run", "request", "request", "request", "summary"]
    assert any(1 < n < 5 for n in seen_lines), seen_lines  # requests were on disk before the run ended
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.directory.stat().st_mode) == 0o700
    assert stat.S_IMODE(store.directory.parent.stat().st_mode) == 0o700
    back = store.load(result.run_id)
    assert back.summary.to_json() == json.loads(json.dumps(result.summary.to_json()))
    assert [r.decode_tok_s for r in back.requests] == [r.decode_tok_s for r in result.requests]


def test_concurrent_streams_hold_one_connection_each_and_none_after_it(tmp_path):
    with LoopbackServer(LoopbackConfig(tokens_per_s=800)) as server:
        result, _, _ = _run(server, tmp_path, RunSettings(requests=12, max_new_tokens=24, warmup=0, concurrency=4))
    assert result.summary.requests_ok == 12
    assert server.connections >= 12  # a connection per stream, as SGLang's own benchmark
    assert server.most_open <= 4 + 1  # + the API client's (info, flush, metrics), one at a time


def test_flush_answering_400_is_retried(tmp_path):
    with LoopbackServer(LoopbackConfig(flush_failures=2)) as server:
        result, _, _ = _run(server, tmp_path, RunSettings(requests=2, max_new_tokens=16, warmup=1))
    assert server.flush_calls == 3
    assert result.cross_checks["flushed"] is True
    assert "no-flush" not in result.summary.flags


def test_a_flush_that_never_succeeds_is_reported_and_the_run_goes_on(tmp_path):
    with LoopbackServer(LoopbackConfig(flush_failures=100)) as server:
        result, _, _ = _run(server, tmp_path, RunSettings(requests=2, max_new_tokens=16, warmup=0), flush_retries=2)
    assert server.flush_calls == 3
    assert result.status == "finished" and result.summary.requests_ok == 2
    assert "no-flush" in result.summary.flags
    assert any("measuring without a flush" in note for note in result.notes)


def test_a_server_whose_acceptance_disagrees_is_flagged(tmp_path):
    with LoopbackServer(LoopbackConfig(report_accept_length=3.9)) as server:
        result, _, _ = _run(server, tmp_path, RunSettings(requests=2, max_new_tokens=40, warmup=0))
    assert "accept-mismatch-server" in result.summary.flags
    assert "3.900 (/server_info" in result.summary.flag_details["accept-mismatch-server"]
    assert "accept-mismatch-metrics" not in result.summary.flags


def test_server_dying_mid_run_counts_failures_saves_partial_results_and_stops(tmp_path):
    with LoopbackServer(LoopbackConfig(tokens_per_s=2000, die_after_requests=3)) as server:
        result, bench, updates = _run(server, tmp_path, RunSettings(requests=30, max_new_tokens=16, warmup=0))
    assert result.status == "failed"
    assert result.summary.requests_ok == 3
    assert 1 <= result.summary.requests_failed <= 6
    assert "aborted" in result.summary.flags
    assert all(r.error for r in result.measured if not r.ok)
    saved = ResultStore(tmp_path / "results").load(result.run_id)
    assert saved.status == "failed" and len(saved.requests) == len(result.requests)
    assert updates[-1].phase == "failed"


def test_cancel_keeps_what_finished(tmp_path):
    with LoopbackServer(LoopbackConfig(tokens_per_s=100)) as server:
        updates = []
        bench = BenchRun(server.url, "slow", RunSettings(requests=50, max_new_tokens=20, warmup=0),
                         on_update=updates.append, results_dir=str(tmp_path), prompts=PROMPTS)
        bench.start()
        deadline = time.monotonic() + 10
        while not any(u.done >= 1 for u in updates) and time.monotonic() < deadline:
            time.sleep(0.05)
        bench.cancel()
        assert bench.wait(10)
    result = bench.result
    assert result.status == "cancelled"
    assert 1 <= len(result.measured) < 50
    assert ResultStore(tmp_path).load(result.run_id).status == "cancelled"
    assert updates[-1].phase == "cancelled"


def test_on_update_runs_on_the_bench_thread_and_is_coalesced(tmp_path):
    threads = set()
    calls = []

    def on_update(progress):
        threads.add(threading.current_thread().name)
        calls.append(progress)

    with LoopbackServer(LoopbackConfig(tokens_per_s=3000, chunk_tokens=[1])) as server:
        bench = BenchRun(server.url, "x", RunSettings(requests=8, max_new_tokens=128, warmup=0), on_update=on_update,
                         results_dir=str(tmp_path), prompts=PROMPTS)
        bench.start()
        assert bench.wait(20)
    chunks = sum(len(s.send_times) for s in server.sent)
    assert chunks > 1000 and len(calls) < 15
    assert threads == {f"bench-{bench.result.run_id}"}
    assert calls[-1].decode_tok_s == tuple(r.decode_tok_s for r in bench.result.measured)


def test_a_run_without_a_preset_is_labelled_by_the_server_settings(tmp_path):
    with LoopbackServer(LoopbackConfig(speculative=False, chunk_tokens=[1])) as server:
        result, _, _ = _run(server, tmp_path, RunSettings(requests=1, max_new_tokens=8, warmup=0), preset=None)
    assert result.preset == "no speculation"
    assert result.summary.accept_length.token_weighted is None


def test_settings_come_from_a_preset_bench_table():
    from specmon.launch.presets import BenchSettings

    settings = RunSettings.of(BenchSettings(requests=7, max_new_tokens=99, concurrency=2))
    assert (settings.requests, settings.max_new_tokens, settings.concurrency, settings.ignore_eos) == (7, 99, 2, True)


class _ThrottlingGpus:
    """A GPU source whose GPU 0 reports a power-cap slowdown halfway through."""

    def __init__(self):
        self.reads = 0

    def read(self):
        from specmon.gpu.model import GpuReading, GpuSnapshot

        self.reads += 1
        reasons = ["power cap"] if self.reads > 3 else []
        return GpuSnapshot(available=True, gpus=[GpuReading(index=0, sm_clock_mhz=1980 - 10 * self.reads,
                                                            temp_c=60, throttle_reasons=reasons)])

    def close(self):
        pass


def test_a_gpu_slowdown_during_the_measured_window_flags_the_run(tmp_path):
    from specmon.gpu.sampler import GpuSampler

    sampler = GpuSampler(_ThrottlingGpus(), interval_s=0.05)
    sampler.start()
    try:
        with LoopbackServer(LoopbackConfig(tokens_per_s=100)) as server:
            result, _, _ = _run(server, tmp_path, RunSettings(requests=2, max_new_tokens=30, warmup=0),
                                gpu_sampler=sampler)
    finally:
        sampler.stop()
    assert "throttled" in result.summary.flags
    assert "GPU 0 power cap" in result.summary.flag_details["throttled"]
    assert result.gpus[0]["gpu_index"] == 0 and "power cap" in result.gpus[0]["slowdowns"]
    assert ResultStore(tmp_path / "results").load(result.run_id).gpus == result.gpus


def test_an_unwritable_or_symlinked_results_directory_stops_the_run_before_any_request(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the results directory should be")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "linked").symlink_to(elsewhere, target_is_directory=True)
    with LoopbackServer(LoopbackConfig(tokens_per_s=2000)) as server:
        for directory, reason in ((blocker / "results", "Not a directory"), (tmp_path / "linked", "symbolic link")):
            result, bench, updates = _run(server, tmp_path, RunSettings(requests=2, max_new_tokens=8, warmup=0),
                                          store=ResultStore(directory))
            assert result.status == "failed" and result.requests == []
            assert bench.fatal.startswith(f"cannot save results in {directory}") and reason in bench.fatal
            assert updates[-1].finished and bench.fatal in updates[-1].message
        assert server.requests_seen == []
    assert list(elsewhere.iterdir()) == []


def test_a_write_failure_during_the_run_is_noted_once_and_the_run_goes_on(tmp_path):
    store = ResultStore(tmp_path / "results")
    calls = []

    def full_disk(run_id, request):
        calls.append(request.index)
        raise OSError(28, "No space left on device")

    store.add_request = full_disk
    with LoopbackServer(LoopbackConfig(tokens_per_s=2000)) as server:
        result, bench, updates = _run(server, tmp_path, RunSettings(requests=2, max_new_tokens=8, warmup=0),
                                      store=store)
    assert result.status == "finished" and result.summary.requests_ok == 2 and calls == [0, 1]
    assert sum("results not saved" in note for note in result.notes) == 1
    assert bench.save_error and "No space left" in bench.save_error
    assert "results not saved" in updates[-1].message


def test_a_store_watch_reads_each_run_another_writer_adds_once_it_finished(tmp_path):
    """What the attached app uses to pick up a `specmon bench` run from another terminal: a run that is there
    when it starts is its own to read; a new run shows once its summary is written (not half-written), once;
    a run read before it finished shows when it does; a file that is no run is counted, and a symlink ignored."""
    import os

    from specmon.bench.model import BenchResult, RequestResult
    from specmon.bench.results import StoreWatch

    store = ResultStore(tmp_path / "results")

    def begun(run_id: str, at: float) -> BenchResult:
        result = BenchResult(run_id=run_id, preset="p", url="http://x", started_at=at)
        store.start_run(result)
        store.add_request(run_id, RequestResult(index=0, prompt_id="a", ok=True, completion_tokens=8))
        return result

    def finished(result: BenchResult) -> None:
        result.status, result.finished_at = "finished", result.started_at + 1
        store.finish_run(result)

    old = begun("r1", 1.0)
    unfinished = begun("r2", 2.0)
    finished(old)
    watch = StoreWatch(store)
    assert watch.prime() == ["r1", "r2"]
    watch.watch_unfinished(["r2"])
    assert watch.look() == ([], 0), "nothing new, r2 still unfinished"
    new = begun("r3", 3.0)
    assert watch.due()
    assert watch.look() == ([], 0), "r3 is being written"
    finished(new)
    finished(unfinished)
    runs, unreadable = watch.look()
    assert [(r.run_id, r.status) for r in runs] == [("r2", "finished"), ("r3", "finished")] and unreadable == 0
    assert not watch.due() and watch.look() == ([], 0), "each run once"
    (store.directory / "junk.jsonl").write_text("not json\n" * 3)
    os.symlink(store.path_for("r1"), store.directory / "link.jsonl")
    assert watch.look() == ([], 0)  # a new file may hold no whole record yet: read again once it grows
    with (store.directory / "junk.jsonl").open("a") as junk:
        junk.write("still not json\n")
    assert watch.look() == ([], 1)
    assert not watch.due()
