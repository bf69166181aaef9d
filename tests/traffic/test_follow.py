"""Following SGLang's request records live (issue 35): real files rotating, truncated, replaced and growing under a
real follower; every record read once, each unusable one counted, each unreadable path said."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from specmon.loop_thread import PeriodicReader
from specmon.traffic.follow import WAITING, TrafficFollower
from specmon.traffic.reader import LONG_LINE, MAX_LINE_BYTES
from tests.traffic.test_traffic import export_line


def log_line(rid: str, completion: int = 20, verify: int = 10) -> str:
    return json.dumps({"timestamp": "2026-01-01T10:00:00", "event": "request.finished", "rid": rid,
                       "obj": {"rid": rid}, "out": {"meta_info": {"id": rid, "completion_tokens": completion,
                                                                  "spec_verify_ct": verify}}}) + "\n"


def export_name(hour: int) -> str:
    return f"sglang-request-metrics-20260101_{hour:02d}.log"


def rids(records) -> list[str]:
    return [r.rid for r in records]


def test_a_new_hourly_file_and_a_partial_line_are_followed(tmp_path):
    (tmp_path / export_name(10)).write_text(export_line("a", 20, 10) + export_line("b", 30, 10))
    follower = TrafficFollower([str(tmp_path)])
    assert rids(follower.poll()) == ["a", "b"]
    assert follower.poll() == []
    line = export_line("c", 20, 10)
    with open(tmp_path / export_name(10), "a") as handle:
        handle.write(line[:25])
        handle.flush()
        assert follower.poll() == []  # kept until its newline
        handle.write(line[25:])
    assert rids(follower.poll()) == ["c"]
    (tmp_path / export_name(11)).write_text(export_line("d", 20, 10))
    assert rids(follower.poll()) == ["d"]
    assert not follower.tally.skipped and not follower.problems
    follower.close()


def test_a_rotated_log_is_read_once_and_its_successor_from_its_start(tmp_path):
    log = tmp_path / "host_0.log"
    log.write_text(log_line("r0") + log_line("r1"))
    follower = TrafficFollower([str(tmp_path)])
    assert rids(follower.poll()) == ["r0", "r1"]
    with open(log, "a") as handle:
        handle.write(log_line("r2"))  # written just before the rotation, read after it
    os.rename(log, tmp_path / "host_0.log.2026-01-01_10")  # TimedRotatingFileHandler's rotation
    log.write_text(log_line("r3"))
    got = rids(follower.poll()) + rids(follower.poll())
    assert got == ["r2", "r3"]
    with open(log, "a") as handle:
        handle.write(log_line("r4"))
    assert rids(follower.poll()) == ["r4"]
    follower.close()


def test_a_truncated_or_replaced_log_is_read_again_after_a_restart(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(log_line("old0") + log_line("old1"))
    follower = TrafficFollower([str(log)])
    assert rids(follower.poll()) == ["old0", "old1"]
    with open(log, "w") as handle:  # a restart that truncates its log and writes again, past the old size
        handle.write(log_line("new0") + log_line("new1") + log_line("new2"))
    assert rids(follower.poll()) == ["new0", "new1", "new2"]
    replacement = tmp_path / "server.log.new"
    replacement.write_text(log_line("next0"))
    os.replace(replacement, log)  # a new file at the path
    assert rids(follower.poll()) == ["next0"]
    follower.close()


def test_a_line_over_the_bound_is_counted_and_the_next_one_read(tmp_path):
    path = tmp_path / export_name(10)
    with open(path, "w") as handle:
        handle.write(export_line("first", 20, 10) + "x" * (MAX_LINE_BYTES + 10) + "\n" + export_line("last", 30, 10))
    follower = TrafficFollower([str(tmp_path)])
    got = []
    for _ in range(4):  # a backlog is read over a few polls
        got += rids(follower.poll())
    assert got == ["first", "last"]
    assert follower.tally.skipped == {LONG_LINE: 1}
    follower.close()


def test_paths_that_cannot_be_read_are_said_and_followed_once_they_can(tmp_path):
    missing = tmp_path / "later"
    loop = tmp_path / "logs"
    loop.mkdir()
    os.symlink(loop / "b.log", loop / "a.log")
    os.symlink(loop / "a.log", loop / "b.log")
    os.mkfifo(tmp_path / "fifo.log")
    follower = TrafficFollower([str(missing), str(loop), str(tmp_path / "fifo.log")])
    assert follower.poll() == []
    assert follower.problems[str(missing)] == WAITING
    assert follower.problems[str(loop / "a.log")] == "a symbolic link loop"
    assert follower.problems[str(tmp_path / "fifo.log")] == "not a file or directory"
    missing.mkdir()
    (missing / export_name(10)).write_text(export_line("late", 20, 10))
    assert rids(follower.poll()) == ["late"]
    assert str(missing) not in follower.problems
    follower.close()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any directory")
def test_an_unreadable_directory_is_said(tmp_path):
    folder = tmp_path / "exports"
    folder.mkdir()
    folder.chmod(0)
    try:
        follower = TrafficFollower([str(folder)])
        assert follower.poll() == []
        assert follower.problems[str(folder)] == "Permission denied"
    finally:
        folder.chmod(0o755)


def test_files_written_before_the_window_are_not_opened(tmp_path):
    old = tmp_path / export_name(9)
    old.write_text(export_line("old", 20, 10))
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    (tmp_path / export_name(10)).write_text(export_line("new", 20, 10))
    follower = TrafficFollower([str(tmp_path)], since_ts=time.time() - 3600)
    assert rids(follower.poll()) == ["new"]  # a record without a time of its own is not dropped
    assert follower.files == 1
    follower.close()


def test_records_written_while_files_rotate_are_each_read_once_by_the_poll_loop(tmp_path):
    """A writer appends records (a partial line at times), starts a new hourly export file and rotates the request
    log, while the app's one poll loop follows both."""
    exports, logs = tmp_path / "exports", tmp_path / "logs"
    exports.mkdir()
    logs.mkdir()
    follower = TrafficFollower([str(exports), str(logs)])
    got: list[str] = []
    polls = [0]
    lock = threading.Lock()

    def read(_session) -> None:
        records = follower.poll()
        with lock:
            got.extend(rids(records))
            polls[0] += 1

    def wait_for(condition) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if condition():
                    return
            time.sleep(0.02)

    reader = PeriodicReader("traffic-test", read, interval_s=0.01)
    reader.start()
    written: list[str] = []
    try:
        log = logs / "host_0.log"
        for hour in range(3):
            with open(exports / export_name(hour), "a") as export, open(log, "a") as request_log:
                for i in range(40):
                    rid = f"e{hour}-{i}"
                    line = export_line(rid, 20, 10)
                    export.write(line[:30])
                    export.flush()
                    export.write(line[30:])
                    request_log.write(log_line(f"l{hour}-{i}"))
                    request_log.flush()
                    written += [rid, f"l{hour}-{i}"]
            os.rename(log, logs / f"host_0.log.2026-01-01_{hour:02d}")
        wait_for(lambda: len(got) >= len(written))
        with lock:
            seen_at = polls[0]
        wait_for(lambda: polls[0] >= seen_at + 3)  # a few more polls: nothing is read twice
    finally:
        assert reader.stop()
        follower.close()
    assert sorted(got) == sorted(written)
    assert not follower.tally.skipped
