"""The startup facts rows, from real logs."""

from __future__ import annotations

import pytest

from specmon.tui.logs.tracker import StartupTracker
from specmon.widgets.server_facts import startup_rows
from tests.support.app_harness import fixture_bytes


def _rows(log: str, until: str | None = None) -> dict[str, str]:
    """The rows for a real log, cut before its second ``until``."""
    tracker = StartupTracker()
    for line in fixture_bytes(log, until, occurrence=2).decode(errors="replace").splitlines():
        tracker.feed_line(line)
    return dict(startup_rows(tracker.state))


@pytest.mark.parametrize(
    ("log", "until", "after"),
    [
        ("h200-0.5.16-standalone-ready.log", None, "KV cache and graphs"),  # last step: max_total_num_tokens
        ("h200-0.5.16-standalone-ready.log", "Load weight begin", "weights"),  # the draft's load: after the target's
        ("02-qwen3-14b-tp2-a4500-cutoff-during-capture.log", None, "KV cache"),
    ],
)
def test_free_gpu_memory_says_what_it_comes_after(log, until, after):
    rows = _rows(log, until)
    assert "avail mem" not in rows
    assert rows["free GPU mem"].endswith(f" GB after {after}"), rows
