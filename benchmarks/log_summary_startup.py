"""`log-summary` on startup-heavy logs (progress frames and startup lines), as a ratio against a bare Python loop,
and `log-summary --follow` keeping up with a writer of 100,000 lines a second (startup-heavy or serving lines).

The startup-heavy log is a real SGLang 0.5.16 startup (tests/fixtures/logs/03-…-ready.log, DFLASH on a GB10) whose
CUDA-graph capture is made long: after its `Capture target verify CUDA graph begin` line, --blocks captures as
SGLang 0.5.16 and tqdm write them over a pipe (a `Capture target verify CUDA graph begin. … bs=[1, …, 512]` line,
`\\r`-redrawn frames on one physical line, `Capturing batches (bs=N avail_mem=… GB): P%|…| n/512 [..]`, two per
batch size, then the `… CUDA graph end. elapsed=…` line), then the rest of the startup to ready. The plain-startup
kind is the real startup's plain lines (its lines before ready, frames left out) over and over, then ready. The
serving kind is the startup to just before ready, then real-shaped 0.5.16 `Decode batch` / `Prefill batch` / access lines
(`benchmarks.log_summary_serving.serving_lines`), then ready.

1. ratio: in one process, interleaved, --repeat runs each of a bare `for line in f: pass` (binary and text; the
   faster is the baseline) and `summarize_stream`, over the same startup-heavy file; best of each; the ratio is
   baseline time / summary time. Items are lines plus progress frames. The binary loop yields only the physical
   lines (a capture's frames share one), the text loop every frame: the ratio to the text loop is printed too.
2. follow: `python -m specmon log-summary --follow LOG` as a child process while a writer appends the log at
   --rate items a second (10 ms batches) for --seconds, the ready line last; the lag is from the ready line
   written to the child's exit (it exits at ready). Keeping up: the lag stays under a second.

    .venv/bin/python -m benchmarks.log_summary_startup [--blocks 400] [--repeat 3] [--rate 100000] [--seconds 10]
        [--follow-kinds plain-startup] [--baseline DIR --rounds 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from benchmarks.checkouts import alternated, checkout_env
from benchmarks.log_summary_serving import READY_LINE, STARTUP_LOG, bare_loop, serving_lines, summarize

BEGIN = b"Capture target verify CUDA graph begin."
NL, CR = b"\n", b"\r"
BAR = "\u2588"


def capture_block(index: int, sizes: int = 512) -> bytes:
    """One capture as SGLang 0.5.16 prints it: begin line, tqdm frames on one physical line, end line."""
    stamp = f"[2026-08-01 23:43:{index % 60:02d}]"
    frames = [f"  0%|          | 0/{sizes} [00:00<?, ?it/s]"]
    mem = 60.0
    for done in range(sizes):
        bs = sizes - done
        mem -= 0.01
        pct = 100 * done // sizes
        bar = (BAR * (pct // 10)).ljust(10)
        head = f"Capturing batches (bs={bs} avail_mem={mem:.2f} GB): "
        elapsed = f"00:{10 * done // sizes:02d}"  # tqdm's elapsed time counts up: 10 s for the whole capture
        frames.append(f"{head}{pct:3d}%|{bar}| {done}/{sizes} [{elapsed}<00:10,  9.{done % 10}0it/s]")
        pct = 100 * (done + 1) // sizes
        bar = (BAR * (pct // 10)).ljust(10)
        frames.append(f"{head}{pct:3d}%|{bar}| {done + 1}/{sizes} [{elapsed}<00:10,  9.{done % 10}0it/s]")
    sizes_text = ", ".join(str(b) for b in range(1, sizes + 1))
    begin = (f"{stamp} Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=16, "
             f"bs=[{sizes_text}], avail mem=60.00 GB\n")
    end = f"{stamp} Capture target verify CUDA graph end. elapsed=10.00 s, mem usage=0.50 GB, avail mem={mem:.2f} GB.\n"
    return (begin + "\r" + "\r".join(frames) + "\n" + end).encode()


def _startup_parts() -> tuple[bytes, bytes, bytes]:
    """The startup up to the capture's begin line, from there to just before ready, and the ready line."""
    raw = STARTUP_LOG.read_bytes()
    ready = raw.index(READY_LINE)
    ready_start = raw.rindex(b"\n", 0, ready) + 1
    ready_end = raw.index(b"\n", ready) + 1
    cut = raw.index(b"\n", raw.index(BEGIN)) + 1
    return raw[:cut], raw[cut:ready_start], raw[ready_start:ready_end]


def startup_heavy(blocks: int) -> list[bytes]:
    """The pieces of a startup-heavy log, in order, the ready line last."""
    head, rest, ready = _startup_parts()
    return [head, *(capture_block(i) for i in range(blocks)), rest, ready]


