"""Line formats of SGLang server logs: prefixes, milestone and progress-bar patterns, known flags.

Pure functions and compiled patterns only; the tracker decides what the matches mean.
"""

from __future__ import annotations

import re
from datetime import datetime, time, timedelta
from typing import NamedTuple

from specmon.sglang.flags import load_shipped
from specmon.sglang.loglines import known_texts

# --- Prefixes -------------------------------------------------------------------------------------------

# `[2025-03-08 12:29:04 TP0] msg`, `[... DP0 TP0 EP0]`, `[... gpu_id=0]`, optional milliseconds.
_SGLANG_PREFIX = re.compile(
    r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d{1,6})?)((?: (?:[A-Z][A-Z_]*\d+|gpu_id=\d+))*)\] ?"
)
# `[12:29:04] msg`, `[12:29:04.250 TP0] msg`: a clock without a date (some logging configs and wrappers)
_SHORT_PREFIX = re.compile(
    r"\[(\d{2}:\d{2}:\d{2}(?:[.,]\d{1,6})?)((?: (?:[A-Z][A-Z_]*\d+|gpu_id=\d+))*)\] ?"
)
# Ray's actor wrapper: `(SGLangEngine pid=1234) `, `(pid=1234, ip=10.0.0.2) `
_RAY_WRAPPER = re.compile(r"\((?:[\w.:-]+ )?pid=\d+(?:, ip=[\w.:-]+)?\) ")
# `[gpu_id=0] msg` or `[TP0] msg` (no timestamp)
_TAG_ONLY_PREFIX = re.compile(r"\[((?:gpu_id=\d+|[A-Z][A-Z_]*\d+)(?: (?:gpu_id=\d+|[A-Z][A-Z_]*\d+))*)\] ?")
# uvicorn `INFO:     msg` and the newer `LEVEL file.py:N: msg`, both after the `[ts] ` prefix
_LEVEL_AFTER_TS = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL|TRACE)(?::\s+| [\w./-]+\.py:\d+: )")
# Rust tracing: `2025-11-05T01:56:54.281615Z  INFO module.fn: msg`
_RUST_TRACING = re.compile(
    r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?)Z?\s+(TRACE|DEBUG|INFO|WARN|ERROR)\s+(?:[\w:.<>{}-]+: )?"
)
# Python logging default: `2026-04-14 16:08:51,862 - CUTE_DSL - WARNING - msg`
_PYLOG_DEFAULT = re.compile(
    r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3} - [^\n]*? - (DEBUG|INFO|WARNING|ERROR|CRITICAL) - "
)
# vLLM style `INFO 03-07 12:29:02 __init__.py:190] msg` (its date is not trusted) and `WARNING:logger:msg`
_VLLM_STYLE = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) \d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)? [\w./-]+:\d+\] ")
_BASIC_CONFIG = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:")
# docker-compose `llm0-1  | ` (also with an ANSI-free colourless name)
_COMPOSE = re.compile(r"[\w.-]{1,64}\s*\| ")

_WRAPPER_MAX = 160  # how far into a line an SGLang prefix behind a wrapper is looked for
_WRAPPER_ENDS = frozenset(" >|:]")
_LEVEL_HEADS = frozenset(("DEBU", "INFO", "WARN", "ERRO", "CRIT", "TRAC"))
_LEVEL_NAMES = {"WARN": "WARNING"}

Prefix = tuple[str | None, str, str | None, str]


