"""The fleet row's "is speculation paying now?": where specmon's records know a server's configuration (its last
benchmark's server said it), that configuration's measured curve from a stored grid sweep (the emulator's own
speedups) read at the running count Prometheus gives; a few characters in the table, the crossover's alert."""

from __future__ import annotations

from pathlib import Path

import pytest

from specmon.bench.results import ResultStore
from specmon.fleet.records import own_records
from specmon.fleet.text import columns_for, paying_text, snapshot_lines
from specmon.live.paying import ServingConfig
from specmon.sweep.curves import StoredCurves
from specmon.sweep.plan import SweepStore
from tests.fleet.test_fleet_core import per, reading, tracker, up
from tests.support.grid_sweeps import MODEL, truth, write_grid_sweep

CHAIN = (3, 1, 4)  # the emulator's truth: 1.12x at 4, 0.93x at 8, its crossover
CONFIG = ServingConfig(MODEL, "EAGLE3", *CHAIN)


@pytest.fixture
def curves(tmp_path: Path) -> StoredCurves:
    write_grid_sweep(tmp_path, "20261203-100000-aaaa", [CHAIN], [1, 2, 4, 8, 16])
    return StoredCurves(SweepStore(tmp_path / "sweeps"), ResultStore(tmp_path / "results"))


def _row(curves: StoredCurves | None, running: float, **record_fields):
    from specmon.fleet.tracker import Record

    records = {"a:1": Record(**({"preset": "grid-base", "algorithm": "EAGLE3", "draft_tokens": 4, "config": CONFIG}
                                | record_fields))}
    columns = {"running_per_dp": [per("a:1", running, dp_rank="0")]}
    return tracker(records=records, curves=curves).update(reading([up("a:1")], columns))


@pytest.mark.parametrize(("running", "cell", "verdict", "alerted"), [
    (4, f"{truth(CHAIN, 4):.2f}×", "pays", False),
    (6, "?", "unclear", False),  # 4 pays, 8 loses: 6 was not measured
    (8, f"{truth(CHAIN, 8):.2f}×", "loses", True),
    (12, "loses", "loses", True),
])
def test_a_known_configuration_s_curve_at_the_running_count(curves: StoredCurves, running: int, cell: str,
                                                            verdict: str, alerted: bool) -> None:
    snapshot = _row(curves, running)
    row = snapshot.rows[0]
    assert row.speculation_pays is not None and row.speculation_pays.verdict == verdict
    assert paying_text(row) == cell and len(cell) <= 5
    kinds = [a.kind for a in row.alerts]
    assert ("spec_loses" in kinds) is alerted and snapshot.alerting is alerted
    data = snapshot.to_json()["servers"][0]["speculation_pays"]
    assert data["sweep_id"] == "20261203-100000-aaaa" and data["running"] == running and data["crossover"] == 8
    table = "\n".join(snapshot_lines(snapshot, 200))
    assert "spec×" in table and cell in table


def test_unknown_or_changed_configuration_reads_no_curve(curves: StoredCurves) -> None:
    assert _row(curves, 4, config=None).rows[0].speculation_pays is None
    assert _row(None, 4).rows[0].speculation_pays is None
    changed = _row(curves, 4, draft_tokens=8)  # the records' draft tokens, not its last benchmark's
    assert changed.rows[0].speculation_pays is None and paying_text(changed.rows[0]) == "—"
    other = _row(curves, 4, config=ServingConfig("/models/another", "EAGLE3", *CHAIN)).rows[0]
    assert other.speculation_pays.verdict == "no curve" and paying_text(other) == "—"
    assert other.to_json()["speculation_pays"]["text"] == "speculation: no measured curve for this configuration"


def test_the_records_key_a_server_by_what_its_last_benchmark_ran(tmp_path: Path) -> None:
    from specmon.fleet.records import _config

    write_grid_sweep(tmp_path, "20261203-100000-aaaa", [CHAIN], [1])
    results = ResultStore(tmp_path / "results")
    assert _config(results.load("20261203-100000-aaaa-s3k1d4-c1")) == CONFIG
    assert _config(results.load("20261203-100000-aaaa-base0-c1")) is None  # no speculation
    records = own_records(str(tmp_path / "results"))
    assert {record.config for record in records.values()} <= {CONFIG, None}


def test_the_column_is_shown_with_a_curve_read_and_leaves_the_load_at_80_columns() -> None:
    keys = [c.key for c in columns_for(80, paying=True)]
    assert "load" in keys  # the running count stays at 80 columns; the alert column names a loss there
    wider = [c.key for c in columns_for(86, paying=True)]
    assert wider[wider.index("load") + 1] == "paying"
    assert "paying" not in {c.key for c in columns_for(500)}  # no row with a curve: the table as it was
