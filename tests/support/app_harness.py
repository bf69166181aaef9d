"""Builds SpecmonApp instances for tests, snapshots and screenshots: fed from fixture logs, no live server."""

from __future__ import annotations

import json
import time
from pathlib import Path

from specmon.tui.app import AppConfig, SpecmonApp
from specmon.view.log_feed import feed_text

FIXTURES = Path(__file__).parents[1] / "fixtures"
LOGS = FIXTURES / "logs"
FIXTURE_URL = "http://127.0.0.1:30000"
READY_LOG = "h200-0.5.16-standalone-ready.log"
FAILED_LOG = "h200-0.5.16-spec-args-assertion.log"


def fixture_bytes(name: str, until: str | None = None, occurrence: int = 1, mid_line: bool = False) -> bytes:
    """A fixture log's bytes, cut before the ``occurrence``-th ``until``.

    The cut is at the start of that line, or exactly there with ``mid_line`` (e.g. just after a ``\\r``,
    inside a progress bar's redraws).
    """
    data = (LOGS / name).read_bytes()
    if until is None:
        return data
    start = -1
    for _ in range(occurrence):
        start = data.index(until.encode(), start + 1)
    if mid_line:
        return data[:start]
    return data[: data.rfind(b"\n", 0, start) + 1]


def fixture_app(
    name: str | None = None, until: str | None = None, occurrence: int = 1, mid_line: bool = False, **config
) -> SpecmonApp:
    """An app showing fixture log ``name`` (cut before ``until``), not polling any server."""
    config.setdefault("url", FIXTURE_URL)
    config.setdefault("poll", False)
    app = SpecmonApp(AppConfig(**config))
    if name is not None:
        feed_text(app.feed, fixture_bytes(name, until, occurrence, mid_line), final=not mid_line)
    return app


def following_app(log_path: Path) -> SpecmonApp:
    """An app following a real log file as ``monitor --log`` does, polling no server."""
    return SpecmonApp(AppConfig(url="http://127.0.0.1:9", log_path=str(log_path), poll=False))


def fixture_status(server_info: str = "h200-0.5.16-server-info-eagle3.json", state: str = "ready"):
    """A ServerStatus as the poller reports it, from a recorded /server_info answer (fixed times)."""
    from specmon.serving.poller import ServerStatus
    from specmon.serving.spec import spec_settings

    spec = spec_settings(json.loads((FIXTURES / "api" / server_info).read_text()))
    return ServerStatus(state, 1_700_000_000.0, None, spec, spec.version, FIXTURE_URL, 0.0021)


def fixture_preset(name: str = "eagle3-16"):
    from specmon.launch.presets import load_presets

    return load_presets().get(name)


# The states the snapshot tests and screenshots show.


def starting_app() -> SpecmonApp:
    """Loading the draft weights."""
    return fixture_app(READY_LOG, until="Load weight begin", occurrence=2, preset=fixture_preset())


def capturing_app() -> SpecmonApp:
    """Mid-way through the target verify graphs (tqdm frames cut after bs=5)."""
    return fixture_app(
        READY_LOG, until="Capturing batches (bs=5", occurrence=1, mid_line=True, preset=fixture_preset()
    )


def ready_app() -> SpecmonApp:
    """Ready, with the live server's effective settings next to the preset's asked values."""
    app = fixture_app(READY_LOG, until="SIGTERM received", preset=fixture_preset())
    app.server_state.http = fixture_status()
    return app


def failed_app() -> SpecmonApp:
    """Failed on its speculative arguments: the error panel with its hint."""
    return fixture_app(FAILED_LOG, preset=fixture_preset())


def screen_text(app: SpecmonApp) -> str:
    """The screen as plain text (what a user would read)."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


async def wait_for(pilot, predicate, timeout: float = 15.0, step: float = 0.05) -> bool:
    """Let the app run until ``predicate()`` is true (True) or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await pilot.pause(step)
    return predicate()
