"""Every URL specmon takes or builds is checked in one place (`specmon.urls.checked_url`): a bad one (a port
out of 1..65535, a host that is no host, escapes, control characters, a length no server URL has) is one clear
line and exit 2 on the command line, and a failed read (never a traceback) where one comes from a state file or
a label. Nothing is sent to a URL that was refused."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specmon.urls import MAX_URL_CHARS, UrlRefused, base_url, checked_url
from tests.support.hostile_http import HostileServer, routes_of

BAD_URLS = {
    "port 99999": ("http://127.0.0.1:99999", "its port is not a number from 1 to 65535"),
    "port 0": ("http://127.0.0.1:0", "its port is not a number from 1 to 65535"),
    "an escaped port": ("http://127.0.0.1:3%0a0", "its port is not a number from 1 to 65535"),
    "a 70,000-character host": ("http://" + "a" * 70_000 + ":1", f"longer than {MAX_URL_CHARS} characters"),
    "an escaped host": ("http://gpu%0abox:30000", "its host is not a host name or an address"),
    "a newline": ("http://127.0.0.1:30000/\nX-Evil: 1", "a control character"),
    "a terminal escape": ("http://127.0.0.1:30000/\x1b[2J", "a control character"),
    "a space": ("http://gpu box:30000", "a space"),
    "an unclosed IPv6 bracket": ("http://[::1:30000", "its host is not an IPv6 address"),
    "not an IPv6 address": ("http://[::g]:30000", "its host is not an IPv6 address"),
    "ftp": ("ftp://127.0.0.1:21", "only http:// and https:// are asked"),
    "no host": ("http://:30000", "it names no host"),
    "non-ASCII": ("http://gpu-b\u00f6x:30000", "a non-ASCII character"),
}


@pytest.mark.parametrize("name", list(BAD_URLS))
def test_a_bad_url_is_refused_in_one_printable_line_that_says_why(name):
    url, why = BAD_URLS[name]
    with pytest.raises(UrlRefused) as refused:
        checked_url(url, "--url")
    message = str(refused.value)
    assert message.startswith("--url ") and why in message, message
    assert "\n" not in message and "\x1b" not in message and len(message) < 300, message
    with pytest.raises(UrlRefused):
        base_url(url)


@pytest.mark.parametrize("url", ["http://127.0.0.1:30000", "https://gpu-box:8443/prefix", "http://[::1]:1",
                                 "http://GPU_box.example.:65535", "http://10.0.0.5", "http://h/a?b=c"])
def test_a_good_url_passes_unchanged(url):
    assert checked_url(url) == url


def test_a_base_url_has_no_query_or_fragment():
    for url in ("http://127.0.0.1:30000/?x=1", "http://127.0.0.1:30000#top"):
        with pytest.raises(UrlRefused, match="no query or fragment"):
            base_url(url)


COMMANDS = {
    "check": ["check", "--url", "{url}"],
    "monitor --once": ["monitor", "--once", "--url", "{url}", "--window", "1"],
    "monitor (the app)": ["monitor", "--url", "{url}", "--headless", "--duration", "2"],
    "bench": ["bench", "--url", "{url}", "--requests", "1", "--warmup", "0", "--deadline", "10"],
    "fleet --prometheus": ["fleet", "--prometheus", "{url}", "--once"],
    "fleet --router": ["fleet", "--prometheus", "{server}", "--router", "{url}", "--once"],
}
COMMAND_URLS = ["port 99999", "a 70,000-character host", "an escaped port", "a newline"]


@pytest.mark.parametrize("bad", COMMAND_URLS)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_bad_url_on_the_command_line_is_one_line_and_exit_2(command, bad, tmp_path):
    url, why = BAD_URLS[bad]
    env = {"SPECMON_STATE_DIR": str(tmp_path / "state"), "XDG_STATE_HOME": str(tmp_path / "xdg"),
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    with HostileServer(routes_of()) as server:
        argv = [part.replace("{url}", url).replace("{server}", server.url) for part in COMMANDS[command]]
        done = subprocess.run([sys.executable, "-m", "specmon", *argv], capture_output=True, text=True, timeout=60,
                              env=env)
        asked = server.paths()
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert why in done.stderr and len(done.stderr) < 400, done.stderr
    assert asked == [], asked


def test_a_bad_url_from_a_state_file_or_a_label_is_a_failed_read_not_a_traceback():
    from specmon.fleet.drill import reachable_url
    from specmon.gpu.demo import DemoGpuSource

    source = DemoGpuSource("http://127.0.0.1:99999/_emulator/gpus", timeout_s=1.0)
    try:
        snapshot = source.read()
    finally:
        source.close()
    assert not snapshot.available and "its port is not a number from 1 to 65535" in snapshot.reason
    url, notes = reachable_url(["127.0.0.1:99999", "gpu box:1", "x" * 5000 + ":1", "[::1:5"], timeout_s=1.0)
    assert url is None and len(notes) == 4 and all("not contacted" in note for note in notes), notes
