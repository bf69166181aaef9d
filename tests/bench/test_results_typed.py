"""Stored benchmark runs read back as typed values: a record whose summary, server or settings holds a value of the
wrong type is skipped with a line naming that key (never a traceback), and what specmon wrote comes back as it was
written, byte for byte."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specmon.bench.results import ResultStore, read_run_file
from specmon.cli import main

FIXTURES = Path(__file__).parents[1] / "fixtures"
RUN_FILES = sorted((FIXTURES / "bench").glob("*.jsonl")) + sorted(
    (FIXTURES / "real-sglang-0.5.16" / "trained-20261202" / "sweep" / "results").glob("*.jsonl"))
SPECULATIVE_RUN = FIXTURES / "bench" / "20261129-111220-c52f.jsonl"


def _set(*keys: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(record: dict[str, Any]) -> None:
        for key in keys[:-1]:
            record = record[key]
        record[keys[-1]] = value
    return change


SUMMARY_FAULTS = {
    "summary.decode_tok_s.median": _set("summary", "decode_tok_s", "median", value="fast"),
    "summary.accept_length.token_weighted": _set("summary", "accept_length", "token_weighted", value=True),
    "summary.accept_length.profile[1]": _set("summary", "accept_length", "profile", value=[0.9, "most"]),
    "summary.ttft_s.p90": _set("summary", "ttft_s", "p90", value=[0.1]),
    "summary.requests_ok": _set("summary", "requests_ok", value=1.5),
    "summary.errors": _set("summary", "errors", value=["HTTP 500"]),
    "summary.flags[0]": _set("summary", "flags", value=[7]),
    "summary.flag_details.unstable": _set("summary", "flag_details", value={"unstable": 5}),
    "server.speculative": _set("server", "speculative", value="EAGLE3"),
    "server.speculative.num_steps": _set("server", "speculative", "num_steps", value="3"),
    "server.model_path": _set("server", "model_path", value=["a", "b"]),
}
RUN_FAULTS = {
    "settings.temperature": _set("settings", "temperature", value="hot"),
    "settings.max_new_tokens": _set("settings", "max_new_tokens", value=0),
    "settings.ignore_eos": _set("settings", "ignore_eos", value="yes"),
    "server.speculative.algorithm": _set("server", "speculative", "algorithm", value=3),
    "server.tp_size": _set("server", "tp_size", value="one"),
}


def _stored_with(tmp_path: Path, kind: str, change: Callable[[dict[str, Any]], None]) -> Path:
    records = [json.loads(line) for line in SPECULATIVE_RUN.read_text().splitlines()]
    change(next(r for r in records if r["kind"] == kind))
    path = tmp_path / SPECULATIVE_RUN.name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize("key", SUMMARY_FAULTS)
def test_a_summary_record_with_a_wrong_typed_field_is_skipped_naming_it(tmp_path: Path, key: str, capsys) -> None:
    path = _stored_with(tmp_path, "summary", SUMMARY_FAULTS[key])
    warned: list[str] = []
    run = read_run_file(path, warned.append)
    assert [w.split(": record skipped (")[0] for w in warned] == [f"{path}:19"]
    assert f"'{key}' must be" in warned[0], warned
    assert run.status == "incomplete" and run.summary.requests_ok == 16  # re-summarised from its requests
    for fmt in ("table", "json", "csv", "markdown"):
        assert main(["results", "--dir", str(tmp_path), "--format", fmt]) == 0
        err = capsys.readouterr().err
        assert f"'{key}' must be" in err and "Traceback" not in err


@pytest.mark.parametrize("key", RUN_FAULTS)
def test_a_run_record_with_a_wrong_typed_field_leaves_the_run_out_naming_it(tmp_path: Path, key: str,
                                                                           capsys) -> None:
    path = _stored_with(tmp_path, "run", RUN_FAULTS[key])
    warned: list[str] = []
    assert ResultStore(tmp_path).load_all(warned.append) == []
    assert warned[0].startswith(f"{path}:1: record skipped ('{key}' must be"), warned
    assert main(["results", "--dir", str(tmp_path), "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == [] and f"'{key}' must be" in captured.err


@pytest.mark.parametrize("path", RUN_FILES, ids=lambda p: p.stem)
def test_stored_runs_come_back_as_they_were_written(tmp_path: Path, path: Path) -> None:
    """Older records (without a context length, gpus or an acceptance profile) included: what is absent stays
    absent, an integer stays an integer, the keys keep their order."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    run_record = next(r for r in records if r["kind"] == "run")
    summary_record = next(r for r in records if r["kind"] == "summary")
    back = read_run_file(path).to_json()

    def dumped(value: Any) -> str:
        return json.dumps(value, separators=(",", ":"))

    assert dumped(back["settings"]) == dumped(run_record["settings"])
    for key in ("server", "summary", "cross_checks", "notes"):
        assert dumped(back[key]) == dumped(summary_record[key]), key
    store = ResultStore(tmp_path)
    again = read_run_file(path)
    shutil.rmtree(tmp_path, ignore_errors=True)
    store.start_run(again)
    store.finish_run(again)
    rewritten = [json.loads(line) for line in store.path_for(again.run_id).read_text().splitlines()]
    assert dumped(rewritten[0]["settings"]) == dumped(run_record["settings"])
    assert dumped(rewritten[0]["server"]) == dumped(run_record["server"])
    assert dumped(rewritten[1]["summary"]) == dumped(summary_record["summary"])
