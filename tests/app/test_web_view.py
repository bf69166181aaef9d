"""The web view loads from this server alone (no outside font host), says that benchmarks are off rather than
"press b", and shows its footer in a tab that is only watched (issue 22 item 16)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import httpx
import pytest

from specmon.ports import free_port
from tests.support.app_harness import READY_LOG, fixture_app, screen_text, wait_for

pytestmark = pytest.mark.timeout(60)


def test_the_page_loads_nothing_from_an_outside_host(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "specmon", "monitor", "--url", "http://127.0.0.1:9", "--web",
                             "--web-port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True, env={**os.environ, "XDG_STATE_HOME": str(tmp_path / "xdg")})
    try:
        deadline, page = time.monotonic() + 30, None
        while page is None:
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/", timeout=5, trust_env=False).text
            except httpx.TransportError:
                assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
                time.sleep(0.1)
        fetched = re.findall(r'(?:href|src)="([^"]+)"', page) + re.findall(r'url\("([^"]+)"\)', page)
        assert fetched and not [url for url in fetched if url.startswith(("http:", "https:", "//"))
                                and "127.0.0.1" not in url], fetched  # fmt: skip
        fonts = [url for url in fetched if "RobotoMono" in url]
        assert fonts, page
        for url in fonts:
            absolute = url if url.startswith("http") else f"http://127.0.0.1:{port}{url}"
            assert httpx.get(absolute, timeout=5, trust_env=False).status_code == 200, absolute
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


async def test_read_only_says_benchmarks_are_off_and_the_footer_shows_while_the_tab_is_not_focused():
    app = fixture_app(READY_LOG, read_only=True)
    app.set_reactive(type(app).app_focus, False)  # a browser tab that is watched, not clicked into
    async with app.run_test(size=(175, 52)) as pilot:
        assert await wait_for(pilot, lambda: "q Quit" in screen_text(app).splitlines()[-1]), screen_text(app)
        text = screen_text(app)
        assert "press b" not in text and "no benchmarks here" in text, text
