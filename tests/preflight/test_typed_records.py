"""Outside records through their typed declarations (specmon/typed.py): a preset's tables, a server's state file
and a sweep's plan. The cases are generated from the declarations themselves, so a field added later is covered."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any, get_args, get_origin

import msgspec
import pytest

from specmon.launch.presets import load_presets
from specmon.launch.schema import PresetFile
from specmon.oncall import state
from specmon.oncall.state import ServerRecord
from specmon.sweep.plan import SweepError, SweepPlan, SweepStep, SweepStore
from specmon.typed import _bare, _union

FIXTURES = Path(__file__).parents[1] / "fixtures"
OLD_SWEEP = FIXTURES / "real-sglang-0.5.16" / "trained-20261202" / "sweep" / "sweeps" / "20261202-062450-52df.json"
DATETIME = "1979-05-27T07:32:00"  # a TOML value no key of a preset takes
PAD = "# a preset\n# with comments first\n"


def _struct(kind: Any) -> Any:
    return next((m for m in map(_bare, _union(kind)) if isinstance(m, type) and issubclass(m, msgspec.Struct)), None)


def places(struct: Any = PresetFile, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every key a preset may hold, with its declared type: each table, each key, and one key ('k') of each
    free-form table ([server.args], [server.env])."""
    found = []
    for field in msgspec.structs.fields(struct):
        path = (*prefix, field.encode_name)
        inner = _struct(field.type)
        found.append((path, field.type))
        if inner is not None:
            found.extend(places(inner, path))
        elif get_origin(_bare(field.type)) is dict:
            found.append(((*path, "k"), get_args(_bare(field.type))[1]))
    return found


def accepts(kind: Any, value: Any) -> bool:
    try:
        msgspec.convert(value, kind, strict=True)
    except msgspec.ValidationError:
        return False
    return True


def toml_at(path: tuple[str, ...], value: str) -> tuple[str, int]:
    """A preset text setting `path` to the TOML `value`, and the line of that key."""
    if len(path) == 1:
        return f"{PAD}{path[0]} = {value}\n", 3
    return f"{PAD}[{'.'.join(path[:-1])}]\n{path[-1]} = {value}\n", 4


def only_error(tmp_path: Path, text: str):
    directory = tmp_path / "presets"
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir()
    (directory / "bad.toml").write_text(text)
    loaded = load_presets([directory], user_dir=None, builtin_dir=tmp_path / "no-builtins")
    bad = [e for e in loaded.errors if e.path.name == "bad.toml"]
    assert len(bad) == 1 and "bad" not in loaded.presets, (text, loaded.errors)
    return bad[0]


PLACES = places()


def test_the_declaration_is_walked_whole():
    paths = {path for path, _ in PLACES}
    assert {("name",), ("server",), ("server", "launcher"), ("server", "args", "k"), ("server", "env", "k"),
            ("bench",), ("bench", "max-new-tokens"), ("bench", "temperature")} <= paths


@pytest.mark.parametrize(("path", "kind"), PLACES, ids=[".".join(p) for p, _ in PLACES])
def test_a_value_of_the_wrong_type_anywhere_names_its_key_its_line_and_what_it_is(tmp_path, path, kind):
    text, line = toml_at(path, DATETIME)
    error = only_error(tmp_path, text)
    assert error.line == line, (text, error)
    assert error.message.startswith(f"'{'.'.join(path)}' must be "), error.message
    assert error.message.endswith(", not a date-time"), error.message
    if accepts(kind, ["a"]):  # an array: the item is named by its index
        text, line = toml_at(path, f'["a", {DATETIME}]')
        error = only_error(tmp_path, text)
        assert error.line == line and error.message.startswith(f"'{'.'.join(path)}[1]' must be "), error.message


def test_no_number_that_is_not_finite_is_a_setting_anywhere(tmp_path):
    numeric = [(path, kind) for path, kind in PLACES if accepts(kind, 0.5)]
    assert {("bench", "temperature"), ("server", "args", "k")} <= {path for path, _ in numeric}
    for path, kind in numeric:
        for word in ("nan", "inf", "-inf", "+inf"):
            text, line = toml_at(path, word)
            error = only_error(tmp_path, text)
            said = str(float(word))
            assert (error.line, error.message) == (line, f"'{'.'.join(path)}' must be a finite number, not {said}")
            if accepts(kind, [0.5]):
                text, line = toml_at(path, f"[1, {word}]")
                error = only_error(tmp_path, text)
                assert error.message == f"'{'.'.join(path)}[1]' must be a finite number, not {said}", error.message


