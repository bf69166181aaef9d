"""`specmon traffic` and its reader on real files: figures against records whose truth is known, and the hostile
inputs of issue 35 (each a counted reason, a clear message, a bounded cost)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from specmon.traffic.reader import LONG_LINE, MAX_LINE_BYTES, PARTIAL, ReadTally, read_records
from specmon.traffic.summary import TrafficSummary

EXPORT = "sglang-request-metrics-20260101_10.log"


def export_line(rid: str, completion: int, verify: int, prompt: int = 100, histogram=None, **params) -> str:
    meta = {"id": rid, "prompt_tokens": prompt, "completion_tokens": completion, "spec_verify_ct": verify,
            "spec_accept_length": completion / verify}
    if histogram is not None:
        meta["spec_accept_histogram"] = histogram
    return json.dumps({"request_parameters": json.dumps({"rid": rid, "text": "x", **params}), **meta}) + "\n"


def specmon(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specmon", "traffic", *args], capture_output=True, text=True,
                          timeout=120)


def test_figures_are_the_records_own(tmp_path):
    lines = [export_line(f"a{i}", 30, 10, prompt=100, team="code") for i in range(6)]  # τ 3.0
    lines += [export_line(f"b{i}", 20, 10, prompt=2000, team="prose") for i in range(4)]  # τ 2.0
    (tmp_path / EXPORT).write_text("".join(lines))
    run = specmon(str(tmp_path), "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["requests"] == 10
    assert result["accept_length"]["token_weighted"] == pytest.approx((6 * 30 + 4 * 20) / 100)
    rows = {(c["by"], c["value"]): c for c in result["classes"]}
    assert rows[("prompt_tokens", "0-255")]["accept_length"] == pytest.approx(3.0)
    assert rows[("prompt_tokens", "0-255")]["ci"] == pytest.approx([3.0, 3.0])
    assert rows[("prompt_tokens", "1024-4095")]["requests"] == 4
    assert rows[("prompt_tokens", "1024-4095")]["share"] == pytest.approx(80 / 260)
    by_team = json.loads(specmon(str(tmp_path / EXPORT), "--by", "team", "--json").stdout)
    assert {c["value"]: c["accept_length"] for c in by_team["classes"]} == {"code": 3.0, "prose": 2.0}


def test_outliers_carry_their_rids(tmp_path):
    lines = [export_line("garbled", 100, 98, histogram=[96, 2])]  # τ ≈ 1.02 over 100 tokens
    lines += [export_line("loop", 200, 50, histogram=[0, 0, 0, 50])]  # every step at the chain's maximum
    lines += [export_line(f"ok{i}", 60, 30, histogram=[10, 10, 5, 5]) for i in range(5)]
    (tmp_path / EXPORT).write_text("".join(lines))
    result = json.loads(specmon(str(tmp_path), "--json").stdout)
    assert [(o["rid"], o["kind"]) for o in result["outliers"]] == [("garbled", "nothing_from_draft"),
                                                                    ("loop", "at_chain_maximum")]
    text = specmon(str(tmp_path)).stdout
    assert "garbled" in text and "loop" in text
    assert max(len(line) for line in text.splitlines()) <= 80


HOSTILE = {
    "another version": '{"id": "x", "completion_tokens": 10, "spec_verify_ct": 5}',
    "truncated": export_line("t", 10, 5)[:40],
    "nan": '{"request_parameters": "{}", "completion_tokens": NaN, "spec_verify_ct": 5}',
    "negative": export_line("n", -10, 5).strip(),
    "verify zero": '{"request_parameters": "{}", "completion_tokens": 10, "spec_verify_ct": 0}',
    "billion": '{"request_parameters": "{}", "completion_tokens": 1000000000, "spec_verify_ct": 5}',
    "disagrees": '{"request_parameters": "{}", "completion_tokens": 10, "spec_verify_ct": 5, "spec_accept_length": 7}',
    "deep": "[" * 100_000,
}


def test_every_hostile_record_is_counted_with_its_reason(tmp_path):
    good = export_line("good", 20, 10)
    (tmp_path / EXPORT).write_text(good + "\n".join(HOSTILE.values()) + "\n" + good + "partial")
    run = specmon(str(tmp_path), "--json")
    assert run.returncode == 0 and "Traceback" not in run.stderr
    result = json.loads(run.stdout)
    assert result["requests"] == 2
    assert result["skipped"]["count"] == len(HOSTILE) + 1
    reasons = result["skipped"]["reasons"]
    for expected in ("no request_parameters (another SGLang version's record?)", "completion_tokens is NaN or infinite",
                     "completion_tokens is negative", "spec_verify_ct is 0", "completion_tokens over 10,000,000",
                     "spec_accept_length disagrees with completion_tokens / spec_verify_ct", "JSON nested too deep",
                     PARTIAL):
        assert reasons.get(expected) == 1, (expected, reasons)


def test_health_checks_and_terminal_escapes(tmp_path):
    lines = [export_line("HEALTH_CHECK_abc", 10, 5), export_line("\x1b]0;pwned\x07" + "r" * 500, 20, 10,
                                                                   team="\x1b[31mred")]
    (tmp_path / EXPORT).write_text("".join(lines * 5))
    result = json.loads(specmon(str(tmp_path), "--by", "team", "--json").stdout)
    assert result["left_out"] == {"health checks": 5} and result["requests"] == 5
    assert result["classes"][0]["value"] == "\\x1b[31mred"
    text = specmon(str(tmp_path), "--by", "team").stdout
    assert "\x1b" not in text


def test_a_line_over_the_bound_is_passed_over_in_bounded_memory(tmp_path):
    path = tmp_path / EXPORT
    with open(path, "wb") as handle:  # a sparse 1 GiB line between two good records
        handle.write(export_line("first", 20, 10).encode())
        handle.truncate(1 << 30)
        handle.seek(1 << 30)
        handle.write(b"\n" + export_line("last", 30, 10).encode())
    tally = ReadTally()
    started = time.monotonic()
    records = list(read_records([str(path)], tally))
    assert [r.rid for r in records] == ["first", "last"]
    assert tally.skipped == {LONG_LINE: 1}
    assert time.monotonic() - started < 60
    assert MAX_LINE_BYTES < 1 << 30


def test_paths_that_cannot_be_read_are_one_line_and_exit_2(tmp_path):
    loop = tmp_path / "loop"
    os.symlink(loop, loop)
    run = specmon(str(loop))
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "symbolic link loop" in run.stderr
    missing = specmon(str(tmp_path / "nope"))
    assert missing.returncode == 2 and "No such file" in missing.stderr
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "sglang-request-metrics-20260101_11.log").mkdir()  # a directory where a file should be
    (tmp_path / "d" / EXPORT).write_text(export_line("x", 20, 10))
    result = json.loads(specmon(str(tmp_path / "d"), "--json").stdout)
    assert result["requests"] == 1 and "not a regular file" in result["unreadable_files"][0]
    assert specmon(str(tmp_path / "d"), "--since", "forever").returncode == 2
    assert specmon(str(tmp_path / "d"), "--by", "a..b").returncode == 2


def test_no_usable_record_exits_1(tmp_path):
    (tmp_path / EXPORT).write_text(HOSTILE["verify zero"] + "\n")
    run = specmon(str(tmp_path))
    assert run.returncode == 1 and "--export-metrics-to-file" in run.stderr


def test_a_file_rotated_during_the_read_is_read_to_its_end(tmp_path):
    log = tmp_path / "host_0.log"
    log.write_text("".join(json.dumps({"timestamp": "2026-01-01T10:00:00", "event": "request.finished",
                                       "rid": f"r{i}", "obj": {"rid": f"r{i}"},
                                       "out": {"meta_info": {"id": f"r{i}", "completion_tokens": 20,
                                                             "spec_verify_ct": 10}}}) + "\n" for i in range(3)))
    tally = ReadTally()
    records = read_records([str(tmp_path)], tally)
    first = next(records)
    os.rename(log, tmp_path / "host_0.log.2026-01-01_10")  # TimedRotatingFileHandler's rotation
    log.write_text("")
    assert [first.rid] + [r.rid for r in records] == ["r0", "r1", "r2"]
    assert not tally.skipped


def test_the_text_finish_line_and_its_dated_prefix(tmp_path):
    line = ("[2026-01-01 10:00:00] Finish: obj=GenerateReqInput(text=\"it's 'meta_info': {'completion_tokens': 999\", "
            "rid='abc', lora_path=None), out={'text': ' hi', 'output_ids': [1, 2], 'meta_info': {'id': 'abc', "
            "'prompt_tokens': 9, 'completion_tokens': 48, 'spec_verify_ct': 47, 'spec_accept_length': "
            "1.0212765957446808, 'spec_accept_histogram': [47], 'e2e_latency': 0.17}}\n")
    (tmp_path / "server.log").write_text("[2026-01-01 09:59:59] Receive: obj=GenerateReqInput(rid='abc')\n" + line)
    tally = ReadTally()
    (record,) = read_records([str(tmp_path / "server.log")], tally)
    assert (record.rid, record.completion_tokens, record.verify_ct) == ("abc", 48, 47)
    assert record.finished_ts == pytest.approx(time.mktime((2026, 1, 1, 10, 0, 0, 0, 0, -1)))
    summary = TrafficSummary().feed([record]).result()
    assert summary["accept_length"]["token_weighted"] == pytest.approx(48 / 47)



@pytest.mark.parametrize(("obj", "ids"), [
    ("text=None, input_ids=[5, 2147483647, 0], rid='a'", [5, 2147483647, 0]),  # SGLang's: every field, None ones too
    ("input_ids=[5, 6], rid='a'", [5, 6]),  # the emulator's: the fields it has
    ("text='" + "x" * 300 + ", input_ids=[6, 6]', rid='a'", None),  # a text's words are not token ids
    ("text=None, input_ids=[1, 2] ... [3, 4], rid='a'", None),  # cut at level 2: not the prompt's ids
])
def test_a_text_finish_line_gives_its_token_ids_only_where_sglang_writes_them(tmp_path, obj, ids):
    line = (f"[2026-01-01 10:00:00] Finish: obj=GenerateReqInput({obj}), out={{'meta_info': {{'id': 'a', "
            "'prompt_tokens': 3, 'completion_tokens': 8, 'spec_verify_ct': 4}}\n")
    (tmp_path / "server.log").write_text(line)
    (record,) = read_records([str(tmp_path / "server.log")], ReadTally())
    assert record.params.get("input_ids") == ids

FIELD_VALUES = [("completion_tokens", v) for v in (20, 20.0, 20.5, True, "20", None, -1, 10**30, 1e30, [20])] + \
    [("spec_verify_ct", v) for v in (10, 10.0, 0, 21, None, False, "10")] + \
    [("prompt_tokens", v) for v in (5, None, -5, 5.5, "5")] + \
    [("spec_accept_length", v) for v in (2.0, 2, 2.5, "2", True, None)] + \
    [("spec_accept_histogram", v) for v in ([9, 1], [10], [], [9, True], [11, -1], "[10]", [1] * 65, None)] + \
    [("request_finished_ts", v) for v in (1.5e9, 1500000000, -1, True, "now", None)]


@pytest.mark.parametrize(("key", "value"), FIELD_VALUES)
def test_an_export_line_is_judged_as_its_fields_are(key, value):
    """The fast decoding of an export line (msgspec, no dict) and the checks of a dict of the same fields (a
    request log's meta_info) agree on every value: the same record, or the same reason."""
    from specmon.traffic.records import Unusable, checked, parse_export

    meta = {"id": "r", "completion_tokens": 20, "spec_verify_ct": 10, key: value}
    line = json.dumps({"request_parameters": json.dumps({"rid": "r"}), **meta})

    def judged(parse):
        try:
            return parse()
        except Unusable as why:
            return str(why)

    assert judged(lambda: parse_export(line.encode())) == judged(lambda: checked("r", meta, None, None))


def test_invalid_utf8_in_a_prompt_leaves_the_record_usable(tmp_path):
    line = export_line("r", 20, 10).encode().replace(b'\\"x\\"', b'\\"\xff\xfe\\"')
    assert b"\xff" in line
    (tmp_path / EXPORT).write_bytes(line)
    tally = ReadTally()
    assert [r.rid for r in read_records([str(tmp_path)], tally, want_params=True)] == ["r"]
    assert not tally.skipped


def test_a_symlink_loop_inside_a_directory_is_one_unreadable_file(tmp_path):
    (tmp_path / EXPORT).write_text(export_line("x", 20, 10))
    loop = tmp_path / "sglang-request-metrics-20260101_11.log"
    os.symlink(loop, loop)
    tally = ReadTally()
    assert [r.rid for r in read_records([str(tmp_path)], tally)] == ["x"]
    assert tally.unreadable == [f"{loop}: a symbolic link loop"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any directory")
def test_an_unreadable_directory_is_one_line_and_exit_2(tmp_path):
    folder = tmp_path / "exports"
    folder.mkdir()
    (folder / EXPORT).write_text(export_line("x", 20, 10))
    folder.chmod(0)
    try:
        run = specmon(str(folder))
    finally:
        folder.chmod(0o755)
    assert run.returncode == 2 and "Permission denied" in run.stderr and run.stderr.count("\n") == 1


def test_a_file_truncated_during_the_read_gives_what_was_read_and_nothing_made_up(tmp_path):
    path = tmp_path / EXPORT
    path.write_text("".join(export_line(f"r{i}", 20, 10) for i in range(20_000)))  # several read chunks
    tally = ReadTally()
    records = read_records([str(tmp_path)], tally)
    first = next(records)
    os.truncate(path, 0)  # logrotate's copytruncate, mid-read
    rids = [first.rid] + [r.rid for r in records]
    assert rids == [f"r{i}" for i in range(len(rids))] and 0 < len(rids) < 20_000
    assert set(tally.skipped) <= {PARTIAL}
