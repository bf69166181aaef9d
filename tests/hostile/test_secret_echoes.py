"""Secrets specmon reads from files (an API key, a bearer token, `user:password`): however an answer echoes
them (an Authorization or Cookie header in Prometheus', a proxy's or a server's error text, the bare token, the
base64 of basic auth), nothing specmon prints or stores holds them; a secret file that is a FIFO is refused at
once, and one its group or other users may read is warned of in one line, as ssh and kubectl do."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specmon.ports import free_port
from tests.support.hostile_http import Answer, HostileServer, routes_of

TOKEN = "tok-5ecret-Value_42"
USER, PASSWORD = "alice", "pa55-Word.secret"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()

ECHOES = {
    "python dict of the headers": lambda headers, secret: f"bad request, headers: {dict(headers)}",
    "Go map of the headers": lambda headers, secret: "bad request: map[" + " ".join(
        f"{name}:[{value}]" for name, value in headers.items()) + "]",
    "a header line": lambda headers, secret: f"upstream said: Authorization: {headers.get('Authorization')}\nmore",
    "the credential as sent": lambda headers, secret: f"unknown {headers.get('Authorization', '').split(' ', 1)[-1]}",
    "the secret itself": lambda headers, secret: f"credential {secret} expired for {USER}",
    "a URL with userinfo": lambda headers, secret: f"could not reach http://{USER}:{secret}@10.0.0.9:9090/api",
}


@pytest.fixture(autouse=True)
def own_state(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMON_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("SPECMON_API_KEY", raising=False)


def secret_file(path, text: str, mode: int = 0o600):
    path.write_text(text)
    path.chmod(mode)
    return path


class EchoingPrometheus:
    """Answers every API call with a Prometheus error whose text echoes the request's credentials."""

    def __init__(self, echo, secret: str) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                headers = {name: value for name, value in self.headers.items()}
                headers["Cookie"] = "session=c00kie-value"  # as a proxy in front of it adds and echoes
                outer.seen.append(headers)
                body = json.dumps({"status": "error", "errorType": "bad_data", "error": echo(headers, secret)}).encode()
                self.send_response(400)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.seen: list[dict] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("echo", list(ECHOES))
@pytest.mark.parametrize("auth", ["bearer", "basic"])
def test_prometheus_echoing_the_credentials_is_said_without_them(tmp_path, capsys, echo, auth):
    from specmon.cli import main

    secret = TOKEN if auth == "bearer" else PASSWORD
    prometheus = EchoingPrometheus(ECHOES[echo], secret)
    try:
        if auth == "bearer":
            flag = ["--bearer-token-file", str(secret_file(tmp_path / "token", TOKEN + "\n"))]
        else:
            flag = ["--basic-auth-file", str(secret_file(tmp_path / "basic", f"{USER}:{PASSWORD}\n"))]
        code = main(["fleet", "--prometheus", prometheus.url, "--once", "--json", *flag])
    finally:
        prometheus.stop()
    captured = capsys.readouterr()
    said = captured.out + captured.err
    assert code == 2 and "Prometheus refused" in captured.err, said
    sent = prometheus.seen[0]["Authorization"]
    assert sent in (f"Bearer {TOKEN}", f"Basic {BASIC}")  # it was sent, and echoed back
    for hidden in (secret, BASIC, "session=c00kie-value"):
        assert hidden not in said, (hidden, said)


def test_a_server_echoing_the_api_key_is_never_printed_nor_stored(tmp_path, capsys):
    """`check` prints the failed generation's error; `bench` stores each request's error with the run."""
    from specmon.cli import main

    echoed = {"error": f"invalid request: Authorization: Bearer {TOKEN} (key {TOKEN})"}
    key_file = secret_file(tmp_path / "key", TOKEN)
    with HostileServer(routes_of(generate=Answer.json(echoed, status=400))) as server:
        assert main(["check", "--url", server.url, "--api-key-file", str(key_file)]) != 0
        assert main(["bench", "--url", server.url, "--api-key-file", str(key_file), "--requests", "1",
                     "--warmup", "0", "--json"]) != 0
    captured = capsys.readouterr()
    assert "invalid request" in captured.out + captured.err  # the error was said
    assert any(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in server.requests)
    assert TOKEN not in captured.out + captured.err
    stored = [p for p in (tmp_path / "state").rglob("*") if p.is_file()]
    assert stored and not any(TOKEN in p.read_text(errors="replace") for p in stored), stored


