"""`specmon monitor --web` against hostile pages and clients: a websocket from another site, a DNS-rebinding
Host, more tabs than allowed, an absurd terminal size; and read-only means no file is written (F8)."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from specmon.tui.app import AppConfig, SpecmonApp
from tests.support.app_harness import wait_for
from tests.support.web_process import web_monitor


@pytest.mark.parametrize(("host", "bind", "allowed"), [
    ("127.0.0.1:8765", "127.0.0.1", True),
    ("localhost:8765", "127.0.0.1", True),
    ("[::1]:8765", "127.0.0.1", True),
    ("evil.example:8765", "127.0.0.1", False),  # DNS rebinding: a page of evil.example resolved to 127.0.0.1
    ("127.0.0.1.nip.io:8765", "127.0.0.1", False),
    ("10.1.2.3:8765", "127.0.0.1", False),
    ("", "127.0.0.1", False),
    (None, "127.0.0.1", False),
    ("10.1.2.3:8765", "0.0.0.0", True),
    ("evil.example:8765", "0.0.0.0", False),
    ("gpu-box:8765", "gpu-box", True),
])
def test_only_requests_that_name_this_server_are_served(host, bind, allowed):
    from specmon.tui.web import host_allowed

    assert host_allowed(host, bind) is allowed


@pytest.mark.parametrize(("origin", "host", "allowed"), [
    ("http://127.0.0.1:8765", "127.0.0.1:8765", True),
    ("http://evil.example", "127.0.0.1:8765", False),
    ("http://127.0.0.1:9999", "127.0.0.1:8765", False),
    ("null", "127.0.0.1:8765", False),  # a sandboxed iframe or a file: page
    ("file://", "127.0.0.1:8765", False),
    ("http://127.0.0.1:8765.evil.example", "127.0.0.1:8765", False),
    (None, "127.0.0.1:8765", True),  # no Origin: not a browser page
])
def test_a_websocket_is_taken_only_from_this_servers_own_page(origin, host, allowed):
    from specmon.tui.web import origin_allowed

    assert origin_allowed(origin, host) is allowed


def test_a_terminal_size_from_a_browser_is_bounded():
    from specmon.tui.web import terminal_size

    assert terminal_size(10**9, 10**9) == (500, 200)
    assert terminal_size(-5, 0) == (1, 1)
    assert terminal_size("wide", None) == (80, 24)
    assert terminal_size(float("inf"), 30) == (80, 30)


@pytest.fixture
def web(tmp_path):
    with web_monitor(tmp_path, "--web-sessions", "1") as port:
        yield port


async def _status(session: aiohttp.ClientSession, url: str, **headers: str) -> int:
    deadline = time.monotonic() + 60
    while True:
        try:
            async with session.get(url, headers=headers) as response:
                return response.status
        except aiohttp.ClientConnectionError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def _websocket_status(session: aiohttp.ClientSession, url: str, **headers: str) -> int:
    try:
        async with session.ws_connect(url, headers=headers) as ws:
            await ws.close()
            return 101
    except aiohttp.WSServerHandshakeError as error:
        return error.status


async def test_another_sites_page_gets_no_websocket_and_a_rebinding_host_no_page(web):
    base = f"http://127.0.0.1:{web}"
    ws = f"ws://127.0.0.1:{web}/ws"
    async with aiohttp.ClientSession() as session:
        assert await _status(session, base + "/") == 200
        assert await _status(session, base + "/", Host=f"evil.example:{web}") == 403
        assert await _websocket_status(session, ws, Origin="http://evil.example") == 403
        assert await _websocket_status(session, ws, Host=f"evil.example:{web}", Origin=f"http://evil.example:{web}") \
            == 403
        assert await _websocket_status(session, ws, Origin=f"http://127.0.0.1:{web}") == 101


async def test_one_tab_more_than_allowed_is_refused_until_one_closes(web):
    base = f"http://127.0.0.1:{web}"
    url = f"ws://127.0.0.1:{web}/ws?width=100000&height=100000"
    async with aiohttp.ClientSession() as session:
        assert await _status(session, base + "/") == 200
        first = await session.ws_connect(url, headers={"Origin": base})
        try:
            assert await _websocket_status(session, url, Origin=base) == 503
        finally:
            await first.close()
        deadline = time.monotonic() + 30
        while (status := await _websocket_status(session, url, Origin=base)) == 503 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert status == 101


async def test_read_only_writes_no_screenshot_and_offers_none(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = SpecmonApp(AppConfig(url="http://127.0.0.1:9", poll=False, read_only=True))
    async with app.run_test(size=(100, 30)) as pilot:
        assert await wait_for(pilot, lambda: app.main.composed)
        assert app.check_action("screenshot", ()) is False
        titles = [command.title for command in app.get_system_commands(app.screen)]
        assert "Screenshot" not in titles and "Save an SVG screenshot" not in titles
        await pilot.press("f8")
        await pilot.pause()
    assert list(tmp_path.glob("*.svg")) == []


async def test_outside_read_only_f8_still_saves(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = SpecmonApp(AppConfig(url="http://127.0.0.1:9", poll=False))
    async with app.run_test(size=(100, 30)) as pilot:
        assert await wait_for(pilot, lambda: app.main.composed)
        await pilot.press("f8")
        assert await wait_for(pilot, lambda: list(tmp_path.glob("*.svg")))
