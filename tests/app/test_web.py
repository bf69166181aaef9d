"""`specmon monitor --web`: the read-only app served to a browser by textual-serve, checked over its websocket
(the same protocol a browser speaks), and read-only mode in the app itself."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import aiohttp
import pytest

from specmon.ports import free_port
from specmon.tui.app import AppConfig, SpecmonApp
from tests.support.app_harness import wait_for
from tests.support.web_process import stop_session, web_monitor


@pytest.fixture
def web_server(tmp_path):
    with web_monitor(tmp_path) as port:
        yield port


async def _index(port: int, deadline: float) -> str:
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.get(f"http://127.0.0.1:{port}/") as response:
                    return await response.text()
            except aiohttp.ClientConnectionError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)


async def _screen_over_websocket(port: int, wanted: str, deadline: float, *also: str) -> str:
    """What the app draws, as the browser's websocket receives it, until ``wanted`` (and each of ``also``) shows."""
    seen = ""
    url = f"ws://127.0.0.1:{port}/ws?width=100&height=30"
    async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
        await ws.send_str(json.dumps(["resize", {"width": 100, "height": 30}]))
        while any(text not in seen for text in (wanted, *also)) and time.monotonic() < deadline:
            try:
                message = await ws.receive(timeout=max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                break
            if message.type == aiohttp.WSMsgType.BINARY:
                seen += message.data.decode("utf-8", "replace")
            elif message.type == aiohttp.WSMsgType.TEXT:
                seen += message.data
            elif message.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                break
    return seen


async def test_the_web_app_is_served_on_loopback_and_draws_over_its_websocket(web_server) -> None:
    deadline = time.monotonic() + 60
    page = await _index(web_server, deadline)
    assert f"ws://127.0.0.1:{web_server}/ws" in page
    screen = await _screen_over_websocket(web_server, "unreachable", deadline)
    assert "specmon" in screen and "unreachable" in screen


async def test_read_only_offers_no_switching_and_no_benchmark() -> None:
    app = SpecmonApp(AppConfig(url="http://127.0.0.1:9", poll=False, read_only=True))
    async with app.run_test(size=(100, 30)) as pilot:
        assert await wait_for(pilot, lambda: app.main.composed)
        assert app.check_action("run_bench", ()) is False and app.check_action("pick_preset", ()) is False
        assert app.check_action("show_pane('gpus')", ()) is True
        titles = [command.title for command in app.get_system_commands(app.screen)]
        assert "Run the benchmark" not in titles and not any(t.startswith("Switch preset") for t in titles)
        await pilot.press("b")
        assert not app.bench_running


async def test_fleet_web_serves_the_fleet_screen_read_only(tmp_path) -> None:
    """`specmon fleet --web`: each browser tab runs the fleet read-only; with nothing at --prometheus it says
    so in its one error line."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "specmon", "fleet", "--prometheus", "http://127.0.0.1:9", "--web", "--web-port",
         str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "xdg")},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        page = await _index(port, deadline)
        assert f"ws://127.0.0.1:{port}/ws" in page
        screen = await _screen_over_websocket(port, "did not answer", deadline, "Refresh")
        assert "did not answer" in screen and "Refresh" in screen  # the keys too, though the tab has no focus
    finally:
        stop_session(proc)
    assert "serving the read-only fleet" in proc.stderr.read().decode()
