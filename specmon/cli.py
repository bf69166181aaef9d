"""specmon's command line: subcommands whose handlers are imported only when run.

`specmon --help` must answer fast, so this module imports nothing beyond argparse; each handler module
is imported when its subcommand runs, and only the app's handlers import Textual.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

from specmon import exits
from specmon.cli_options import SharedOptions as _Shared
from specmon.cli_options import url_type as _url
from specmon.hinting_parser import HintingParser, PrintVersion

Handler = str  # "package.module:function", imported lazily


def _group(p: argparse.ArgumentParser, title: str, *shared: str, description: str | None = None):
    """A titled group of `p`'s options ("with --once": those that only apply with another), holding also the
    options named in `shared` that `p` got from a parent."""
    group = p.add_argument_group(title, description)
    _move(p, group, *shared)
    return group


def _move(p: argparse.ArgumentParser, group, *shared: str) -> None:
    """List the options `shared` (from a parent) in `p`'s help under `group`: each keeps its one definition, only
    where `p`'s help shows it changes."""
    for flag in shared:
        action = p._option_string_actions[flag]
        for other in p._action_groups:
            if action in other._group_actions:
                other._group_actions.remove(action)
        group._group_actions.append(action)


def _add_url(p, help: str, required: bool = False) -> None:
    p.add_argument("--url", required=required, type=_url("the URL"), help=help)


def _add_preset(p, help: str) -> None:
    p.add_argument("--preset", metavar="NAME", help=help)


def _add_server(p, metavar: str, help: str) -> None:
    p.add_argument("--server", metavar=metavar, help=help)


def _add_timeout(p, default: float, help: str) -> None:
    p.add_argument("--timeout", type=float, default=default, metavar="S", help=help)


def _add_requests(p, help: str, default: int | None = None) -> None:
    p.add_argument("--requests", type=int, default=default, metavar="N", help=help)


def _add_concurrency(p, help: str, type=int, metavar: str = "N") -> None:
    p.add_argument("--concurrency", type=type, metavar=metavar, help=help)


def _add_draft_tokens(p, help: str) -> None:
    p.add_argument("--draft-tokens", metavar="N,N,...", help=help)


def _add_window(p, default: float, help: str) -> None:
    p.add_argument("--window", type=float, default=default, metavar="S", help=help)


def _add_log_summary(sub: argparse._SubParsersAction, shared: _Shared) -> None:
    p = sub.add_parser(
        "log-summary",
        parents=[shared.json],
        help="summarise an SGLang startup log: phases, captures, memory, time to ready, errors",
        description="Read an SGLang server log and summarise its startup: the phase timeline, graph "
        "captures, memory after each step, time to ready, and a classified error with a hint.",
    )
    p.add_argument("path", help="the log file, or - for standard input")
    p.add_argument(
        "--follow", action="store_true", help="keep reading as the file grows, until ready or failure"
    )
    p.set_defaults(handler="specmon.logs.cli:run_log_summary")


def _add_monitor(sub: argparse._SubParsersAction, shared: _Shared) -> None:
    p = sub.add_parser(
        "monitor",
        parents=[shared.presets, shared.once, shared.json, shared.traffic, shared.by, shared.categories, shared.web,
                 shared.headless],
        help="attach the app to a running SGLang server",
        description="Attach to an SGLang server anyone started: poll its HTTP API and, with --log, "
        "follow its log from the start.",
    )
    _add_url(p, "the server's base URL, e.g. http://127.0.0.1:30000 (default: the running server specmon "
             "launched; asks which when there are several; one it did not launch is attached to only when named "
             "with --server or picked)")
    _add_server(p, "ID|PID", "attach to this server from `specmon ps`")
    p.add_argument("--log", help="the server's log file (followed from its start)")
    _add_preset(p, "the preset the server was launched with (shows asked vs effective settings)")
    once = _group(p, "with --once", "--json")
    _add_window(once, 10.0, "seconds to scrape /metrics over (default 10)")
    p.set_defaults(handler="specmon.tui.cli:run_monitor")