def test_the_redaction_hides_every_form_a_secret_travels_in():
    from specmon.redact import HIDDEN, redacted_text, remember_secret

    remember_secret("s3cr3t/Tok+en")
    remember_secret("pw:with:colons", user="bob")
    pair = base64.b64encode(b"bob:pw:with:colons").decode()
    for text in ("s3cr3t/Tok+en", "s3cr3t%2FTok%2Ben", f"Basic {pair}", "pw:with:colons", "bob%3Apw%3Awith%3Acolons",
                 '{"Authorization": "Digest username=x, response=abc"}', "proxy-authorization=Negotiate YII",
                 "Set-Cookie: id=a3fWa; Secure", "https://u:p@host/x", "Bearer eyJhbGciOi.J9"):
        out = redacted_text(f"error: {text} (end)")
        assert HIDDEN in out and not any(part in out for part in ("s3cr3t", "pw:with", "abc", "YII", "a3fWa",
                                                                   "u:p@", "eyJhbGciOi", pair)), (text, out)
    assert redacted_text("the bearer-token file holds no token; Basic auth") == (
        "the bearer-token file holds no token; Basic auth")  # words about credentials are not credentials


def run_specmon(*args: str, env: dict, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specmon", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


SECRET_FLAGS = {
    "bearer-token": ("fleet", "--bearer-token-file"),
    "basic-auth": ("fleet", "--basic-auth-file"),
    "CA": ("fleet", "--ca-file"),
    "check's API key": ("check", "--api-key-file"),
    "bench's API key": ("bench", "--api-key-file"),
}


def secret_argv(which: str, path: str, url: str) -> list[str]:
    command, flag = SECRET_FLAGS[which]
    if command == "fleet":
        return ["fleet", "--prometheus", url, "--once", flag, path]
    return [command, "--url", url, flag, path, *(("--requests", "1") if command == "bench" else ())]


@pytest.mark.parametrize("which", list(SECRET_FLAGS))
def test_a_secret_or_ca_file_that_is_a_fifo_is_refused_at_once(tmp_path, which):
    """Nothing writes to the FIFO: a reader that opens it waiting for a writer blocks forever (the timeout)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    env = {**os.environ, "SPECMON_STATE_DIR": str(tmp_path / "state")}
    env.pop("SPECMON_API_KEY", None)
    done = run_specmon(*secret_argv(which, str(fifo), f"http://127.0.0.1:{free_port()}"), env=env, timeout=60)
    assert done.returncode in (1, 2) and "FIFO" in done.stderr, (done.returncode, done.stdout, done.stderr)
    assert len([line for line in done.stderr.splitlines() if "FIFO" in line]) == 1, done.stderr


@pytest.mark.parametrize("which", [w for w in SECRET_FLAGS if w != "CA"])
def test_a_secret_file_others_may_read_is_warned_of_in_one_line(tmp_path, which):
    env = {**os.environ, "SPECMON_STATE_DIR": str(tmp_path / "state")}
    env.pop("SPECMON_API_KEY", None)
    text = f"{USER}:{PASSWORD}\n" if which == "basic-auth" else TOKEN + "\n"
    url = f"http://127.0.0.1:{free_port()}"  # nothing answers: the warning comes before anything is asked
    for mode, who in ((0o644, "other users"), (0o640, "its group"), (0o604, "other users"), (0o600, None)):
        path = secret_file(tmp_path / f"secret-{mode:o}", text, mode)
        done = run_specmon(*secret_argv(which, str(path), url), env=env)
        warnings = [line for line in done.stderr.splitlines() if "chmod 600" in line]
        if who is None:
            assert warnings == [], done.stderr
        else:
            assert len(warnings) == 1 and str(path) in warnings[0] and f"read by {who}" in warnings[0], done.stderr
            assert f"mode 0{mode:o}" in warnings[0], warnings
        assert TOKEN not in done.stdout + done.stderr and PASSWORD not in done.stdout + done.stderr