def plain_startup_kind(lines: int) -> list[bytes]:
    """The real startup's plain lines (its lines before ready, without its progress bars' frames) over and over,
    ``lines`` of them, then the ready line: a startup whose cost is per line, not per frame."""
    head, rest, ready = _startup_parts()
    plain = [line for line in (head + rest).splitlines(keepends=True) if b"\r" not in line]
    body = b"".join(plain * -(-lines // len(plain)))
    cut = 0
    for _ in range(lines):
        cut = body.index(b"\n", cut) + 1
    return [body[:cut], ready]


def serving_kind(lines: int) -> list[bytes]:
    head, rest, ready = _startup_parts()
    body = serving_lines(lines, datetime(2026, 8, 1, 23, 44, 0))
    pieces = [b"\n".join(body[i:i + 10_000]) + b"\n" for i in range(0, len(body), 10_000)]
    return [head + rest, *pieces, ready]


def items_in(data: bytes) -> int:
    return data.count(b"\n") + data.count(b"\r")


WRITER = r"""
import sys, time
src, dst, rate, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
data = open(src, "rb").read()
ready_at = data.rindex(b"\n", 0, len(data) - 1) + 1  # the ready line goes last, on its own
body, ready = data[:ready_at], data[ready_at:]
ends = [i + 1 for i, c in enumerate(body) if c in (10, 13)]
limit = min(len(ends), int(rate * seconds))
with open(dst, "ab", buffering=0) as out:
    start, done, pos = time.monotonic(), 0, 0
    while done < limit:
        due = min(limit, int((time.monotonic() - start) * rate))
        if due > done:
            end = ends[due - 1]
            out.write(body[pos:end])
            pos, done = end, due
        time.sleep(0.01)
    out.write(body[pos:] + ready)
    print(done, time.monotonic() - start, time.time(), flush=True)
"""


def follow(pieces: list[bytes], rate: int, seconds: float, tmp: str, name: str, checkout: Path | None = None) -> dict:
    source = Path(tmp) / f"{name}.src"
    source.write_bytes(b"".join(pieces))
    log = Path(tmp) / f"{name}.log"
    log.write_bytes(b"")
    env = checkout_env(checkout)
    child = subprocess.Popen([sys.executable, "-m", "specmon", "log-summary", "--follow", str(log)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=checkout)
    time.sleep(1.0)  # the child has started and follows the empty file
    writer = subprocess.run([sys.executable, "-c", WRITER, str(source), str(log), str(rate), str(seconds)],
                            capture_output=True, text=True, check=True)
    written, took, ready_written = writer.stdout.split()
    _, status, usage = os.wait4(child.pid, 0)
    lag = time.time() - float(ready_written)
    child.returncode = os.waitstatus_to_exitcode(status)
    return {"written": int(written), "write_s": float(took), "lag_s": lag, "exit": child.returncode,
            "cpu_s": usage.ru_utime + usage.ru_stime}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=400, help="capture blocks (1,025 frames each)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rate", type=int, default=100_000, help="items a second for --follow")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--no-follow", action="store_true")
    parser.add_argument("--baseline", type=Path, help="another checkout whose --follow is timed too, alternated")
    parser.add_argument("--rounds", type=int, default=1, help="alternations of the checkouts for --follow")
    parser.add_argument("--follow-kinds", default="startup-heavy,plain-startup,serving",
                        help="which logs --follow is timed on (comma-separated)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="specmon-startup-") as tmp:
        log = Path(tmp) / "startup-heavy.log"
        data = b"".join(startup_heavy(args.blocks))
        log.write_bytes(data)
        items = items_in(data)
        lines, frames = data.count(NL), data.count(CR)
        print(f"# startup-heavy log: {lines:,} lines and {frames:,} progress frames "
              f"({items:,} items), {len(data) / 1e6:.0f} MB")
        times: dict[str, list[float]] = {"rb": [], "r": [], "summary": []}
        state = None
        for _ in range(args.repeat):
            times["rb"].append(bare_loop(log, "rb"))
            times["r"].append(bare_loop(log, "r"))
            elapsed, state = summarize(log)
            times["summary"].append(elapsed)
        best = {k: min(v) for k, v in times.items()}
        for key, label in (("rb", "bare loop, binary"), ("r", "bare loop, text"), ("summary", "summarize_stream")):
            runs = ", ".join(f"{t:.3f}" for t in times[key])
            print(f"{label:<20} best {best[key]:.3f} s  {items / best[key]:>12,.0f} items/s  (runs: {runs})")
        ratio = min(best["rb"], best["r"]) / best["summary"]
        print(f"ratio summarize_stream / fastest bare loop: {ratio:.3f}; state {state.state}, "  # type: ignore[union-attr]
              f"{len(state.captures)} captures")  # type: ignore[union-attr]
        print(f"ratio to the text loop (the bare loop that yields every frame): {best['r'] / best['summary']:.3f}")
        if args.no_follow:
            return 0
        kinds = {"startup-heavy": lambda: startup_heavy(args.blocks),
                 "plain-startup": lambda: plain_startup_kind(int(args.rate * args.seconds)),
                 "serving": lambda: serving_kind(int(args.rate * args.seconds))}
        for name in args.follow_kinds.split(","):
            pieces = kinds[name]()
            sides = [("this", None)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
            for side, checkout in alternated(sides, args.rounds):
                result = follow(pieces, args.rate, args.seconds, tmp, name, checkout)
                rate = result["written"] / result["write_s"]
                print(f"--follow, {name} ({side}): {result['written']:,} items written at {rate:,.0f}/s; "
                      f"ready written → exit {result['lag_s']:.2f} s (exit code {result['exit']}); "
                      f"its CPU {result['cpu_s']:.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
