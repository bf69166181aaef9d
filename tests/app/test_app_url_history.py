"""`specmon monitor --url URL` shows the stored benchmark runs against that URL (or of its preset) in the
Benchmark pane, as attaching does; the demo, whose server the app launches, starts with none."""

from __future__ import annotations

from tests.support.app_harness import READY_LOG, fixture_app, wait_for
from tests.support.chains import trained_like_agreements, write_chain_run


async def test_monitoring_a_url_shows_the_runs_stored_against_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMON_STATE_DIR", str(tmp_path))
    stored = write_chain_run(tmp_path / "results", trained_like_agreements()[:4], 5)
    other = write_chain_run(tmp_path / "results", trained_like_agreements()[:4], 10, preset="elsewhere",
                            run_id="20261203-000010-else")
    assert stored.url == other.url == "http://127.0.0.1:30000"
    app = fixture_app(READY_LOG, url="http://127.0.0.1:30001")
    async with app.run_test(size=(200, 50)) as pilot:
        assert await wait_for(pilot, lambda: app.oncall.last.keys() == {"trained-standalone", "elsewhere"}, 20)
        assert app.bench_results == [], "runs against another URL and preset are not this server's"
    app = fixture_app(READY_LOG, url="http://127.0.0.1:30000")
    async with app.run_test(size=(200, 50)) as pilot:
        assert await wait_for(pilot, lambda: len(app.bench_results) == 2, 20), app.bench_results
        table = app.screen.query_one("#bench-table")
        assert await wait_for(pilot, lambda: table.row_count == 2)
        rows = " ".join(str(table.get_row_at(i)) for i in range(2))
        assert "trained-standalone" in rows and "elsewhere" in rows, rows


async def test_a_run_the_app_measured_while_the_store_was_read_is_shown_once(tmp_path, monkeypatch):
    """On a busy machine the stored runs are read after the app's own first run was stored: it is not shown
    twice."""
    from specmon.bench.results import ResultStore

    monkeypatch.setenv("SPECMON_STATE_DIR", str(tmp_path))
    run = write_chain_run(tmp_path / "elsewhere", trained_like_agreements()[:4], 5)
    loaded = ResultStore(tmp_path / "elsewhere").load(run.run_id)
    app = fixture_app(READY_LOG, url="http://127.0.0.1:30000")
    async with app.run_test(size=(200, 50)):
        app.bench_results.append(loaded)  # as a BenchFinished message leaves it
        app.oncall.results_loaded([loaded])
        assert [r.run_id for r in app.bench_results] == [run.run_id]
