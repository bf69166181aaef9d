"""SGLang's launch-flag parsing and speculative-argument rules, as the emulator applies them.

The flags and defaults are SGLang 0.5.16's own (its shipped flag table, specmon.sglang), so an unknown
flag fails with argparse's usage and `sglang serve: error: unrecognized arguments: ...` exactly like SGLang.
Emulator-only flags start with `--emulator-` and are hidden from the usage text.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from specmon.emulator.ranks import rank_layout
from specmon.sglang.flags import Flag, load_shipped

EMULATED_VERSION = "0.5.16"
NEW_PROG = "sglang serve"
LEGACY_PROG = "launch_server.py"
FAMILIES = ("new", "legacy")
FAIL_KINDS = ("oom-during-capture", "not-enough-memory", "weight-keyerror")
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "STANDALONE")
KNOWN_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK")
LEGACY_ALGORITHM_CHOICES = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")

SECRET_ARGS = ("api_key", "admin_api_key")
SECRET_MASK = "***"
# What SGLang 0.5.16 resolved at startup on the recorded H200 run (tests/fixtures/api/
# h200-0.5.16-server-info-plain.json) where its ServerArgs default is None or "auto"; the emulator reports
# the same unless the flag is given. kv_events is a /server_info key, not a ServerArgs field.
RESOLVED_AT_STARTUP: dict[str, Any] = {
    "chunked_prefill_size": 8192,
    "page_size": 1,
    "load_balance_method": "round_robin",
    "device": "cuda",
    "attention_backend": "triton",
    "sampling_backend": "pytorch",
    "grammar_backend": "none",
    "speculative_moe_runner_backend": "auto",
    "expert_distribution_recorder_buffer_size": 1000,
    "mm_process_config": {},
    "mm_feature_transport": "cpu",
    "custom_weight_loader": [],
    "kv_events": None,
}
# SGLang builds these choices from a set, so its usage text lists them in that run's hash order.
_CHOICE_ORDER_SEEN = {"--sampling-backend": ("ascend", "pytorch", "flashinfer")}
_PREFILL_GRAPH_BS = [4, 8, 12, 16, 20, 24, 28, *range(32, 256, 16), *range(256, 512, 32), *range(512, 1024, 64),
                     *range(1024, 4096, 256), *range(4096, 8193, 512)]
_CUDA_GRAPH_CONFIG: dict[str, dict[str, Any]] = {
    "decode": {"backend": "full", "max_bs": 8, "bs": [1, 2, 4, 8], "tc_compiler": "eager",
               "full_prefill_max_req": None},
    "prefill": {"backend": "breakable", "max_bs": 8192, "bs": _PREFILL_GRAPH_BS, "tc_compiler": "eager",
                "full_prefill_max_req": None},
}


def _human_readable_int(text: str) -> int:
    """SGLang's human_readable_int: an int, or one with an SI (k, M, G, T) or IEC (Ki ... Ti) suffix."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", text.strip())
    if not match:
        return int(text)
    number, suffix = match.groups()
    if suffix.endswith("i"):
        if "." in number:
            raise argparse.ArgumentTypeError(f"Decimals are not allowed with IEC suffixes like '{suffix}'.")
        return int(number) * 2 ** (10 * "KMGT".index(suffix[0]) + 10)
    return int(float(number) * 10 ** (3 * "kMGT".index(suffix) + 3))


_TYPES = {"int": int, "float": float, "human_readable_int": _human_readable_int, "loads": json.loads}


@dataclass
class EmulatorOptions:
    """The emulator's own settings (the `--emulator-*` flags)."""

    family: str = "new"
    speed: float = 1.0
    decode_speed: float = 1.0
    accept_prob: float = 0.75
    gpus: int | None = None
    gpu_port: int | None = None
    fail: str | None = None
    seed: int = 0
    warmup_delay_s: float | None = None  # real seconds before the warmup starts (default 1 s / speed)
    oom_at_step_tokens: int | None = None  # a decode step verifying this many tokens crashes the server
    production_rps: float | None = None  # --emulator-production-traffic: its own production-like requests a second


