"""Make SGLang startup logs from a version's own format strings (the shipped table, read from its wheel by
scripts/sglang_loglines.py), for the versions no machine here can run (0.5.18+ needs a newer torch than the
H200 image). They are MADE, not real: the first line says so, and so does the file name.

    .venv/bin/python -m scripts.make_sglang_logs 0.5.18 0.5.22 --out tests/fixtures/logs/made

Each log is one speculative (STANDALONE, 4 draft tokens) startup on one GPU, in the order SGLang logs it: server
arguments, init, target weights (with the version's shard bar), draft weights, KV pools, target, draft and draft
extend graph captures (with `Capturing batches` bars, `\\r`-redrawn), the late weight commit where the version
has one, max_total_num_tokens, the engine's own startup timings where the version has them, then ready. Every
milestone line is rendered from a template that version's source writes; the values are made up.
"""

from __future__ import annotations

import argparse
import re
import sys
from datetime import datetime, timedelta
from pathlib import Path

from specmon.sglang.loglines import load_shipped_loglines, versions_of

START = datetime(2026, 12, 2, 10, 0, 0)
BATCH_SIZES = [1, 2, 4, 8]
MADE_NOTE = "# MADE by scripts/make_sglang_logs.py from SGLang {version}'s own format strings: not a real log"

# Sample values by what a field's expression is about (checked in order; the first match wins).
SAMPLES: tuple[tuple[str, object], ...] = (
    (r"server_args", "ServerArgs(model_path='/tmp/trained/target', speculative_algorithm='STANDALONE', "
                     "speculative_draft_model_path='/tmp/trained/draft', speculative_num_steps=3, "
                     "speculative_eagle_topk=1, speculative_num_draft_tokens=4, mem_fraction_static=0.2)"),
    (r"^cache_name$", "KV Cache"),
    (r"quant_str", ""),
    (r"capture_name", "{capture_name}"),  # filled per capture below
    (r"graph_backend", "CUDA graph"),
    (r"backend", "full"),
    (r"num_tokens_per_req|self\.topk|forward_width", 1),
    (r"speculative_num_draft_tokens", 4),
    (r"capture_num_tokens", [64, 128, 256]),
    (r"capture_bs", BATCH_SIZES),
    (r"^step$", 0),
    (r"type\(self\.model\)", "{model_type}"),
    (r"dtype", "torch.bfloat16"),
    (r"max_total_num_tokens", 262144),
    (r"chunked_prefill", 8192),
    (r"max_prefill_tokens", 16384),
    (r"max_running_requests", 48),
    (r"context_len", 2048),
    (r"usage|before_avail_memory - |before_mem - after_mem|graph_mem", 1.5),
    (r"available_gpu_mem|avail|after_mem|before_mem\b", 60.25),
    (r"tic|elapsed|_time\b|capture_time|weight_load_time", 2.25),
    (r"num_tokens", 131072),
    (r"size_GB", 4.0),
    (r"last_traceback", "Traceback (most recent call last):"),
    (r"host|port|NetworkAddress", "127.0.0.1:30000"),
)
_FIELD = re.compile(r"\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}")
_PERCENT = re.compile(r"%(?:\.\d+)?[sdf]")


_CHOICE = re.compile(r"^'[^']*' if .+ else '([^']*)'$")


def sample(expression: str) -> object:
    """A made value for a field, by what its expression names (a choice between two texts: the GPU case, the
    `else` branch)."""
    choice = _CHOICE.match(expression)
    if choice is not None:
        return choice.group(1)
    for pattern, value in SAMPLES:
        if re.search(pattern, expression):
            return value
    return "x"


def render(template: str, **context: str) -> str:
    """A template's line with made values: f-string fields by their expression, %-fields in order."""
    if _PERCENT.search(template):  # a %-format string: its braces are literal
        values = iter((2.25, 0.5, 4.75, "target_decode=1.10, draft_decode=0.42", 0.3))
        return _PERCENT.sub(lambda m: _percent(m.group(0), next(values, 1.0)), template)

    def field(match: re.Match[str]) -> str:
        body = match.group(1)
        expression, _, spec = body.partition(":")
        expression = expression.removesuffix("!r")
        value = sample(expression.strip())
        if isinstance(value, str) and value.startswith("{") and value.endswith("}"):
            return context.get(value[1:-1], "x")
        if spec and isinstance(value, int | float):
            return format(value, spec)
        return str(value)

    return _FIELD.sub(field, template)


def _percent(spec: str, value: object) -> str:
    if spec.endswith("s") or not isinstance(value, int | float):
        return str(value)
    return spec % value


def templates_for(name: str, version: str) -> list[str]:
    """The templates of milestone `name` that `version` writes."""
    table = load_shipped_loglines()
    return [e["template"] for e in table["lines"].get(name, []) if version in versions_of(name, e["template"])]


def pick(name: str, version: str, must: str = "", avoid: str = "\0") -> str | None:
    for template in templates_for(name, version):
        if must in template and avoid not in template:
            return template
    return None