def _add_demo(sub: argparse._SubParsersAction, shared: _Shared) -> None:
    p = sub.add_parser(
        "demo",
        parents=[shared.presets, shared.launch, shared.by, shared.categories, shared.headless],
        help="run the app against the built-in SGLang emulator",
        description="Launch the SGLang emulator with a demo preset as a child process and open the app on it.",
    )
    _add_preset(p, "the demo preset to launch (default: the first demo preset)")
    p.set_defaults(handler="specmon.tui.cli:run_demo")


def _add_presets(sub: argparse._SubParsersAction, shared: _Shared) -> None:
    p = sub.add_parser(
        "presets",
        parents=[shared.presets, shared.json],
        help="list presets with their resolved SGLang command lines",
        description="List every preset (built in, user config directory, --presets DIR) with its "
        "description and the SGLang command line it resolves to.",
    )
    p.set_defaults(handler="specmon.launch.cli:run_presets")


def _add_emulate(sub: argparse._SubParsersAction, shared: _Shared) -> None:
    p = sub.add_parser(
        "emulate",
        help="run the SGLang emulator with SGLang's launch flags",
        description="Start the SGLang emulator exactly as SGLang would be started. Every argument after "
        "'emulate' is an SGLang launch flag (e.g. --model-path M --port 30000).",
        add_help=False,
    )
    p.add_argument("sglang_args", nargs=argparse.REMAINDER)
    p.set_defaults(handler="specmon.emulator.cli:run_emulate")

    def _all_args_are_sglangs(args=None, namespace=None):
        # REMAINDER does not take a leading `--flag`; every argument belongs to the SGLang parser.
        namespace = namespace or argparse.Namespace()
        namespace.sglang_args = list(args or [])
        namespace.handler = "specmon.emulator.cli:run_emulate"
        return namespace, []

    p.parse_known_args = _all_args_are_sglangs


def _add_gpus(sub: argparse._SubParsersAction, shared: _Shared) -> None:
    p = sub.add_parser(
        "gpus",
        parents=[shared.json],
        help="read per-GPU memory, utilization and processes from NVML",
        description="One NVML reading of every GPU (memory, utilization, power, clocks, throttling, "
        "processes), or one every SECONDS with --watch.",
    )
    p.add_argument("--watch", type=float, metavar="SECONDS", help="print a reading every SECONDS")
    p.set_defaults(handler="specmon.gpu.cli:run_gpus")


def _add_bench(sub: argparse._SubParsersAction, shared: _Shared) -> None:
    p = sub.add_parser(
        "bench",
        parents=[shared.api_key_file, shared.presets, shared.json, shared.textfile, shared.production, shared.against,
                 shared.categories],
        help="benchmark decode tok/s and acceptance length of a running server",
        description="Stream prompts to an SGLang server's /generate and report decode tok/s, TTFT, ITL and "
        "acceptance length. The API key comes from SPECMON_API_KEY or --api-key-file.",
    )
    _add_url(p, "the server's base URL, e.g. http://127.0.0.1:30000", required=True)
    _add_preset(p, "label the run with this preset (and use its [bench] settings)")
    _add_requests(p, "measured requests (default: the preset's, or 20)")
    p.add_argument("--max-new-tokens", type=int, help="tokens per request (default: the preset's, or 256)")
    _add_concurrency(p, "concurrent streams (default 1)")
    p.add_argument("--warmup", type=int, help="warmup requests, not counted (default 2)")
    p.add_argument("--prompts", help="builtin:chat or a JSONL file of {\"prompt\": ...}")
    p.add_argument("--natural-eos", action="store_true",
                   help="let requests stop at EOS (default: ignore_eos, fixed length)")
    p.add_argument("--stall-timeout", type=float, default=60.0, metavar="S",
                   help="a request that gets nothing from the server for S seconds fails (default 60)")
    p.add_argument("--deadline", type=float, default=3600.0, metavar="S",
                   help="stop the run after S seconds, keeping what was measured (default 3600)")
    p.set_defaults(handler="specmon.traffic.bench:run_bench")


def _add_results(sub: argparse._SubParsersAction, shared: _Shared) -> None:
    p = sub.add_parser(
        "results",
        parents=[shared.results_dir, shared.json],
        help="list, compare and export past benchmark runs",
        description="List and compare benchmark runs saved in the state directory; export CSV, JSON or markdown "
        "(--json is --format json).",
    )
    p.add_argument("runs", nargs="*", help="run ids to compare (default: all)")
    p.add_argument("--format", choices=["table", "csv", "json", "markdown"], default="table")
    p.add_argument("--baseline", metavar="PRESET", help="speedups against runs of this preset (default: runs "
                   "without speculation): each run against the one most like it (same model, then server, then "
                   "settings) that started last before it, else first after it")
    p.set_defaults(handler="specmon.bench.cli:run_results")