TABLES = [((), PresetFile)] + [(path, _struct(kind)) for path, kind in PLACES if _struct(kind) is not None]


@pytest.mark.parametrize(("table", "struct"), TABLES, ids=["top"] + [".".join(p) for p, _ in TABLES[1:]])
def test_a_misspelt_key_in_every_table_is_named_with_what_was_meant(tmp_path, table, struct):
    for field in msgspec.structs.fields(struct):
        typo = field.encode_name[0] + field.encode_name[2:]
        text, line = toml_at((*table, typo), "1")
        error = only_error(tmp_path, text)
        where = f"[{'.'.join(table)}]" if table else "the top level"
        assert error.line == line, (text, error)
        assert error.message.startswith(f"unknown key '{typo}' in {where} (did you mean "), error.message
        assert f"'{field.encode_name}'" in error.message.split("(did you mean", 1)[1], error.message


@pytest.mark.parametrize("key", ["a` - at `$.server.args", "b` - at `key` in `$.server.env", "c` - at `$"])
def test_a_key_that_reads_like_a_location_does_not_move_where_the_fault_is_said(tmp_path, key):
    for table, where in (((), "the top level"), (("bench",), "[bench]"), (("server",), "[server]")):
        text, line = toml_at((*table, f'"{key}"'), "1")
        error = only_error(tmp_path, text)
        assert (error.line, error.message.split(" (")[0]) == (line, f"unknown key '{key}' in {where}"), error


# ------------------------------------------------------------------------------------------ state files

RECORD = {"id": "abc123", "preset": "p", "argv": ["sleep", "1"], "pid": 99999, "pgid": 99999,
          "create_time": 1796192690.25, "url": "http://127.0.0.1:9", "host": "127.0.0.1", "port": 9,
          "log": "/tmp/x.log", "started_at": 1796192690.5, "demo": True, "gpu_url": "http://127.0.0.1:10/_emulator/gpus",
          "gpu_baseline_mib": {"0": 512.0, "7": 0.0}, "stopped_at": None, "launch_token": "0123456789abcdef" * 2}

WRONG_RECORDS = {
    "id": ["", 5], "preset": [None, 1], "argv": [[], ["sleep", 1], "sleep 1"], "pid": [1, 0, 2**70, "99", 9.5, True],
    "pgid": [-4, None], "create_time": [-1.0, 2.0**34, "now", math.nan], "url": [5], "host": [[]], "port": [0, 65536, "9"],
    "log": [None], "started_at": [math.inf, 1e300], "demo": [1, "yes"], "gpu_url": [5, {}],
    "gpu_baseline_mib": [{"x": 1.0}, {"0": -1.0}, {"0": True}, {"0": "5"}, []], "stopped_at": [-5, "soon"],
    "launch_token": ["zz", "ABCDEF" * 6, None],
}


def _write_record(directory: Path, data: dict[str, Any], name: str = "abc123.json") -> Path:
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = directory / name
    path.write_text(json.dumps(data, allow_nan=True))
    path.chmod(0o600)
    return path