def parse_prefix(line: str) -> Prefix:
    """Split a log line into (timestamp text or None, rank tags, level or None, message).

    The timestamp text is returned only for formats whose clock SGLang owns (`[ts]`, Rust tracing); rank tags
    are the bracket tags such as " TP0" or " DP0 TP0 EP0" ("" when absent). A timestamp may be a clock alone
    (`12:29:04`, see ``parse_clock``). Wrappers before the SGLang line (docker-compose, Ray actors, a pod name
    and `>>`) are skipped.
    """
    head = line[:1]
    if head == "[":
        m = _SGLANG_PREFIX.match(line)  # the common case inline: this runs for every line of a long log
        if m is not None:
            msg = line[m.end() :]
            if msg[:4] in _LEVEL_HEADS:
                lm = _LEVEL_AFTER_TS.match(msg)
                if lm is not None:
                    return m.group(1), m.group(2), lm.group(1), msg[lm.end() :]
            return m.group(1), m.group(2), None, msg
        found = _parse_bracket(line)
        if found is not None:
            return found
        return _wrapped(line)
    if head.isdigit():
        m = _RUST_TRACING.match(line)
        if m is not None:
            return m.group(1), "", _LEVEL_NAMES.get(m.group(2), m.group(2)), line[m.end() :]
        m = _PYLOG_DEFAULT.match(line)
        if m is not None:
            return _unwrapped(m.group(1), line[m.end() :])
        return _wrapped(line)  # e.g. a container runtime's `2025-10-01T12:00:00.1Z stdout F [ts] msg`
    if line[:4] in _LEVEL_HEADS:
        m = _VLLM_STYLE.match(line) or _BASIC_CONFIG.match(line)
        if m is not None:
            return _unwrapped(m.group(1), line[m.end() :])
        return None, "", None, line
    if head == "(":
        m = _RAY_WRAPPER.match(line)
        if m is not None:
            return parse_prefix(line[m.end() :])
    if head and not head.isspace() and "| " in line[:80]:
        m = _COMPOSE.match(line)
        if m is not None:
            rest = line[m.end() :]
            if rest[:1] != "|":
                return parse_prefix(rest)
    return _wrapped(line)


def _unwrapped(level: str, rest: str) -> Prefix:
    """The message of a Python-logging wrapper (`... - INFO - `, `INFO:name:`, `INFO 12-01 ...] `): SGLang's own
    `[date time TAGS]` line when it carries one (its time and ranks), else the wrapper's text as it is."""
    if rest[:1] == "[":
        inner = _parse_bracket(rest)
        if inner is not None and inner[0] is not None:
            return inner[0], inner[1], inner[2] or level, inner[3]
    return None, "", level, rest


def _parse_bracket(line: str) -> Prefix | None:
    """A line that starts with `[`: SGLang's `[date time TAGS]`, a short `[time TAGS]`, or `[TAGS]`."""
    m = _SGLANG_PREFIX.match(line)
    if m is None and line[3:4] == ":":
        m = _SHORT_PREFIX.match(line)
    if m is not None:
        msg = line[m.end() :]
        if msg[:4] in _LEVEL_HEADS:
            lm = _LEVEL_AFTER_TS.match(msg)
            if lm is not None:
                return m.group(1), m.group(2), lm.group(1), msg[lm.end() :]
        return m.group(1), m.group(2), None, msg
    m = _TAG_ONLY_PREFIX.match(line)
    if m is not None:
        return None, " " + m.group(1), None, line[m.end() :]
    return None


def _wrapped(line: str) -> Prefix:
    """An SGLang `[date time]` line behind some other wrapper (a pod name and `>>`, `[pod/x]`, a tool's tag)."""
    at = line.find("[", 1, _WRAPPER_MAX)
    while at > 0:
        if line[at + 1 : at + 2].isdigit() and line[at - 1] in _WRAPPER_ENDS:
            found = _parse_bracket(line[at:])
            if found is not None and found[0] is not None:
                wrapper = line[:at]
                if "rror" in wrapper or "xception" in wrapper:  # an exception's message, not a wrapper
                    break
                return found
        at = line.find("[", at + 1, _WRAPPER_MAX)
    return None, "", None, line


def parse_timestamp(text: str) -> datetime | None:
    """Parse a prefix timestamp (`2025-03-08 12:29:04`, with optional fraction, or ISO `T` form)."""
    try:
        return datetime.fromisoformat(text.replace(",", "."))
    except ValueError:
        return None