def _add_predict(sub: argparse._SubParsersAction, shared: _Shared) -> None:
    p = sub.add_parser(
        "predict",
        parents=[shared.results_dir, shared.json],
        help="predict the acceptance length of shorter draft chains from a stored run",
        description="Replay a stored chain-drafting run (topk 1) over its per-step trace to predict the "
        "acceptance length of shorter chains, each with its bootstrap 95% CI (the histogram formula where a "
        "request has no trace). SGLang's greedy outputs change with the chain length, so no such prediction "
        "is exact.",
    )
    p.add_argument("run_id", metavar="RUN_ID", help="the stored run (a unique prefix of its id)")
    _add_draft_tokens(p, "the draft-token counts to predict, e.g. 10,5 (default: every count from 2 to the run's)")
    p.set_defaults(handler="specmon.bench.cli:run_predict")


def _add_check(sub: argparse._SubParsersAction, shared: _Shared) -> None:
    p = sub.add_parser(
        "check",
        parents=[shared.presets, shared.port, shared.api_key_file, shared.json],
        help="preflight a preset (no server needed), or sanity-check a running server with --url",
        description="`check PRESET`: the preflight that runs before every launch: which SGLang the launcher "
        "runs, its flags and speculative rules, the draft checkpoint, the port and the GPUs; exit 1 on an "
        "error. `check --url URL`: a running server's /health, effective speculative settings and one short "
        "generation. Give exactly one of PRESET and --url.",
    )
    p.add_argument("preset_name", nargs="?", metavar="PRESET", help="the preset to preflight")
    _group(p, "with PRESET", "--port")
    with_url = p.add_argument_group("with --url")
    _add_url(with_url, "a running server's base URL (instead of PRESET)")
    _add_preset(with_url, "the preset the server was launched with (asked vs effective)")
    _move(p, with_url, "--api-key-file")
    p.set_defaults(handler="specmon.serving.cli:run_check")


def _add_doctor(sub: argparse._SubParsersAction, shared: _Shared) -> None:
    p = sub.add_parser(
        "doctor",
        parents=[shared.presets, shared.sglang_version, shared.json],
        help="check an EAGLE-3 draft checkpoint against what an SGLang version loads",
        description="Read a draft checkpoint without torch: config.json (architectures, hidden and vocab sizes "
        "against the target's, draft_vocab_size), d2t/t2d, every safetensors header and the index, and the key "
        "names against that SGLang version's draft loader: the keys it would drop and the parameters left "
        "unloaded. Exit 1 on an error.",
    )
    p.add_argument("draft", help="the draft checkpoint folder")
    p.add_argument("--target", metavar="PATH", help="the target model folder (hidden size, vocabulary)")
    _add_preset(p, "use the SGLang this preset's launcher runs (and its model path as target)")
    p.set_defaults(handler="specmon.preflight.cli:run_doctor")


def _add_fix_draft_keys(sub: argparse._SubParsersAction, shared: _Shared) -> None:
    p = sub.add_parser(
        "fix-draft-keys",
        parents=[shared.presets, shared.sglang_version],
        help="write a copy of a draft checkpoint with its layer keys renamed (midlayer <-> layers.0) and a "
        "speculators config.json made SGLang's",
        description="Copy SRC to DST (which must not exist) with the safetensors keys `layers.0.*` renamed to "
        "`midlayer.*` (or back with --to layers.0), without torch; SRC is never written. The copy is then "
        "checked by the doctor against the SGLang that will load it (--preset's, else the one `python3` sees). A "
        "config.json written the speculators library's way (Eagle3Speculator) is rewritten as SGLang reads it.",
    )
    p.add_argument("src", help="the draft checkpoint folder")
    p.add_argument("dst", help="the new folder")
    p.add_argument("--to", choices=["midlayer", "layers.0"], default="midlayer",
                   help="the layout to write (default midlayer: every SGLang version loads it)")
    _add_preset(p, "check the copy against the SGLang this preset's launcher runs (and its target)")
    p.set_defaults(handler="specmon.preflight.cli:run_fix_draft_keys")