@dataclass
class LaunchConfig:
    """Everything a launch resolved to: SGLang's effective server args plus the emulator's options."""

    server_args: dict[str, Any]
    options: EmulatorOptions
    pre_log: list[tuple[str, str]] = field(default_factory=list)  # ("bare"|"warning", text) before server_args=

    @property
    def spec_algorithm(self) -> str | None:
        return self.server_args.get("speculative_algorithm")

    @property
    def speculative(self) -> bool:
        return self.spec_algorithm is not None


class SpeculativeArgsError(Exception):
    """A speculative-argument rule failed; `traceback_text` is what SGLang prints before exiting with 1."""

    def __init__(self, traceback_text: str) -> None:
        super().__init__(traceback_text.strip().splitlines()[-1])
        self.traceback_text = traceback_text
        self.pre_log: list[tuple[str, str]] = []


def _positive_float(text: str) -> float:
    value = float(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0: {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1: {text}")
    return value


def _production_rps(text: str) -> float:
    value = float(text)
    if not 0 < value <= 50:
        raise argparse.ArgumentTypeError(f"must be a number of requests a second above 0, at most 50: {text}")
    return value


def _probability(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be within [0, 1]: {text}")
    return value


EMULATOR_FLAG_HELP = {
    "--emulator-log-family": "the SGLang log to write: new (0.5.16+, the default) or legacy (0.4.x-0.5.9)",
    "--emulator-speed": "speed factor of the startup and the decode (2 = twice as fast)",
    "--emulator-decode-speed": "extra speed factor of the decode alone",
    "--emulator-accept-prob": "probability that the draft's next token is accepted (default 0.75)",
    "--emulator-gpus": "number of simulated GPUs (default: the GPUs this node's scheduler ranks use)",
    "--emulator-gpu-port": "port of the simulated-GPU side endpoint (default: --port + 1; always 127.0.0.1)",
    "--emulator-fail": "fail the startup the way SGLang does: " + ", ".join(FAIL_KINDS),
    "--emulator-seed": "random seed of the generated requests (default 0)",
    "--emulator-warmup-delay": "real seconds before the warmup starts (default 1 s / --emulator-speed)",
    "--emulator-production-traffic": "serve a production-like mix of its own, RPS requests a second (at most 50; "
                                     "rids prod-N, label custom_labels.route; default off)",
    "--emulator-oom-at-step-tokens": "crash the running server as a CUDA out-of-memory does (its traceback in the "
    "log, then the process killed) once a decode step holds N tokens: running requests x draft tokens (1 a "
    "request without speculation)",
}
"""What `specmon emulate --help` says about the emulator's own flags (SGLang's usage text leaves them out)."""


def _add_emulator_flags(parser: argparse.ArgumentParser, shown: bool = False) -> None:
    def add(flag: str, **kwargs: Any) -> None:
        parser.add_argument(flag, help=EMULATOR_FLAG_HELP[flag] if shown else argparse.SUPPRESS, **kwargs)

    add("--emulator-log-family", dest="emulator_family", choices=FAMILIES, default="new")
    add("--emulator-speed", type=_positive_float, default=1.0)
    add("--emulator-decode-speed", type=_positive_float, default=1.0)
    add("--emulator-accept-prob", type=_probability, default=0.75)
    add("--emulator-gpus", type=int, default=None)
    add("--emulator-gpu-port", type=int, default=None)
    add("--emulator-fail", choices=FAIL_KINDS, default=None)
    add("--emulator-seed", type=int, default=0)
    add("--emulator-warmup-delay", type=float, default=None)
    add("--emulator-oom-at-step-tokens", type=_positive_int, default=None, metavar="N")
    add("--emulator-production-traffic", type=_production_rps, default=None, metavar="RPS")


def emulator_flag_problem(option: str, value: object) -> str | None:
    """Why the emulator refuses `value` for its own flag `option` (an unknown flag, a speed of 0, an
    acceptance probability of 1.5, a number that is not finite), or None: its own parser's check."""
    parser = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    _add_emulator_flags(parser)
    action = next((a for a in parser._actions if option in a.option_strings), None)
    if action is None:
        return f"the emulator has no {option}"
    text = str(value)
    try:
        parsed = action.type(text) if callable(action.type) else text
    except argparse.ArgumentTypeError as error:
        return f"argument {option}: {error}"
    except (TypeError, ValueError):
        return f"argument {option}: invalid value: {text!r}"
    if isinstance(parsed, float) and not math.isfinite(parsed):
        return f"argument {option}: not a finite number: {text!r}"
    if action.choices is not None and parsed not in action.choices:
        return f"argument {option}: invalid choice: {text!r} (choose from {', '.join(map(str, action.choices))})"
    return None


def emulator_help() -> str:
    """The emulator's own flags, for `specmon emulate --help` to print before SGLang's usage text."""
    parser = argparse.ArgumentParser(
        prog="specmon emulate", add_help=False, usage="specmon emulate [EMULATOR FLAGS] <SGLang flags>",
        description="The SGLang emulator, started like SGLang 0.5.16. Its own flags come first below; "
        "SGLang's flags, which it accepts too, follow.",
    )
    _add_emulator_flags(parser.add_argument_group("emulator flags"), shown=True)  # type: ignore[arg-type]
    return parser.format_help()


def _add_sglang_flag(parser: argparse.ArgumentParser, flag: Flag, family: str) -> None:
    kwargs: dict[str, Any] = {"dest": flag.dest}
    if flag.hidden:
        kwargs["help"] = argparse.SUPPRESS
    if flag.action == "BooleanOptionalAction":
        kwargs["action"] = argparse.BooleanOptionalAction
    elif not flag.takes_value:
        kwargs["action"] = "store_false" if flag.action == "store_false" else "store_true"
        if flag.action not in (None, "store_true", "store_false", "DeprecatedStoreTrueAction"):
            # A deprecated spelling that stores a constant elsewhere: recognised, but it sets nothing.
            kwargs["dest"] = flag.option.lstrip("-").replace("-", "_")
    else:
        choices = flag.choices
        if flag.option == "--speculative-algorithm" and family == "legacy":
            choices = LEGACY_ALGORITHM_CHOICES
        if choices is not None:
            seen = _CHOICE_ORDER_SEEN.get(flag.option)
            kwargs["choices"] = list(seen if seen and set(seen) == set(choices) else choices)
        if flag.nargs is not None:
            kwargs["nargs"] = flag.nargs
        if flag.metavar is not None:
            kwargs["metavar"] = flag.metavar
        kwargs["type"] = _TYPES.get(flag.type or "str", str)
        if flag.required:
            kwargs["required"] = True
    parser.add_argument(*flag.option_strings, **kwargs)


def _add_plugin_flags(parser: argparse.ArgumentParser) -> None:
    # The smg-grpc-servicer plugin (an sglang.srt.plugins entry point SGLang 0.5.16 depends on) adds these
    # to the parser; they are not in SGLang's own source, so not in its flag table.
    parser.add_argument("--servicer-impl", choices=["python", "rust"])
    parser.add_argument("--metrics-port", type=int)
    parser.add_argument("--metrics-host")


def build_parser(family: str = "new") -> argparse.ArgumentParser:
    """SGLang's launch parser for a log family (prog `sglang serve`, or `launch_server.py` for legacy)."""
    parser = argparse.ArgumentParser(
        prog=NEW_PROG if family == "new" else LEGACY_PROG, argument_default=argparse.SUPPRESS
    )
    for flag in load_shipped(EMULATED_VERSION).flags:
        _add_sglang_flag(parser, flag, family)
    _add_plugin_flags(parser)
    _add_emulator_flags(parser)
    return parser


def server_args_defaults() -> dict[str, Any]:
    """SGLang 0.5.16's ServerArgs defaults in its field order, with what it resolves at startup."""
    table = load_shipped(EMULATED_VERSION)
    args: dict[str, Any] = {flag.dest: None for flag in table.flags if flag.required}
    args.update(table.defaults)
    for key, value in RESOLVED_AT_STARTUP.items():
        if args.get(key) in (None, "auto") or key not in args:
            args[key] = value
    if args.get("cuda_graph_config") is None:
        args["cuda_graph_config"] = {key: {**value, "bs": list(value["bs"])} for key, value in _CUDA_GRAPH_CONFIG.items()}
    return args


def _peek_family(argv: list[str]) -> str:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--emulator-log-family", dest="family", choices=FAMILIES, default="new")
    known, _ = pre.parse_known_args(argv)
    return known.family


def _site() -> str:
    return "/usr/local/lib/python3.12/dist-packages"


def _assertion_traceback(family: str) -> str:
    site = _site()
    if family == "new":
        return (
            "Traceback (most recent call last):\n"
            '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
            '  File "<frozen runpy>", line 88, in _run_code\n'
            f'  File "{site}/sglang/launch_server.py", line 68, in <module>\n'
            "    server_args = prepare_server_args(sys.argv[1:])\n"
            "                  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
            f'  File "{site}/sglang/srt/server_args.py", line 8224, in prepare_server_args\n'
            "    return ServerArgs.from_cli_args(raw_args)\n"
            "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
            f'  File "{site}/sglang/srt/server_args.py", line 7348, in from_cli_args\n'
            "    return cls(**{attr: getattr(args, attr) for attr in attrs})\n"
            "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
            '  File "<string>", line 448, in __init__\n'
            f'  File "{site}/sglang/srt/server_args.py", line 3031, in __post_init__\n'
            "    handle_speculative_decoding(self)\n"
            f'  File "{site}/sglang/srt/arg_groups/speculative_hook.py", line 144, in handle_speculative_decoding\n'
            "    algo.handle_server_args(server_args)\n"
            f'  File "{site}/sglang/srt/speculative/spec_info.py", line 210, in handle_server_args\n'
            "    _handle_eagle_family(server_args)\n"
            f'  File "{site}/sglang/srt/arg_groups/speculative_hook.py", line 560, in _handle_eagle_family\n'
            "    server_args.speculative_eagle_topk is None\n"
            "AssertionError\n"
        )
    return (
        "Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        '  File "<frozen runpy>", line 88, in _run_code\n'
        f'  File "{site}/sglang/launch_server.py", line 11, in <module>\n'
        "    server_args = prepare_server_args(sys.argv[1:])\n"
        f'  File "{site}/sglang/srt/server_args.py", line 3069, in prepare_server_args\n'
        "    return ServerArgs.from_cli_args(raw_args)\n"
        f'  File "{site}/sglang/srt/server_args.py", line 2732, in from_cli_args\n'
        "    return cls(**{attr: getattr(args, attr) for attr in attrs})\n"
        '  File "<string>", line 281, in __init__\n'
        f'  File "{site}/sglang/srt/server_args.py", line 505, in __post_init__\n'
        "    self._handle_speculative_decoding()\n"
        f'  File "{site}/sglang/srt/server_args.py", line 1098, in _handle_speculative_decoding\n'
        "    self.speculative_eagle_topk is None\n"
        "AssertionError\n"
    )


def _unknown_algorithm_traceback(name: str) -> str:
    site = _site()
    return (
        "Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        '  File "<frozen runpy>", line 88, in _run_code\n'
        f'  File "{site}/sglang/launch_server.py", line 68, in <module>\n'
        "    server_args = prepare_server_args(sys.argv[1:])\n"
        f'  File "{site}/sglang/srt/server_args.py", line 8224, in prepare_server_args\n'
        "    return ServerArgs.from_cli_args(raw_args)\n"
        f'  File "{site}/sglang/srt/speculative/spec_info.py", line 65, in from_string\n'
        f'    raise ValueError(f"Unknown speculative algorithm name: {{name}}")\n'
        f"ValueError: Unknown speculative algorithm name: {name}\n"
    )


def _auto_spec_params(algorithm: str) -> tuple[int, int, int]:
    # SGLang's auto_choose_speculative_params: the emulated target is a LlamaForCausalLM.
    return (3, 1, 4) if algorithm == "STANDALONE" else (5, 4, 8)


def apply_speculative_rules(args: dict[str, Any], family: str, pre_log: list[tuple[str, str]]) -> None:
    """SGLang's handling of the speculative flags, in its order; raises SpeculativeArgsError like SGLang fails."""
    algorithm = args.get("speculative_algorithm")
    if algorithm is None:
        return
    algorithm = algorithm.upper()
    if family == "new" and algorithm not in KNOWN_ALGORITHMS:
        raise SpeculativeArgsError(_unknown_algorithm_traceback(algorithm))
    if algorithm == "NEXTN":
        algorithm = "EAGLE"
    args["speculative_algorithm"] = algorithm
    if algorithm not in EAGLE_FAMILY:
        # NGRAM and block drafters: topk is the BFS breadth, and steps follow from the draft tokens.
        if algorithm == "NGRAM":
            args["speculative_eagle_topk"] = args.get("speculative_ngram_max_bfs_breadth") or 10
        draft = args.get("speculative_num_draft_tokens") or (12 if algorithm == "NGRAM" else 16)
        args["speculative_num_draft_tokens"] = draft
        if args.get("speculative_eagle_topk") is None:
            args["speculative_eagle_topk"] = 1
        if args.get("speculative_num_steps") is None:
            args["speculative_num_steps"] = max(1, draft // args["speculative_eagle_topk"])
        return
    if args.get("max_running_requests") is None:
        args["max_running_requests"] = 48
        if family == "new":
            pre_log.append(
                (
                    "warning",
                    "Max running requests is reset to 48 for speculative decoding. You can override this by "
                    "explicitly setting --max-running-requests.",
                )
            )
    if family == "legacy":
        pre_log.append(("bare", "Overlap scheduler is disabled because of using eagle speculative decoding."))
        args["disable_overlap_schedule"] = True
    if args.get("speculative_num_steps") is None:
        if args.get("speculative_eagle_topk") is not None or args.get("speculative_num_draft_tokens") is not None:
            raise SpeculativeArgsError(_assertion_traceback(family))
        steps, topk, draft = _auto_spec_params(algorithm)
        args["speculative_num_steps"] = steps
        args["speculative_eagle_topk"] = topk
        args["speculative_num_draft_tokens"] = draft
    if args.get("speculative_eagle_topk") is None:
        args["speculative_eagle_topk"] = 1
    if args.get("speculative_num_draft_tokens") is None:
        args["speculative_num_draft_tokens"] = args["speculative_num_steps"] * args["speculative_eagle_topk"] + 1
    if (
        args["speculative_eagle_topk"] == 1
        and args["speculative_num_draft_tokens"] != args["speculative_num_steps"] + 1
    ):
        message = (
            "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
        )
        pre_log.append(("warning" if family == "new" else "bare", message))
        args["speculative_num_draft_tokens"] = args["speculative_num_steps"] + 1
    if args.get("speculative_draft_model_revision") is None and args.get("speculative_draft_model_path"):
        args["speculative_draft_model_revision"] = "main"


def _resolve_defaults(args: dict[str, Any]) -> None:
    if args.get("tokenizer_path") is None:
        args["tokenizer_path"] = args["model_path"]
    if args.get("served_model_name") is None:
        args["served_model_name"] = args["model_path"]
    if args.get("mem_fraction_static") is None:
        args["mem_fraction_static"] = 0.88 if args.get("speculative_algorithm") is None else 0.85
    if args.get("context_length") is None:
        args["context_length"] = 32768
    if args.get("max_running_requests") is None:
        args["max_running_requests"] = 4096
    if args.get("random_seed") is None:
        args["random_seed"] = int.from_bytes(os.urandom(4), "little") >> 2
    if args.get("cuda_graph_max_bs_decode") is None:
        args["cuda_graph_max_bs_decode"] = min(256, args["max_running_requests"])


def public_args(args: dict[str, Any]) -> dict[str, Any]:
    """The server args with the API keys that are set masked (for the log and /server_info)."""
    public = dict(args)
    for secret in SECRET_ARGS:
        if public.get(secret):
            public[secret] = SECRET_MASK
    return public


def capture_batch_sizes(max_bs: int, speculative: bool) -> list[int]:
    """The decode capture batch sizes SGLang picks for a maximum batch size."""
    if speculative and max_bs <= 8:
        return list(range(1, max_bs + 1))
    sizes = [bs for bs in (1, 2, 4, 8, 12) if bs <= max_bs]
    sizes += list(range(16, min(max_bs, 256) + 1, 8))
    return sizes


def parse_launch_args(argv: list[str]) -> LaunchConfig:
    """Parse SGLang flags like SGLang; exits 2 with argparse's message on a bad flag, like SGLang.

    Raises SpeculativeArgsError for a speculative rule SGLang enforces with an exception.
    """
    family = _peek_family(argv)
    parser = build_parser(family)
    ns = parser.parse_args(argv)
    values = vars(ns)
    args = server_args_defaults()
    for key in args:
        if key in values:
            args[key] = values[key]
    pre_log: list[tuple[str, str]] = []
    if family == "new" and "--cuda-graph-max-bs" in argv:
        pre_log.append(
            (
                "bare",
                "\x1b[1;33m'--cuda-graph-max-bs' is deprecated and will be removed in a future release. "
                "Use '--cuda-graph-max-bs-decode' instead.\x1b[0m",
            )
        )
    try:
        apply_speculative_rules(args, family, pre_log)
    except SpeculativeArgsError as error:
        error.pre_log = pre_log
        raise
    _resolve_defaults(args)
    speculative = args.get("speculative_algorithm") is not None
    bs_list = capture_batch_sizes(args["cuda_graph_max_bs_decode"], speculative)
    graph_config = args.get("cuda_graph_config")
    if isinstance(graph_config, dict) and isinstance(graph_config.get("decode"), dict):
        graph_config = {**graph_config, "decode": {**graph_config["decode"]}}
        graph_config["decode"]["max_bs"] = args["cuda_graph_max_bs_decode"]
        graph_config["decode"]["bs"] = bs_list
        args["cuda_graph_config"] = graph_config
    options = EmulatorOptions(
        family=family,
        speed=ns.emulator_speed,
        decode_speed=ns.emulator_decode_speed,
        accept_prob=ns.emulator_accept_prob,
        gpus=ns.emulator_gpus,
        gpu_port=ns.emulator_gpu_port,
        fail=ns.emulator_fail,
        seed=ns.emulator_seed,
        warmup_delay_s=ns.emulator_warmup_delay,
        oom_at_step_tokens=ns.emulator_oom_at_step_tokens,
        production_rps=ns.emulator_production_traffic,
    )
    if options.gpus is None:
        options.gpus = rank_layout(args).gpus
    if options.gpu_port is None:
        options.gpu_port = int(args["port"]) + 1
    return LaunchConfig(server_args=args, options=options, pre_log=pre_log)


def print_launch_warning(stream=None) -> None:
    """The UserWarning SGLang 0.5.16 prints when started as `python -m sglang.launch_server`."""
    stream = stream or sys.stderr
    stream.write(
        f"{_site()}/sglang/launch_server.py:56: UserWarning: 'python -m sglang.launch_server' is still "
        "supported, but 'sglang serve' is the recommended entrypoint.\n"
        "  Example: sglang serve --model-path <model> [options]\n"
        "  warnings.warn(\n"
    )
    stream.flush()