class MadeLog:
    """Lines of one made log, each with its time and rank tag."""

    def __init__(self, version: str) -> None:
        self.version = version
        self.at = START
        self.lines = [MADE_NOTE.format(version=version)]

    def line(self, text: str | None, tag: str = " TP0", seconds: float = 0.5) -> None:
        if text is None:
            return
        self.at += timedelta(seconds=seconds)
        self.lines.append(f"[{self.at:%Y-%m-%d %H:%M:%S}{tag}] {text}")

    def bar(self, desc: str, total: int, per_step_s: float = 1.0, sizes: list[int] | None = None) -> None:
        """A tqdm bar redrawn with `\\r` on one physical line, as a terminal log keeps it."""
        frames = []
        for n in range(total + 1):
            label = desc
            if sizes is not None and n < total:
                label = desc.replace("{bs}", str(sizes[::-1][n]))
            elif sizes is not None:
                label = desc.replace("{bs}", str(sizes[0]))
            elapsed = int(n * per_step_s)
            left = "?" if n == 0 else f"00:{int((total - n) * per_step_s):02d}"
            frames.append(f"{label}: {100 * n // total:3d}%|{'█' * n}{' ' * (total - n)}| {n}/{total} "
                          f"[00:{elapsed:02d}<{left}, 1.00it/s]")
        self.at += timedelta(seconds=total * per_step_s)
        self.lines.append("\r".join(frames))


def make_log(version: str) -> str:
    """One made startup log of `version` (see the module doc)."""
    log = MadeLog(version)
    v = version
    log.line(render(pick("server_args", v) or "server_args={server_args}"), tag="")
    for model_type in ("LlamaForCausalLM", "LlamaForCausalLM"):  # the target, then the STANDALONE draft
        log.line(render(pick("init_begin", v) or "Init torch distributed begin."))
        log.line(render(pick("init_end", v) or ""), seconds=1.0)
        log.line(render(pick("memory_baseline", v)) if pick("memory_baseline", v) else None)
        log.line(render(pick("load_begin", v) or "Load weight begin."))
        shard_bar = pick("weight_bar", v, "InstantTensor") or pick("weight_bar", v, "checkpoint shards")
        log.bar(shard_bar or "Loading safetensors checkpoint shards", 3)
        end = pick("load_end", v, "elapsed", avoid="Committed")
        log.line(render(end or "Load weight end.", model_type=model_type), seconds=0.2)
    for _ in ("target", "draft"):
        log.line(render(pick("kv_allocated", v, "K size") or "KV Cache is allocated."))
        log.line(render(pick("pool_end", v) or "Memory pool end."))
    decode_begin = pick("capture_begin", v, "{capture_name} {graph_backend") or pick("capture_begin", v, "capture_bs")
    decode_end = pick("capture_end", v, "{capture_name} {graph_backend") or pick("capture_end", v, "Capture cuda")
    log.line(render(decode_begin or "Capture cuda graph begin.", capture_name="target verify"))
    log.bar("Capturing batches (bs={bs} avail_mem=59.80 GB)", len(BATCH_SIZES), sizes=BATCH_SIZES)
    log.line(render(decode_end or "Capture cuda graph end.", capture_name="target verify"), seconds=0.1)
    for what in ("draft decode", "draft extend"):
        begin = pick("capture_begin", v, f"Capture {what} CUDA graph begin. backend")
        finish = pick("capture_end", v, f"Capture {what} CUDA graph end. elapsed")
        if begin is None:
            begin = decode_begin
            finish = decode_end
        log.line(render(begin, capture_name=what))
        log.bar("Capturing batches (bs={bs} avail_mem=58.90 GB)", len(BATCH_SIZES), sizes=BATCH_SIZES)
        log.line(render(finish, capture_name=what), seconds=0.1)
    log.line(render(pick("load_end", v, "Committed")) if pick("load_end", v, "Committed") else None)
    log.line(render(pick("max_total_num_tokens", v) or "max_total_num_tokens=262144"))
    timings = pick("startup_timings", v)
    log.line(render(timings) if timings else None, tag="")
    log.line("Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)", tag="")
    log.line('127.0.0.1:40000 - "GET /model_info HTTP/1.1" 200 OK', tag="")
    log.line("Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00", seconds=0.2)
    log.line('127.0.0.1:40002 - "POST /generate HTTP/1.1" 200 OK', tag="")
    log.line(render(pick("ready", v, "fired up") or "The server is fired up and ready to roll!"), tag="")
    return "\n".join(log.lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("versions", nargs="+")
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures/logs/made"))
    args = parser.parse_args(argv)
    known = load_shipped_loglines()["versions"]
    args.out.mkdir(parents=True, exist_ok=True)
    for version in args.versions:
        if version not in known:
            print(f"{version}: not in the shipped table (run scripts/sglang_loglines.py)", file=sys.stderr)
            return 2
        path = args.out / f"made-sglang-{version}-standalone-ready.log"
        path.write_text(make_log(version), encoding="utf-8")
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