def _add_start(sub: argparse._SubParsersAction, shared: _Shared) -> None:
    p = sub.add_parser(
        "start",
        parents=[shared.presets, shared.port, shared.launch, shared.json, shared.textfile],
        help="launch a preset's server detached: it outlives specmon and the SSH session",
        description="Preflight, then launch the preset's server in its own session and process group, with a "
        "private log and state file in the state directory. Exit 0 started (or ready with --wait), 1 failed.",
    )
    p.add_argument("preset", help="the preset to launch (see `specmon presets`)")
    p.add_argument("--wait", action="store_true", help="wait until the server is ready or has failed")
    _add_timeout(p.add_argument_group("with --wait"), 1800.0, "give up after S seconds (default 1800)")
    p.set_defaults(handler="specmon.oncall.cli:run_start")


def _add_ps(sub: argparse._SubParsersAction, shared: _Shared) -> None:
    p = sub.add_parser(
        "ps",
        parents=[shared.json],
        help="servers specmon launched and other SGLang servers on this host",
        description="List the servers specmon launched (alive or dead, checked against live pids and start "
        "times) and the other SGLang servers on this host, with URL, log and GPU memory.",
    )
    p.add_argument("--alive", action="store_true", help="only the servers running now")
    p.add_argument("--prune", action="store_true", help="remove the records of servers that are gone")
    p.add_argument("--prometheus-sd", action="store_true",
                   help="print Prometheus file_sd JSON for the live servers specmon launched (server, preset, role)")
    p.set_defaults(handler="specmon.ps:run_ps")


def _add_stop(sub: argparse._SubParsersAction, shared: _Shared) -> None:
    p = sub.add_parser(
        "stop",
        parents=[shared.yes, shared.json, shared.textfile],
        help="stop a server: SIGTERM, SIGKILL after a timeout, then wait until its GPUs and port are free",
        description="Stop a server (by id or pid from `specmon ps`; by default the one server specmon launched: "
        "one it did not launch is stopped only when named). Asks "
        "first unless --yes. Names leftover processes and offers to kill them.",
    )
    p.add_argument("server", nargs="?", help="the server's id or pid (default: the one server specmon launched)")
    _add_timeout(p, 30.0, "seconds between SIGTERM and SIGKILL (default 30)")
    p.set_defaults(handler="specmon.oncall.cli:run_stop")


def _add_switch(sub: argparse._SubParsersAction, shared: _Shared) -> None:
    p = sub.add_parser(
        "switch",
        parents=[shared.from_server, shared.presets, shared.launch, shared.yes, shared.json],
        help="replace the running server with another preset, then compare a sanity benchmark with what served",
        description="Preflight PRESET (a failure leaves the running server serving), stop the running server, "
        "wait until GPUs and port are free, start PRESET on the same port, follow it to ready, run a quick "
        "sanity benchmark and compare it with what served before (its last stored result, else its live "
        "figures). Exit 0 ready without alerts, 1 failed or alerts.",
    )
    p.add_argument("preset", help="the preset to switch to")
    _add_requests(p, "requests of the sanity benchmark (default 4)", default=4)
    _add_timeout(p, 1800.0, "seconds to wait for ready (default 1800)")
    p.set_defaults(handler="specmon.oncall.cli:run_switch")


