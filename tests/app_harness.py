"""Builds SpecmonApp instances for tests and snapshots: fed from fixture logs, with no live server."""

from __future__ import annotations

import time
from pathlib import Path

from tui.app import AppConfig, SpecmonApp
from tui.app_feed import feed_text

LOGS = Path(__file__).parent / "fixtures" / "logs"
FIXTURE_URL = "http://127.0.0.1:30000"


def fixture_bytes(name: str, until: str | None = None, occurrence: int = 1) -> bytes:
    """A fixture log's bytes, optionally cut just before the ``occurrence``-th line containing ``until``."""
    data = (LOGS / name).read_bytes()
    if until is None:
        return data
    start = -1
    for _ in range(occurrence):
        start = data.index(until.encode(), start + 1)
    return data[: data.rfind(b"\n", 0, start) + 1]


def fixture_app(name: str | None = None, until: str | None = None, occurrence: int = 1, **config) -> SpecmonApp:
    """An app showing fixture log ``name`` (cut before ``until``), not polling any server."""
    config.setdefault("url", FIXTURE_URL)
    config.setdefault("poll", False)
    app = SpecmonApp(AppConfig(**config))
    if name is not None:
        feed_text(app.feed, fixture_bytes(name, until, occurrence))
    return app


def screen_text(app: SpecmonApp) -> str:
    """The screen as plain text (what a user would read)."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def wait_for(pilot, predicate, timeout: float = 5.0, step: float = 0.05) -> bool:
    """Let the app run until ``predicate()`` is true (True) or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await pilot.pause(step)
    return predicate()
