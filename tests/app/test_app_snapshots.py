"""SVG snapshots of the main screen, built from fixture logs with no live server.

Regenerate after an intended change: `.venv/bin/python -m pytest tests/app/test_app_snapshots.py --snapshot-update`.
"""

from __future__ import annotations

import pytest

from tests.support.app_harness import capturing_app, failed_app, ready_app, starting_app

SIZES = {"80x24": (80, 24), "200x50": (200, 50)}


async def _settle(pilot) -> None:
    await pilot.pause(0.2)
    await pilot.wait_for_scheduled_animations()


@pytest.mark.parametrize("size", SIZES)
def test_starting(snap_compare, size):
    assert snap_compare(starting_app(), terminal_size=SIZES[size], run_before=_settle)


@pytest.mark.parametrize("size", SIZES)
def test_mid_capture(snap_compare, size):
    assert snap_compare(capturing_app(), terminal_size=SIZES[size], run_before=_settle)


@pytest.mark.parametrize("size", SIZES)
def test_ready(snap_compare, size):
    assert snap_compare(ready_app(), terminal_size=SIZES[size], run_before=_settle)


@pytest.mark.parametrize("size", SIZES)
def test_failed_with_hint(snap_compare, size):
    assert snap_compare(failed_app(), terminal_size=SIZES[size], run_before=_settle)


def test_gpus_tab_at_80x24(snap_compare):
    assert snap_compare(ready_app(), terminal_size=(80, 24), press=["2"], run_before=_settle)


def test_light_theme_at_80x24(snap_compare):
    assert snap_compare(failed_app(), terminal_size=(80, 24), press=["t"], run_before=_settle)