def parse_clock(text: str, previous: datetime | None) -> datetime | None:
    """A short `HH:MM:SS` timestamp as a datetime on the day of ``previous`` (the next day if the clock went
    back by more than 12 hours: midnight passed), or on 1900-01-01 when no date was seen."""
    try:
        clock = time.fromisoformat(text.replace(",", "."))
    except ValueError:
        return None
    if previous is None:
        return datetime.combine(datetime(1900, 1, 1), clock)
    ts = datetime.combine(previous.date(), clock)
    if (previous - ts).total_seconds() > 12 * 3600:
        ts += timedelta(days=1)
    return ts


def is_rank_zero(tags: str) -> bool:
    """True when every rank number in the tags is 0 (or there are no tags: a single-GPU server)."""
    return all(ch == "0" for ch in tags if ch.isdigit())


# --- Milestones (applied to the message after the prefix) ------------------------------------------------

LAUNCH_BEGIN = ("server_args=ServerArgs(", "server_args={")  # the first line of every launch: its parsed arguments

# What each SGLang version writes, from the shipped per-version table (specmon/sglang/data/loglines.json, read
# from every wheel by scripts/sglang_loglines.py): the literal start of every version's line.
INIT_BEGIN = known_texts("init_begin")  # "Init torch distributed begin." (to 0.5.20), "Init parallel begin." (0.5.21+)
MEMORY_BASELINE = known_texts("memory_baseline")  # 0.5.21+: "Memory baseline taken. mem usage=..."
WEIGHTS_COMMITTED = tuple(t for t in known_texts("load_end") if "Committed" in t)  # 0.5.20+: after the capture
STARTUP_TIMINGS = known_texts("startup_timings")  # 0.5.17+: "Engine startup timings (s): load_weight=..."
WARMUP_FAILED = known_texts("warmup_failed")  # "Initialization failed. warmup error", 0.5.22+'s Rust server's
TIMING = re.compile(r"(\w+)=(\d+(?:\.\d+)?)")

FLOAT = r"(-?\d+(?:\.\d+)?)"
AVAIL_MEM = re.compile(r"avail(?:able)?[ _](?:gpu_)?mem(?:ory)?[=:] ?" + FLOAT + r" ?GB")
MEM_USAGE = re.compile(r"mem usage[=:] ?" + FLOAT + r" ?GB")
ELAPSED = re.compile(r"(?:Time elapsed: |elapsed=)" + FLOAT + r" ?s")
WEIGHT_TYPE = re.compile(r"type=([\w.]+)")
WEIGHT_DTYPE = re.compile(r"dtype=([\w.]+)")
KV_ALLOC = re.compile(
    r"KV Cache is allocated\.(?: dtype: ([\w.]+),)?(?: #tokens: (\d+),)? "
    r"(?:K size: " + FLOAT + r" GB, V size: " + FLOAT + r" GB|KV size: " + FLOAT + r" GB)"
)
MAX_TOTAL = re.compile(r"max_total_num_tokens=(\d+)")
# Any capture line: `Capture cuda graph begin.`, `Capture target verify CUDA graph end.`, `Capture draft extend
# cuda graph begin.`, `Capture piecewise CUDA graph begin.`, `Capture Frozen-KV MTP draft cuda graph begin.`
CAPTURE_LINE = re.compile(
    r"Capture (?P<what>[\w -]*?)(?:cuda|CUDA|cpu|CPU|npu|NPU) graph(?: \(step \d+\))? (?P<edge>begin|end)\b"
)
# `Capture cuda graph bs [1, 2, 4]` (decode batch sizes) vs `Capture cuda graph num tokens [...]` (prefill)
CAPTURE_LIST = re.compile(r"Capture (?:cuda|CUDA|cpu|CPU|npu|NPU) graph (bs|num tokens) \[([\d, ]*)\]")
BS_IN_LINE = re.compile(r"\b(bs|num_tokens)=\[([\d, ]*)\]")
DRAFT_MODEL_TYPE = re.compile(r"Eagle|NextN|MTP|DFlash|Draft|Medusa|Dspark", re.IGNORECASE)
SPEC_ALGORITHM = re.compile(r"speculative_algorithm['\"]?[=:] ?['\"]([\w-]+)['\"]")
# `speculative_num_steps=3` (ServerArgs repr) or `'speculative_num_steps': 3` (0.5.23's dict); None when unset
SPEC_SHAPE_ARG = re.compile(r"\bspeculative_(num_steps|eagle_topk|num_draft_tokens)['\"]?[=:] ?(\d{1,4}|None)\b")
# `model_path='/m'` and `speculative_draft_model_path='/d'` (either form; None, or an over-long path, not matched)
WEIGHTS_PATH_ARG = re.compile(r"\b(model_path|speculative_draft_model_path)['\"]?[=:] ?['\"]([^'\"]{1,1024})['\"]")

