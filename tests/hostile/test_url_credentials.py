"""A URL's `user:password@`, wherever specmon takes the URL from (a command-line flag, a state file, a stored
result, a Prometheus label, a URL a textfile label is made of): refused with a note that never holds the
password, and never sent anywhere (`specmon.urls`). Secrets come from files only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from specmon.ports import free_port
from tests.support.hostile_http import HostileServer, routes_of

PASSWORD = "hunter2-Pw.secret"
USERINFOS = [f"alice:{PASSWORD}", PASSWORD]  # user:password, and a token given as the user name


def run_specmon(*args: str, env: dict, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specmon", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture
def env(tmp_path) -> dict:
    out = {**os.environ, "SPECMON_STATE_DIR": str(tmp_path / "state"), "XDG_STATE_HOME": str(tmp_path / "xdg")}
    out.pop("SPECMON_API_KEY", None)
    out.pop("SPECMON_TEXTFILE_DIR", None)
    return out


COMMANDS = {
    "monitor --once": lambda url: ["monitor", "--once", "--url", url, "--window", "1"],
    "monitor (the app)": lambda url: ["monitor", "--url", url, "--headless", "--duration", "2"],
    "bench": lambda url: ["bench", "--url", url, "--requests", "1", "--warmup", "0", "--json"],
    "check": lambda url: ["check", "--url", url, "--json"],
    "fleet --prometheus": lambda url: ["fleet", "--prometheus", url, "--once", "--json"],
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_url_with_credentials_on_the_command_line_is_refused_and_never_sent(env, command):
    with HostileServer(routes_of()) as server:
        for userinfo in USERINFOS:
            url = f"http://{userinfo}@127.0.0.1:{server.port}"
            done = run_specmon(*COMMANDS[command](url), env=env)
            said = done.stdout + done.stderr
            assert done.returncode == 2 and "user:password@" in done.stderr, (userinfo, done.returncode, said)
            assert PASSWORD not in said, said
        assert server.requests == [], [(r.path, r.headers.get("authorization")) for r in server.requests]


def test_bench_with_credentials_in_its_url_writes_no_textfile_and_sends_nothing(env, tmp_path):
    textfile = tmp_path / "textfile"
    with HostileServer(routes_of()) as server:
        done = run_specmon("bench", "--url", f"http://alice:{PASSWORD}@127.0.0.1:{server.port}", "--requests", "1",
                           "--textfile-dir", str(textfile), env=env)
    assert done.returncode == 2 and server.requests == [], done.stderr
    assert not any(PASSWORD in p.read_text() for p in textfile.rglob("*") if p.is_file())


def test_a_textfile_label_is_never_made_of_a_url_s_credentials(tmp_path):
    """Whatever URL a figure comes with (a stored run's, written before URLs were checked), its `server` label
    is the host and port only: the textfile goes to Prometheus, and the password with it."""
    from specmon.textfile import FILE_NAME, bench_samples, export, server_label

    summary = {"decode_tok_s": {"median": 120.0}}
    warnings: list[str] = []
    for url in (f"http://alice:{PASSWORD}@gpu-1:30000", f"http://{PASSWORD}@gpu-1:30000/", "http://gpu-1:30000"):
        assert server_label(url) == "gpu-1:30000", url
        export(tmp_path, warnings.append, set_=bench_samples(url, "eagle3", summary, 1_800_000_000.0))
    text = (tmp_path / FILE_NAME).read_text()
    assert warnings == [] and 'server="gpu-1:30000"' in text and PASSWORD not in text, text


def test_state_files_and_stored_results_with_credentials_are_refused_and_never_shown(env, tmp_path):
    servers = tmp_path / "state" / "servers"
    servers.mkdir(parents=True, mode=0o700)
    port = free_port()
    record = {"id": "abc123", "preset": "p", "argv": ["python3", "-m", "sglang.launch_server"], "pid": 999999,
              "pgid": 999999, "create_time": 1.0, "url": f"http://alice:{PASSWORD}@127.0.0.1:{port}",
              "host": "127.0.0.1", "port": port, "log": str(tmp_path / "log"), "started_at": 1.0}
    (servers / "abc123.json").write_text(json.dumps(record))
    (servers / "abc123.json").chmod(0o600)
    results = tmp_path / "state" / "results"
    results.mkdir(mode=0o700)
    run = {"kind": "run", "run_id": "r1", "preset": "p", "url": f"http://{PASSWORD}@127.0.0.1:{port}",
           "started_at": 1_800_000_000.0, "settings": {}, "server": {}}
    (results / "r1.jsonl").write_text(json.dumps(run) + "\n")
    (results / "r1.jsonl").chmod(0o600)
    for argv in (["ps"], ["ps", "--json"], ["ps", "--prometheus-sd"], ["results"], ["results", "--json"],
                 ["stop", "abc123", "--yes"]):
        done = run_specmon(*argv, env=env)
        said = done.stdout + done.stderr
        assert PASSWORD not in said, (argv, said)
        if argv[0] != "stop":  # `stop` names no state file it ignores (it finds no server abc123)
            assert "user:password@" in done.stderr, (argv, said)  # said, not dropped in silence


def test_a_preset_host_with_credentials_is_refused_before_anything_starts(tmp_path):
    from tests.support.oncall import Oncall

    oncall = Oncall(tmp_path)
    (oncall.presets / "creds.toml").write_text(
        f'name = "creds"\nextends = "fast-a"\ndemo = true\n[server.args]\nhost = "alice:{PASSWORD}@127.0.0.1"\n')
    try:
        for argv in (("start", "creds", "--port", str(free_port()), "--wait", "--timeout", "30"),
                     ("presets", "--presets", str(oncall.presets)), ("ps", "--json")):
            done = oncall.run(*argv)
            assert PASSWORD not in done.stdout + done.stderr, (argv, done.stdout, done.stderr)
        assert oncall.records() == []  # nothing launched, nothing recorded
        assert "user:password@" in oncall.run("start", "creds", "--port", str(free_port())).stderr
    finally:
        oncall.cleanup()


@pytest.fixture(scope="module")
def prometheus_with_a_credentialed_target(tmp_path_factory):
    """A real Prometheus whose one `sglang` target is `alice:PASSWORD@127.0.0.1:PORT` (file_sd takes it as is:
    its `instance` label holds the password), PORT a server that records every request."""
    from tests.support.prometheus import Job, Prometheus

    server = HostileServer(routes_of()).start()
    target = f"alice:{PASSWORD}@127.0.0.1:{server.port}"
    prom = Prometheus(tmp_path_factory.mktemp("prom"), [Job("sglang", [target])])
    try:
        deadline = time.monotonic() + 60
        while not prom.query('up{job="sglang"}'):
            assert time.monotonic() < deadline, prom.log()[-2000:]
            time.sleep(0.2)
        yield prom, server, target
    finally:
        prom.stop()
        server.stop()


def test_a_target_label_with_credentials_is_never_asked(prometheus_with_a_credentialed_target, capsys):
    from specmon.cli import build_parser
    from specmon.fleet.cli import options_from
    from specmon.tui.cli import fleet_server_config

    prom, server, target = prometheus_with_a_credentialed_target
    args = build_parser().parse_args(["fleet", "--prometheus", prom.url, "--interval", "10", "--server", target])
    config = fleet_server_config(args, options_from(args))
    assert not isinstance(config, int), capsys.readouterr().err
    assert server.requests == [], [(r.path, r.headers.get("authorization")) for r in server.requests]
    notes = [line for line in capsys.readouterr().err.splitlines() if "not contacted" in line]
    assert len(notes) == 1 and "user:password@" in notes[0], notes
    assert PASSWORD not in notes[0].split(": ", 2)[-1], notes  # the note itself (its prefix is the name given)


def test_a_router_url_with_credentials_is_refused_and_never_sent(prometheus_with_a_credentialed_target, env):
    prom, server, _ = prometheus_with_a_credentialed_target
    before = len(server.requests)
    done = run_specmon("fleet", "--prometheus", prom.url, "--router", f"http://alice:{PASSWORD}@127.0.0.1:"
                       f"{server.port}", "--once", "--json", env=env)
    assert done.returncode == 2 and "user:password@" in done.stderr, done.stdout + done.stderr
    assert PASSWORD not in done.stdout + done.stderr
    assert server.requests[before:] == []


def test_the_one_gate_takes_plain_urls_and_addresses_only():
    from specmon.urls import UrlRefused, address, address_of, base_url, target_url, url_of

    assert base_url("localhost:30000/") == "http://127.0.0.1:30000"
    assert base_url("https://gpu-box:8443/prefix/") == "https://gpu-box:8443/prefix"
    assert base_url("http://[::1]:30000") == "http://[::1]:30000"
    assert address_of("http://gpu-1") == "gpu-1:80" and address_of("http://[::1]:9/") == "[::1]:9"
    assert url_of("::1", 30000) == "http://[::1]:30000" and target_url("10.0.0.1:30000") == "http://10.0.0.1:30000"
    for bad in (f"http://a:{PASSWORD}@h:1", f"http://{PASSWORD}@h:1", "http://h:1@evil:2", "ftp://h:1",
                "http://h :1", "http://h:1\n/x", "http://", "http://h:99999", "file:///etc/passwd", ""):
        with pytest.raises(UrlRefused) as refused:
            base_url(bad)
        assert PASSWORD not in str(refused.value), refused.value
    for bad in (f"alice:{PASSWORD}@h:1", "h:1/metrics", "http://h:1", "h:1?x=1", "h:1\n", "h", "h:0", "h:70000",
                "a b:1", "[zz]:1", ""):
        with pytest.raises(UrlRefused) as refused:
            address(bad)
        assert PASSWORD not in str(refused.value), refused.value
    with pytest.raises(UrlRefused):
        address_of("http://h:1/path")
