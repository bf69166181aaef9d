"""A log that begins a new startup (appended, or the file recreated) starts a fresh timeline in the feed; the
earlier run stays in history. Also live: the emulator restarted into the same log file, and recreated."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from specmon.ports import free_port_pair
from specmon.view.log_feed import LogFeed, feed_text, follow_log
from tests.support.oncall import wait_for

LOG = Path(__file__).parents[1] / "fixtures" / "logs" / "h200-0.5.16-plain-ready.log"


def test_a_second_startup_appended_starts_a_fresh_timeline() -> None:
    feed = LogFeed()
    feed_text(feed, LOG.read_bytes())
    assert feed.state.state in ("ready", "stopped") and feed.restarts == 0  # the fixture ends with a shutdown
    first_events = feed.take().events
    text = LOG.read_text()
    cut = text.index("server_args=")
    cut = text.rfind("\n", 0, cut) + 1
    feed_text(feed, text[:cut].encode())  # the next launch's first lines: still the first run
    assert feed.restarts == 0
    feed_text(feed, text[cut : cut + text[cut:].index("\n") + 1].encode())
    assert feed.restarts == 1 and feed.state.state == "starting" and len(feed.history) == 1
    assert feed.history[0].state in ("ready", "stopped") and feed.history[0].ready_at is not None
    feed_text(feed, text[cut:].encode()[len(text[cut : cut + text[cut:].index("\n") + 1]) :])
    assert feed.state.state in ("ready", "stopped") and feed.state.ready_at is not None
    assert first_events and feed.take().events


def test_two_startups_in_one_batch_keep_the_first_in_history() -> None:
    feed = LogFeed()
    feed_text(feed, LOG.read_bytes() * 2)
    assert feed.restarts == 1 and feed.history[0].ready_at is not None and feed.state.ready_at is not None


@pytest.mark.timeout(120)
@pytest.mark.parametrize("how", ["appended", "recreated"])
def test_the_emulator_restarted_into_its_log_is_a_new_run(tmp_path: Path, how: str) -> None:
    port = free_port_pair()
    log = tmp_path / "server.log"
    argv = [sys.executable, "-m", "specmon.emulator", "--model-path", "demo/m", "--port", str(port),
            "--emulator-speed", "40", "--emulator-warmup-delay", "0.1"]  # fmt: skip
    feed, stop = LogFeed(), threading.Event()
    follower = threading.Thread(target=follow_log, args=(str(log), feed, stop, 0.02), daemon=True)
    follower.start()
    procs = []
    try:
        for run in range(2):
            if run and how == "recreated":
                log.unlink()
            with open(log, "ab") as out:
                procs.append(
                    subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
                )
            wait_for(lambda r=run: feed.restarts == r and feed.state.state == "ready", 60, f"run {run} ready")
            procs[-1].terminate()
            procs[-1].wait(timeout=30)
        assert len(feed.history) == 1 and feed.history[0].state in ("ready", "stopped")
    finally:
        stop.set()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_next_log_keeps_the_earlier_run_in_history_and_ignores_the_old_follower() -> None:
    from specmon.view.log_feed import LogFeed, feed_text

    feed = LogFeed()
    feed_text(feed, b"[2026-12-01 10:00:00] server_args=ServerArgs(model_path='m')\n")
    old_generation = feed.generation
    feed.next_log()
    assert feed.restarts == 1 and len(feed.history) == 1 and feed.generation == old_generation + 1
    feed.feed([], generation=old_generation)  # the old follower's lines: ignored
    assert feed.take().lines == []
    feed_text(feed, b"[2026-12-01 10:01:00] server_args=ServerArgs(model_path='m')\n")
    assert feed.restarts == 1, "the new log's first startup is not another restart"
