"""`specmon monitor ... --web`: the same app in a browser through textual-serve, read-only (no switching, no
benchmarks), bound to 127.0.0.1 unless told otherwise. textual-serve starts one app process per browser tab."""

from __future__ import annotations

import argparse
import asyncio
import re
import shlex
import sys
import tempfile
from pathlib import Path

DEFAULT_WEB_PORT = 8765


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

    class ExecAppService(AppService):
        """Starts the app from an argv list (textual-serve would hand its command string to a shell)."""

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

    serve_module.AppService = ExecAppService  # the server builds its app services by this name
    command = shlex.join(argv or app_argv(args))
    what = "fleet" if argv else "monitor"
    with tempfile.TemporaryDirectory(prefix="specmon-web-") as templates:
        local_page(Path(serve_module.__file__).parent / "templates", Path(templates))
        server = serve_module.Server(command, host=args.bind, port=args.web_port, title="specmon",
                                     templates_path=templates)
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
