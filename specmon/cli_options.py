"""The options several of specmon's commands take, each defined once (specmon/cli.py gives them to the commands),
and the argparse type of a URL flag. Imports nothing beyond argparse, as specmon/cli.py."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from specmon.hinting_parser import ArgumentRefused


def url_type(what: str, scheme_required: bool = False) -> Callable[[str], str]:
    """An argparse type for a URL flag: `urls.base_url` (a user:password@ refused, never echoed)."""

    def parse(text: str) -> str:
        from specmon.urls import UrlRefused, base_url

        try:
            return base_url(text, what=what, scheme_required=scheme_required)
        except UrlRefused as exc:
            raise ArgumentRefused(str(exc)) from None  # one line, no usage: the refusal says it all

    return parse


class SharedOptions:
    """The options several commands take, each defined once here in a parent parser and given to each command
    with `parents=` (argparse hands every command the one same option). Options whose meaning differs per command
    (--url, --preset, --server, --timeout, --requests, --window, --concurrency,
    --draft-tokens) are the `_add_*` functions of specmon/cli.py."""

    def __init__(self) -> None:
        self.json = self._parent()
        self.json.add_argument("--json", action="store_true", help="print the result as JSON")
        self.presets = self._parent()
        self.presets.add_argument("--presets", metavar="DIR", action="append", default=[],
                                  help="extra preset directory (repeatable)")
        self.yes = self._parent()
        self.yes.add_argument("--yes", action="store_true", help="do not ask before stopping a server (stop: "
                              "also kills your own leftovers)")
        self.from_server = self._parent()
        self.from_server.add_argument("--from", dest="server", metavar="ID|PID",
                                      help="the server to replace (default: the one server specmon launched)")
        self.api_key_file = self._parent()
        self.api_key_file.add_argument("--api-key-file", metavar="PATH", help="read the API key from this file "
                                       "(default: $SPECMON_API_KEY)")
        self.launch = self._parent()  # what a command that launches a preset's server is told
        self.launch.add_argument("--speed", type=float, metavar="X",
                                 help="demo presets: the emulator's speed factor (2 = twice as fast; default 1)")
        self.launch.add_argument("--no-preflight", action="store_true",
                                 help="launch without the preflight (`specmon check PRESET`)")
        self.port = self._parent()
        self.port.add_argument("--port", type=int, metavar="N", help="this port instead of the preset's")
        self.results_dir = self._parent()
        self.results_dir.add_argument("--dir", help="results directory (default: the user state directory)")
        self.sglang_version = self._parent()
        self.sglang_version.add_argument("--sglang-version", metavar="X.Y.Z", help="without --preset: check "
                                         "against this version's shipped rules (default: the SGLang `python3` "
                                         "sees, else the newest shipped)")
        self.textfile = self._parent()
        self.textfile.add_argument("--textfile-dir", metavar="DIR", help="write specmon's figures to "
                                   "DIR/specmon.prom for node-exporter's textfile collector (default: "
                                   "$SPECMON_TEXTFILE_DIR; unset: not written)")
        self.production = self._parent()  # a benchmark from, or against, SGLang's request records
        self.production.add_argument("--prompts-from-traffic", metavar="PATH", help="sample the prompts from "
                                     "SGLang's request records (keeps production's class mix and output lengths)")
        self.production.add_argument("--keep-prompts", action="store_true", help="store production's prompts "
                                     "and outputs with the result (default: a hash of each prompt)")
        self.against = self._parent()  # each run's τ against production's, with bench and with a sweep
        self.against.add_argument("--against-traffic", metavar="PATH", help="flag a τ beyond the CIs of "
                                  "production's in these request records (bench: default --prompts-from-traffic's)")
        self.traffic = self._parent()  # production traffic in the app and in `monitor --once`
        self.traffic.add_argument("--traffic", metavar="PATH", action="append", default=[],
                                  help="SGLang's request records: an --export-metrics-to-file-dir directory or "
                                  "file, or a request log (repeatable; default: where a server specmon launched "
                                  "writes them, from its flags)")
        self.by = self._parent()
        self.by.add_argument("--by", metavar="KEY", help="class requests by this key of request_parameters "
                             "(dotted: nested)")
        self.categories = self._parent()  # prompt categories: traffic, monitor, demo, bench, sweep
        self.categories.add_argument("--categories", metavar="FILE", help="prompt categories by your rules (a TOML "
                                     "file of [[category]] rules; default: categories.toml in specmon's config "
                                     "directory when it exists, else none, and the heuristic (code, long, other) "
                                     "in a comparison with production)")
        self.prometheus = self._parent()  # the Prometheus that scrapes the servers: the fleet's, a sweep's load
        self.prometheus.add_argument("--prometheus", metavar="URL", type=url_type("the URL", scheme_required=True),
                                     help="the Prometheus to read, e.g. http://127.0.0.1:9090")
        self.prometheus.add_argument("--selector", default='job="sglang"', metavar="MATCHERS",
                                     help="which targets are SGLang servers (default 'job=\"sglang\"')")
        self.prometheus.add_argument("--server-label", default="instance", metavar="L",
                                     help="the label that names a server; a multi-node server's targets share it "
                                     "(default instance)")
        self.once = self._parent()
        self.once.add_argument("--once", action="store_true", help="print one snapshot and exit (no app)")
        self.web = self._parent()
        self.web.add_argument("--web", action="store_true",
                              help="serve the app, read-only, to a browser (textual-serve; one app per tab)")
        self.web.add_argument("--read-only", action="store_true",
                              help="no preset switching, no benchmarks, no files written (as --web serves)")
        web = self.web.add_argument_group("with --web")
        web.add_argument("--web-port", type=int, default=8765, metavar="N", help="the port (default 8765)")
        web.add_argument("--bind", default="127.0.0.1", metavar="HOST",
                         help="the address to listen on (default 127.0.0.1: this machine only)")
        web.add_argument("--web-sessions", type=int, default=4, metavar="N",
                         help="browser tabs served at once (default 4; one more is refused)")
        self.headless = self._parent()
        self.headless.add_argument("--headless", action="store_true", help="run without a terminal (for smoke tests)")
        headless = self.headless.add_argument_group("with --headless")
        headless.add_argument("--duration", type=float, default=20.0, metavar="S", help="seconds to run (default 20)")
        headless.add_argument("--screenshot", metavar="PATH.svg", help="save an SVG screenshot at the end")
        headless.add_argument("--screenshot-at", metavar="EVENT:PATH.svg", action="append", default=[],
                              help="an SVG screenshot when the server first reaches EVENT (capture, ready or "
                              "failed)")
        headless.add_argument("--exit-on", metavar="EVENTS", default="", help="exit at the first of these "
                              "comma-separated events (ready: 0, failed: 1)")

    @staticmethod
    def _parent() -> argparse.ArgumentParser:
        return argparse.ArgumentParser(add_help=False)