def _add_sweep(sub: argparse._SubParsersAction, shared: _Shared) -> None:
    p = sub.add_parser(
        "sweep",
        parents=[shared.presets, shared.from_server, shared.yes, shared.launch, shared.json, shared.textfile,
                 shared.against, shared.categories, shared.prometheus],
        help="benchmark presets unattended (baseline first and last) and recommend one; resumable",
        description="Switch to each preset in turn (the baseline, the one without speculation, first and last to "
        "measure drift), wait for ready and benchmark it with the same prompts and settings; every request is "
        "saved as it finishes. Reports tok/s with its CI, acceptance, speedup against the baseline, startup "
        "against measuring time, the drift, and a recommendation. Ctrl+C stops after the step under way, leaving "
        "the servers as they are; --resume goes on after it or any interruption. --from replaces a server with "
        "the first step; the preflight runs before each launch.",
    )
    p.add_argument("presets_to_run", nargs="*", metavar="PRESET", help="the presets to sweep (one without speculation)")
    _add_requests(p, "measured requests per preset (default: the baseline's [bench])")
    p.add_argument("--resume", nargs="?", const="", metavar="RUN_ID",
                   help="go on with an interrupted sweep (default: the latest unfinished one)")
    p.add_argument("--report", metavar="RUN_ID", help="print a stored grid sweep's report (with --prometheus: its "
                   "recommendation weighted by the running requests of the servers --selector picks, last hour)")
    p.add_argument("--leave", choices=["best", "baseline", "none"], default="best",
                   help="which preset is left serving at the end (default: the recommended one)")
    p.add_argument("--predict-only", action="store_true",
                   help="measure the longest chain alone and predict the acceptance of shorter ones")
    p.add_argument("--skip-predicted-worse", action="store_true",
                   help="skip presets whose predicted tok/s is clearly below the best measured (beyond the CI)")
    grid = p.add_argument_group("a grid from one speculative base preset (`specmon sweep BASE --steps 1,3,5 ...`)")
    grid.add_argument("--steps", metavar="N,N,...", help="--speculative-num-steps values")
    grid.add_argument("--topk", metavar="N,N,...", help="--speculative-eagle-topk values")
    _add_draft_tokens(grid, "--speculative-num-draft-tokens values")
    _add_concurrency(grid, "concurrencies each configuration is measured at, on one server (default 1)", type=str,
                     metavar="N,N,...")
    p.set_defaults(handler="specmon.sweep_report:run_sweep")


def _add_fleet(sub: argparse._SubParsersAction, shared: _Shared) -> None:
    p = sub.add_parser(
        "fleet",
        parents=[shared.once, shared.json, shared.web, shared.headless, shared.prometheus],
        help="every SGLang server your Prometheus scrapes: one row each, with alerts (`fleet rules`: the rules file)",
        description="Read many SGLang servers through the Prometheus that scrapes them (and DCGM exporter's GPU "
        "series, and sglang-router's /workers for roles): one row per server with decode tok/s, acceptance, "
        "load, KV, TTFT p99, GPU memory and utilization, and the Live view's alerts. Read-only: GETs only. "
        "`specmon fleet rules` prints the same PromQL as a Prometheus rules file.",
    )
    p.add_argument("action", nargs="?", choices=["rules", "dashboard"],
                   help="rules: print the Prometheus recording and alerting rules; dashboard: print the Grafana "
                   "dashboard that reads them")
    p.add_argument("--host-label", metavar="L", help="the label that names a target's host (default: instance "
                   "without its port)")
    p.add_argument("--router", action="append", default=[], metavar="URL",
                   type=_url("the URL", scheme_required=True),
                   help="an sglang-router whose /workers gives each worker's role (repeatable)")
    p.add_argument("--gpu-selector", default='job="dcgm"', metavar="MATCHERS",
                   help="which targets are DCGM exporters (default 'job=\"dcgm\"')")
    _add_window(p, 60.0, "rate window in seconds (default 60; raised to 4 x the scrape interval)")
    p.add_argument("--interval", type=float, default=5.0, metavar="S", help="refresh every S seconds (default 5)")
    p.add_argument("--bearer-token-file", metavar="PATH", help="a file holding the bearer token for Prometheus")
    p.add_argument("--basic-auth-file", metavar="PATH", help="a file holding `user:password` for Prometheus")
    p.add_argument("--ca-file", metavar="PATH", help="a CA bundle to check Prometheus' TLS certificate with")
    _group(p, "with --once", "--json", description="exit 0 all well, 1 a server down or alerting, 2 Prometheus "
           "unreachable")
    _add_server(p, "NAME", "open this server's single-server screen (as Enter on its row)")
    p.set_defaults(handler="specmon.fleet.cli:run_fleet")