def test_a_state_file_as_specmon_wrote_it_then_and_now_reads_back(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMON_STATE_DIR", str(tmp_path))
    record = ServerRecord.from_json(RECORD)
    assert record.to_json() == RECORD
    assert state.read(state.save(record)) == record
    older = {k: v for k, v in RECORD.items() if k not in ("stopped_at", "launch_token", "gpu_url")}
    old = state.read(_write_record(tmp_path / "servers", older | {"create_time": 1796192690}))
    assert (old.launch_token, old.stopped_at, old.gpu_url, old.create_time) == ("", None, None, 1796192690.0)
    assert isinstance(old.create_time, float)
    later = state.read(_write_record(tmp_path / "servers", RECORD | {"a_later_key": [1]}))
    assert later == record  # a later specmon's key is left aside, not a fault


@pytest.mark.parametrize("key", list(WRONG_RECORDS))
def test_every_key_of_a_state_file_refuses_a_value_it_cannot_hold(tmp_path, monkeypatch, key):
    monkeypatch.setenv("SPECMON_STATE_DIR", str(tmp_path))
    assert {f.name for f in msgspec.structs.fields(ServerRecord)} == set(WRONG_RECORDS)
    for value in WRONG_RECORDS[key]:
        shutil.rmtree(tmp_path / "servers", ignore_errors=True)
        _write_record(tmp_path / "servers", RECORD | {key: value})
        records, problems = state.load_all()
        assert records == [] and len(problems) == 1, (key, value, records)
        said = problems[0].message
        if not (isinstance(value, float) and not math.isfinite(value)):  # refused when read, before its key
            assert f"'{key}" in said.split(" must ")[0].split(" is ")[0], (value, said)
        assert "\n" not in said and len(said) < 200, said
    missing = {k: v for k, v in RECORD.items() if k != key}
    if key in {f.name for f in msgspec.structs.fields(ServerRecord) if f.required}:
        with pytest.raises(ValueError, match=f"^'{key}' is missing$"):
            ServerRecord.from_json(missing)


# ------------------------------------------------------------------------------------------ sweep plans

WRONG_PLANS = {
    "run_id": [5, None], "steps": [None, {}, [{"preset": "a"}]], "requests": ["8", 2.5, True],
    "created_at": [-1.0, "today"], "finished": [1, "no"], "left_serving": [3], "leave": ["all", 5, None],
    "recommended": [[]], "runner_pid": [0, "123", 1.5], "runner_started": [2.0**35], "server_id": [7],
    "cancelled": [1, "yes"], "grid": [5, "grid", [1, 2]], "leave_s": [-1.0, "slow"],
}
WRONG_STEPS = {
    "preset": [None, 5], "baseline": [None, 1], "draft_tokens": ["16", 4.5, True], "state": ["??", None],
    "bench_run_id": [1], "startup_s": [-1.0, "slow"], "measure_s": [[]], "error": [False],
    "grid_config": ["3,1,4", 5, [1.5]], "cells": [5, "cells", [{"concurrency": "many"}]],
}


def test_a_sweep_plan_as_specmon_wrote_it_then_and_now_reads_back(tmp_path):
    store = SweepStore(tmp_path)
    shutil.copy(OLD_SWEEP, tmp_path / OLD_SWEEP.name)
    (tmp_path / OLD_SWEEP.name).chmod(0o600)
    old = store.load(OLD_SWEEP.stem)  # written before leave, recommended, the runner and cancelled were kept
    on_disk = json.loads(OLD_SWEEP.read_text())
    written = old.to_json()  # keys added since (a grid's) are written too; what was on disk reads back the same
    assert {k: v for k, v in written.items() if k in on_disk and k != "steps"} == {
        k: v for k, v in on_disk.items() if k != "steps"}
    assert [{k: v for k, v in step.items() if k in was} for step, was in zip(
        written["steps"], on_disk["steps"], strict=True)] == on_disk["steps"]
    assert (old.leave, old.runner_pid, old.cancelled, old.steps[1].draft_tokens) == ("best", None, False, 16)
    plan = SweepPlan("20261203-000000-abcd", [SweepStep("b", True, None, state="measured", startup_s=1.5),
                                              SweepStep("s", False, 11)], requests=8, leave="none",
                     runner_pid=1, runner_started=1796192690.5, server_id="abc123", cancelled=True)
    assert store.load(store.save(plan).stem) == plan


@pytest.mark.parametrize(("key", "step"), [(k, False) for k in WRONG_PLANS] + [(k, True) for k in WRONG_STEPS])
def test_every_key_of_a_sweep_plan_refuses_a_value_it_cannot_hold(tmp_path, key, step):
    assert {f.name for f in msgspec.structs.fields(SweepPlan)} == set(WRONG_PLANS)
    assert {f.name for f in msgspec.structs.fields(SweepStep)} == set(WRONG_STEPS)
    good = json.loads(OLD_SWEEP.read_text())
    store = SweepStore(tmp_path)
    for value in (WRONG_STEPS if step else WRONG_PLANS)[key]:
        data = json.loads(json.dumps(good))
        if step:
            data["steps"][1][key] = value
        else:
            data[key] = value
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(data))
        path.chmod(0o600)
        with pytest.raises(SweepError) as refused:
            store.load("bad")
        said = str(refused.value)
        named = f"'steps[1].{key}" if step else f"'{key}"
        assert said.startswith(f"not a sweep state file: {named}"), (value, said)
        assert "\n" not in said and len(said) < 240, said


def test_an_unknown_step_state_that_reads_like_a_location_is_named_where_it_is():
    data = json.loads(OLD_SWEEP.read_text())
    data["steps"][2]["state"] = "x` - at `$.run_id"
    with pytest.raises(SweepError, match=r"^not a sweep state file: 'steps\[2\]\.state' must be one of 'pending', "):
        SweepPlan.from_json(data)