# --- Progress bars --------------------------------------------------------------------------------------

# The counter and the `[elapsed<remaining, rate]` block of any tqdm bar (what ``tqdm_counter`` finds, faster).
_TQDM_TIMES = r"(?: \[([\d:]+)(?:<([\d:?]+))?(?:, *[^\]]*)?\])?"
TQDM_COUNTER = re.compile(
    r"(\d+)%\|[^|]*\| *(\d+)/(\d+)" + _TQDM_TIMES + r"|(\d+)% Completed \| (\d+)/(\d+)" + _TQDM_TIMES
)
_BAR_AFTER_PERCENT = re.compile(r"%\|[^|]*\| *(\d+)/(\d+)" + _TQDM_TIMES)
_COMPLETED_AFTER_PERCENT = re.compile(r"% Completed \| (\d+)/(\d+)" + _TQDM_TIMES)


class TqdmCounter(NamedTuple):
    """A tqdm bar's counter in a frame: where it starts (its percentage) and ends, ``n`` and ``total`` (as
    written), its elapsed time (tqdm's `MM:SS`, or None) and its form (``bar``: `P%|...| n/total`, else
    `P% Completed | n/total`)."""

    start: int
    end: int
    n: str
    total: str
    elapsed: str | None
    bar: bool


def tqdm_counter(text: str) -> TqdmCounter | None:
    """The first tqdm counter in ``text``: the same match as ``TQDM_COUNTER.search``, found from each `%` (a frame
    has one or two) instead of trying the pattern at every character."""
    at = text.find("%")
    while at > 0:
        if text[at - 1].isdecimal():
            m = _BAR_AFTER_PERCENT.match(text, at)
            bar = m is not None
            if m is None:
                m = _COMPLETED_AFTER_PERCENT.match(text, at)
            if m is not None:
                start = at - 1
                while start and text[start - 1].isdecimal():
                    start -= 1
                return TqdmCounter(start, m.end(), m.group(1), m.group(2), m.group(3), bar)
        at = text.find("%", at + 1)
    return None


CAPTURE_DESC = re.compile(
    r"Capturing (?:batches \((?:bs=(\d+) )?|(num tokens|prefill shape) \(num_tokens=(\d+) )avail_mem=" + FLOAT
)
_WEIGHT_TEXTS = ("checkpoint shards", "loading shards", *known_texts("weight_bar"))
WEIGHT_DESC = re.compile(
    r"(?:" + "|".join(re.escape(t) for t in _WEIGHT_TEXTS) + r")\s*:", re.IGNORECASE
)  # every version's weight-loading bar (e.g. 0.5.22's "Loading safetensors using InstantTensor")
_WEIGHT_WORDS = tuple(sorted({t.split()[-1].lower() for t in _WEIGHT_TEXTS}))  # one is in every head it finds


def is_weight_bar(head: str) -> bool:
    """Whether a frame's text before its counter names a weight-loading bar (``WEIGHT_DESC``); an ASCII head with
    none of the texts' last words is not one, without the slower case-blind search."""
    if head.isascii():
        low = head.lower()
        if not any(word in low for word in _WEIGHT_WORDS):
            return False
    return WEIGHT_DESC.search(head) is not None


_CLOCKS: dict[str, float | None] = {}  # tqdm's elapsed texts repeat (whole seconds): each is parsed once