def _add_traffic(sub: argparse._SubParsersAction, shared: _Shared) -> None:
    p = sub.add_parser("traffic", parents=[shared.json, shared.by, shared.categories],
                       help="τ per request class from SGLang's request records",
                       description="τ per class (95% CIs), outliers. Exit 0; 1: no usable record; 2: bad usage.")
    p.add_argument("paths", nargs="+", metavar="PATH", help="an export directory or file, or a request log")
    p.add_argument("--since", metavar="DURATION", help="only requests finished in the last DURATION (30m, 1h, 2d)")
    p.set_defaults(handler="specmon.traffic.cli:run_traffic")


_COMMANDS: Sequence[Callable[[argparse._SubParsersAction, _Shared], None]] = (
    _add_demo,
    _add_monitor,
    _add_log_summary,
    _add_bench,
    _add_gpus,
    _add_check,
    _add_doctor,
    _add_fix_draft_keys,
    _add_presets,
    _add_results,
    _add_predict,
    _add_emulate,
    _add_start,
    _add_ps,
    _add_stop,
    _add_switch,
    _add_sweep,
    _add_fleet,
    _add_traffic,
)


def build_parser() -> HintingParser:
    """The full argument parser, with one subparser per command."""
    parser = HintingParser(
        prog="specmon",
        description="A terminal monitor for live speculative serving (SGLang with EAGLE-3 and friends).",
    )
    parser.add_argument("--version", action=PrintVersion)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    shared = _Shared()
    for add in _COMMANDS:
        add(sub, shared)
    parser.commands = dict(sub.choices)
    return parser


def _resolve(handler: Handler) -> Callable[[argparse.Namespace], int]:
    module_name, func_name = handler.split(":")
    return getattr(importlib.import_module(module_name), func_name)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `specmon` console script (and of ``python -m specmon``).

    It first makes SIGINT and SIGTERM end the command with 130 and 143, never by the signal (``exits``); run as
    the command (``argv`` None), a signal after the exit code is decided is ignored (``exits.settle``)."""
    exits.install()
    try:
        return _main(argv)
    except KeyboardInterrupt:
        return exits.EXIT_SIGINT
    except Exception as exc:
        code = exits.interrupted_code(exc)
        if code is None:
            raise
        return code
    finally:
        if argv is None:
            exits.settle()


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:  # said by the subcommand's own parser, with its usage, when they were given to it
        command = parser.commands.get(getattr(args, "command", None) or "")
        given = getattr(command, "_given", [])
        (command if command is not None and all(word in given for word in extras) else parser).error(
            f"unrecognized arguments: {' '.join(extras)}")
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    handler = args.handler
    if args.command == "monitor" and args.once:
        handler = "specmon.traffic.once:run_monitor_once"
    elif args.command == "fleet" and not (args.once or args.action):
        handler = "specmon.tui.cli:run_fleet"  # the app; --once and rules are headless
    if args.command in ("monitor", "fleet"):  # live and fleet read no sweep themselves: the stored curves given
        from specmon.sweep.curves import StoredCurves
        args.curves = StoredCurves()
    try:
        if hasattr(args, "categories"):  # read once, for every command that takes --categories
            from specmon.traffic.categories import given_or_refused

            args.prompt_categories = given_or_refused(args.categories)
        if args.command == "sweep" and getattr(args, "against_traffic", None):  # sweep reads no records itself
            from specmon.traffic.production import judge_against

            args.before_save = judge_against([args.against_traffic], categories=args.prompt_categories)
        return int(_resolve(handler)(args) or 0)
    except exits.UsageError as exc:  # an unknown preset, a question that cannot be asked: one line, exit 2
        from specmon.text import printable, strict_json

        print(f"specmon {args.command}: {printable(exc)}", file=sys.stderr)
        if getattr(args, "json", False):
            print(strict_json({"error": str(exc)}, indent=2))
        return exits.EXIT_USAGE
    except BrokenPipeError:
        return 0
    except (OSError, ValueError) as exc:  # outside input refused where no handler said it: one line, exit 2
        from specmon.inputs import InputError
        from specmon.private_files import PrivatePathRefused
        from specmon.text import printable

        if isinstance(exc, PrivatePathRefused):
            print(f"specmon {args.command}: {printable(exc.filename)}: {exc.strerror}", file=sys.stderr)
        elif isinstance(exc, InputError):
            print(f"specmon {args.command}: {printable(exc)}", file=sys.stderr)
        else:
            raise
        return 2


if __name__ == "__main__":
    sys.exit(main())
