"""`specmon monitor ... --web`: the same app in a browser through textual-serve, read-only (no switching, no
benchmarks, no files written), bound to 127.0.0.1 unless told otherwise. textual-serve starts one app process
per browser tab.

textual-serve itself takes a websocket from any page (any site open in the browser could read the screen and
type into the app) and starts an app process per connection without limit. So here every request must name
this server in its Host header (a DNS-rebinding page names its own domain), a websocket's Origin must be this
server's own page, at most `--web-sessions` apps run at once, and a terminal size is kept to `MAX_COLUMNS` x
`MAX_ROWS`.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import re
import shlex
import socket
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_WEB_PORT = 8765
DEFAULT_SESSIONS = 4
"""Browser tabs (app processes) served at once (`--web-sessions`); one more is answered 503."""
MAX_COLUMNS, MAX_ROWS = 500, 200
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def _host_name(host_header: str) -> str:
    """The host of a Host header without its port ("[::1]:8765" -> "::1")."""
    return (urlsplit(f"//{host_header}").hostname or "").lower()


def host_allowed(host_header: str | None, bind: str) -> bool:
    """Whether a request's Host names this server: the bound address, this machine's names, or an IP address
    (a DNS-rebinding page would name its own domain), and only loopback names when bound to loopback."""
    name = _host_name(host_header or "")
    if not name:
        return False
    try:
        bound_loopback = ipaddress.ip_address(bind).is_loopback
    except ValueError:
        bound_loopback = bind.lower() == "localhost"
    if bound_loopback:
        return name in LOOPBACK_NAMES
    if name in LOOPBACK_NAMES or name == bind.lower():
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return name in {socket.gethostname().lower(), socket.getfqdn().lower()}


def origin_allowed(origin: str | None, host_header: str | None) -> bool:
    """Whether a websocket comes from this server's own page: its Origin is http(s)://<the Host it asked>.
    A client that sends no Origin is no browser page (a page cannot leave it out)."""
    if origin is None:
        return True
    if not host_header:
        return False
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host_header.lower()


def terminal_size(width: object, height: object) -> tuple[int, int]:
    """A terminal size asked by a browser, kept within 1..MAX_COLUMNS x 1..MAX_ROWS."""

    def within(value: object, default: int, top: int) -> int:
        try:
            number = int(value)  # type: ignore[call-overload]
        except (TypeError, ValueError, OverflowError):
            return default
        return max(1, min(top, number))

    return within(width, 80, MAX_COLUMNS), within(height, 24, MAX_ROWS)


def app_argv(args: argparse.Namespace) -> list[str]:
    """The read-only monitor each browser tab runs: the same server, log and preset, no --web."""
    argv = [sys.executable, "-m", "specmon", "monitor", "--url", args.url, "--read-only"]
    if args.log:
        argv += ["--log", args.log]
    if args.preset:
        argv += ["--preset", args.preset]
    for directory in args.presets:
        argv += ["--presets", directory]
    return argv


def serve(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    """Serve the read-only app (`argv`, default the monitor's) until interrupted; 2 when textual-serve is not
    installed."""
    try:
        from textual_serve import server as serve_module
        from textual_serve.app_service import AppService
    except ImportError:
        print("specmon: --web needs textual-serve: pip install 'specmon[web]'", file=sys.stderr)
        return 2

    from aiohttp import web

    class ExecAppService(AppService):
        """Starts the app from an argv list (textual-serve would hand its command string to a shell), at a
        terminal size within bounds."""

        async def start(self, width: int, height: int) -> None:
            await super().start(*terminal_size(width, height))

        async def set_terminal_size(self, width: int, height: int) -> None:
            await super().set_terminal_size(*terminal_size(width, height))

        async def _open_app_process(self, width: int = 80, height: int = 24) -> asyncio.subprocess.Process:
            environment = self._build_environment(width=width, height=height)
            self._process = process = await asyncio.create_subprocess_exec(
                *shlex.split(self.command),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=environment,
            )
            self._stdin = process.stdin
            return process

    limit = max(1, getattr(args, "web_sessions", DEFAULT_SESSIONS))

    class GuardedServer(serve_module.Server):
        """textual-serve's server behind specmon's checks: Host, Origin, a cap on sessions."""

        sessions = 0

        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            app.middlewares.append(self._guard)
            return app

        @web.middleware
        async def _guard(self, request: web.Request, handler):
            host = request.headers.get("Host")
            if not host_allowed(host, args.bind):
                return web.Response(status=403, text="specmon: this server is not asked for by that name\n")
            if request.path == "/ws":
                if not origin_allowed(request.headers.get("Origin"), host):
                    return web.Response(status=403, text="specmon: a websocket from another site\n")
                if self.sessions >= limit:
                    return web.Response(status=503, text=f"specmon: {limit} sessions already open\n")
                self.sessions += 1
                try:
                    return await handler(request)
                finally:
                    self.sessions -= 1
            return await handler(request)

    # The server builds its app services by this module-level name, its only hook: mypy refuses assigning a class.
    serve_module.AppService = ExecAppService  # type: ignore[misc]
    command = shlex.join(argv or app_argv(args))
    what = "fleet" if argv else "monitor"
    with tempfile.TemporaryDirectory(prefix="specmon-web-") as templates:
        local_page(Path(serve_module.__file__).parent / "templates", Path(templates))
        server = GuardedServer(command, host=args.bind, port=args.web_port, title="specmon", templates_path=templates)
        print(f"specmon: serving the read-only {what} at http://{args.bind}:{args.web_port}", file=sys.stderr)
        server.serve()
    return 0


OUTSIDE_STYLESHEET = re.compile(r"<link\b[^>]*\bhref=\"https?://[^\"]*\"[^>]*>", re.IGNORECASE)
LOCAL_FONT = """<style>
      @font-face {
        font-family: "Roboto Mono";
        src: url("{{ config.static.url }}fonts/RobotoMono-VariableFont_wght.ttf") format("truetype");
        font-style: normal;
      }
      @font-face {
        font-family: "Roboto Mono";
        src: url("{{ config.static.url }}fonts/RobotoMono-Italic-VariableFont_wght.ttf") format("truetype");
        font-style: italic;
      }
    </style>"""


def local_page(source: Path, target: Path) -> Path:
    """textual-serve's page template with its web font served from textual-serve's own static folder instead of
    an outside host (an ops network blocks those: the page must load from this server alone)."""
    page = (source / "app_index.html").read_text(encoding="utf-8")
    page = OUTSIDE_STYLESHEET.sub(LOCAL_FONT, page, count=1)
    page = OUTSIDE_STYLESHEET.sub("", page)
    path = target / "app_index.html"
    path.write_text(page, encoding="utf-8")
    return path