def clock_seconds(text: str | None) -> float | None:
    """tqdm's `MM:SS` / `H:MM:SS` as seconds."""
    if not text:
        return None
    try:
        return _CLOCKS[text]
    except KeyError:
        pass
    seconds: float | None = None
    if "?" not in text:
        total = 0
        for part in text.split(":"):
            if not part.isdigit():
                break
            total = total * 60 + int(part)
        else:
            seconds = float(total)
    if len(_CLOCKS) < 4096 and len(text) <= 16:  # a hostile log's long or endless texts are not kept
        _CLOCKS[text] = seconds
    return seconds


def int_list(text: str) -> list[int]:
    return [int(x) for x in text.replace(" ", "").split(",") if x.isdigit()][:4096]


# --- Errors ---------------------------------------------------------------------------------------------

# The line that ends a traceback: `KeyError: 'x'`, `torch.OutOfMemoryError: CUDA out of memory...`,
# `AssertionError`, `Exception: Capture cuda graph failed: ...`.
EXCEPTION_LINE = re.compile(r"((?:[A-Za-z_]\w*\.)*\w*(?:Error|Exception|Interrupt|Exit))(?:: ?(.*))?$")
ARGPARSE_ERROR = re.compile(r"(?:usage: )?[\w.\- ]{1,60}: error: (.*)$")
BIND_PORT = re.compile(r"address \('?([^',]*)'?, (\d+)\)")
# `mem_fraction_static=0.85` (ServerArgs repr, error text) or `'mem_fraction_static': 0.85` (0.5.23's dict)
MEM_FRACTION = re.compile(r"mem_fraction_static'?[=:] ?([\d.]+)")
# A process killed by signal 9: the shell's `Killed` / `已杀死` (alone or in a job line `123 Killed  python ...`),
# `zsh: killed`, the OOM killer's `Killed process 123`, SIGKILL, and exit codes -9 / 137 (128 + 9).
KILL_EVIDENCE = re.compile(
    r"^(?:\S+: )?(?:line \d+: +)?(?:\d+ +)?(?:Killed|killed|已杀死)(?: |$)|SIGKILL|signal 9\b"
    r"|exit(?:ed)?(?: with)?(?: exit)? ?(?:code|status)[:=]? ?\(?(?:-9|137)\b|exitcode[:=]? ?-9\b",
    re.IGNORECASE,
)
# Cheap test before KILL_EVIDENCE: every line it matches holds one of these.
KILL_MARKS = ("ill", "ILL", "-9", "137", "杀", "signal 9")
# multiprocessing's resource_tracker at exit: `There appear to be 1 leaked semaphore objects to clean up at
# shutdown`, the only trace a SIGKILLed SGLang 0.5.16 server leaves.
LEAKED_AT_EXIT = re.compile(r"There appear to be \d+ leaked \w+ objects")
# A CUDA error printed by C++ code, with no Python traceback: `CUDA error (file.h:166): no kernel image ...`,
# `CUDA error: an illegal memory access was encountered`, `CUDA error at file.cu:12 code=700`.
CUDA_ERROR_LINE = re.compile(r"CUDA (?:error|Error|ERROR)(?: \(|:| at |$)|cudaError\w+")

# A GPU hardware fault, not a software error: AMD's HSA runtime aborting (`HSA_STATUS_ERROR_EXCEPTION: An HSAIL
# operation resulted in a hardware exception`), an NVIDIA driver Xid (`NVRM: Xid (PCI:...): 79, ... GPU has fallen
# off the bus`).
GPU_FAULT = re.compile(r"HSA_STATUS_ERROR_\w+|NVRM: Xid|\bXid \(PCI:|\bXid \d+\b|GPU has fallen off the bus")
GPU_FAULT_MARKS = ("HSA_STATUS", "Xid", "fallen off")

# --- Flags ----------------------------------------------------------------------------------------------


def suggest_flag(flag: str, version: str | None = None) -> str | None:
    """The SGLang flag someone most likely meant by an unrecognised `flag`, or None.

    Judged against the shipped flag table of `version` (the nearest older one without an exact table), by
    default the newest shipped SGLang.
    """
    return load_shipped(version).suggest(flag)
