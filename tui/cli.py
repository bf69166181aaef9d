"""specmon's command line: subcommands whose handlers are imported only when run.

`specmon --help` must answer fast, so this module imports nothing beyond argparse; each handler module
is imported when its subcommand runs, and only the app's handlers import Textual.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

Handler = str  # "package.module:function", imported lazily


def _add_log_summary(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "log-summary",
        help="summarise an SGLang startup log: phases, captures, memory, time to ready, errors",
        description="Read an SGLang server log and summarise its startup: the phase timeline, graph "
        "captures, memory after each step, time to ready, and a classified error with a hint.",
    )
    p.add_argument("path", help="the log file, or - for standard input")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--follow", action="store_true", help="keep reading as the file grows, until ready or failure"
    )
    p.set_defaults(handler="specmon.tui.logs.cli:run_log_summary")


def _add_monitor(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "monitor",
        help="attach the app to a running SGLang server",
        description="Attach to an SGLang server anyone started: poll its HTTP API and, with --log, "
        "follow its log from the start.",
    )
    p.add_argument("--url", required=True, help="the server's base URL, e.g. http://127.0.0.1:30000")
    p.add_argument("--log", help="the server's log file (followed from its start)")
    p.add_argument("--preset", help="the preset the server was launched with (shows asked vs effective settings)")
    p.add_argument("--presets", metavar="DIR", action="append", default=[], help="extra preset directory")
    _add_headless(p)
    p.set_defaults(handler="specmon.tui.app.cli:run_monitor")


def _add_headless(p: argparse.ArgumentParser) -> None:
    p.add_argument("--headless", action="store_true", help="run without a terminal (for smoke tests)")
    p.add_argument("--duration", type=float, default=20.0, help="with --headless: seconds to run")
    p.add_argument("--screenshot", metavar="PATH.svg", help="with --headless: save an SVG screenshot at the end")
    p.add_argument(
        "--screenshot-at",
        metavar="EVENT:PATH.svg",
        action="append",
        default=[],
        help="with --headless: an SVG screenshot when the server first reaches EVENT (capture, ready or failed)",
    )
    p.add_argument(
        "--exit-on",
        metavar="EVENTS",
        default="",
        help="with --headless: exit at the first of these comma-separated events (ready: 0, failed: 1)",
    )


def _add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="run the app against the built-in SGLang emulator",
        description="Launch the SGLang emulator with a demo preset as a child process and open the app on it.",
    )
    p.add_argument("--preset", default=None, help="the demo preset to launch (default: the first demo preset)")
    p.add_argument("--speed", type=float, default=1.0, help="emulator speed factor (2 = twice as fast)")
    p.add_argument("--presets", metavar="DIR", action="append", default=[], help="extra preset directory")
    _add_headless(p)
    p.set_defaults(handler="specmon.tui.app.cli:run_demo")


def _add_presets(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "presets",
        help="list presets with their resolved SGLang command lines",
        description="List every preset (built in, user config directory, --presets DIR) with its "
        "description and the SGLang command line it resolves to.",
    )
    p.add_argument("--presets", metavar="DIR", action="append", default=[], help="extra preset directory")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(handler="specmon.tui.launch.cli:run_presets")


def _add_emulate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "emulate",
        help="run the SGLang emulator with SGLang's launch flags",
        description="Start the SGLang emulator exactly as SGLang would be started. Every argument after "
        "'emulate' is an SGLang launch flag (e.g. --model-path M --port 30000).",
        add_help=False,
    )
    p.add_argument("sglang_args", nargs=argparse.REMAINDER)
    p.set_defaults(handler="specmon.tui.emulator.cli:run_emulate")

    def _all_args_are_sglangs(args=None, namespace=None):
        # REMAINDER does not take a leading `--flag`; every argument belongs to the SGLang parser.
        namespace = namespace or argparse.Namespace()
        namespace.sglang_args = list(args or [])
        namespace.handler = "specmon.tui.emulator.cli:run_emulate"
        return namespace, []

    p.parse_known_args = _all_args_are_sglangs


def _add_gpus(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "gpus",
        help="read per-GPU memory, utilization and processes from NVML",
        description="One NVML reading of every GPU (memory, utilization, power, clocks, throttling, "
        "processes), or one every SECONDS with --watch.",
    )
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.add_argument("--watch", type=float, metavar="SECONDS", help="print a reading every SECONDS")
    p.set_defaults(handler="specmon.tui.gpu.cli:run_gpus")


def _add_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark decode tok/s and acceptance length of a running server",
        description="Stream prompts to an SGLang server's /generate and report decode tok/s, TTFT, ITL and "
        "acceptance length. The API key comes from SPECMON_API_KEY or --api-key-file.",
    )
    p.add_argument("--url", required=True, help="the server's base URL, e.g. http://127.0.0.1:30000")
    p.add_argument("--preset", help="label the run with this preset (and use its [bench] settings)")
    p.add_argument("--requests", type=int, help="measured requests (default: the preset's, or 20)")
    p.add_argument("--max-new-tokens", type=int, help="tokens per request (default: the preset's, or 256)")
    p.add_argument("--concurrency", type=int, help="concurrent streams (default 1)")
    p.add_argument("--warmup", type=int, help="warmup requests, not counted (default 2)")
    p.add_argument("--prompts", help="builtin:chat or a JSONL file of {\"prompt\": ...}")
    p.add_argument(
        "--natural-eos", action="store_true", help="let requests stop at EOS (default: ignore_eos, fixed length)"
    )
    p.add_argument(
        "--stall-timeout", type=float, default=60.0, metavar="S",
        help="a request that gets nothing from the server for S seconds fails (default 60)",
    )
    p.add_argument(
        "--deadline", type=float, default=3600.0, metavar="S",
        help="stop the run after S seconds, keeping what was measured (default 3600)",
    )
    p.add_argument("--api-key-file", metavar="PATH", help="read the API key from this file")
    p.add_argument("--presets", metavar="DIR", action="append", default=[], help="extra preset directory")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(handler="specmon.tui.bench.cli:run_bench")


def _add_results(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "results",
        help="list, compare and export past benchmark runs",
        description="List and compare benchmark runs saved in the state directory; export CSV, JSON or markdown.",
    )
    p.add_argument("runs", nargs="*", help="run ids to compare (default: all)")
    p.add_argument("--format", choices=["table", "csv", "json", "markdown"], default="table")
    p.add_argument("--dir", help="results directory (default: the user state directory)")
    p.add_argument("--baseline", metavar="PRESET", help="speedups against this preset (default: the latest run "
                   "without speculative decoding)")
    p.set_defaults(handler="specmon.tui.bench.cli:run_results")


def _add_check(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="a quick sanity check of a running server: health, settings, one generation",
        description="Check a running server: /health, its effective speculative settings, and one short "
        "generation with its acceptance length. Exits non-zero when something is wrong.",
    )
    p.add_argument("--url", required=True, help="the server's base URL")
    p.add_argument("--preset", help="the preset the server was launched with: compare what it asks with what runs")
    p.add_argument("--presets", metavar="DIR", action="append", default=[], help="extra preset directory")
    p.add_argument("--api-key-file", metavar="PATH", help="read the API key from this file")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(handler="specmon.tui.serving.cli:run_check")


_COMMANDS: Sequence[Callable[[argparse._SubParsersAction], None]] = (
    _add_demo,
    _add_monitor,
    _add_log_summary,
    _add_bench,
    _add_gpus,
    _add_check,
    _add_presets,
    _add_results,
    _add_emulate,
)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="specmon",
        description="A terminal monitor for live speculative serving (SGLang with EAGLE-3 and friends).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in _COMMANDS:
        add(sub)
    return parser


def _resolve(handler: Handler) -> Callable[[argparse.Namespace], int]:
    module_name, func_name = handler.split(":")
    return getattr(importlib.import_module(module_name), func_name)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `specmon` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(_resolve(args.handler)(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
