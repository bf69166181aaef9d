"""What reading a serving log costs in CPython before any real work: the floor under `log-summary`'s ratio.

Issue 24 asks `log-summary` for ≥ 0.5× a bare binary loop on serving logs, i.e. at most twice the loop's time.
This times, on `log_summary_serving`'s log (a real startup, then real-shaped 0.5.16 serving lines) and in one
run (best of ``--repeat``, interleaved), the parts any exact reader needs and `summarize_stream` itself:

- ``bare loop``: ``for line in f: pass`` in binary mode (the baseline);
- ``read``: the file in 1 MiB ``read1`` chunks, nothing else;
- ``lines``: read, split every chunk at ``\n`` (memchr) and count the lines: finding and counting each line;
- ``lines + cheapest test``: the same, and one ``bytes.startswith(tails, 20)`` a line, mapped in C: looser than
  the steady-line pattern (no timestamp test), the cheapest test of every line's head Python has;
- ``regex scan``: one ``re`` pass over every chunk that tests nothing (``(?:.*\n)*``);
- ``regex scan + steady test``: the same pass matching the steady-line pattern at each line's head (runs of
  steady lines; a line that is not steady is stepped over), the exact test `summarize_stream` makes in ``re``;
- ``summarize_stream``: what `log-summary` runs;
- ``numpy words`` (only where numpy imports; specmon does not depend on it): the newline positions and an
  8-byte word gathered at each line's offsets 0, 8, 16, 24 and 32, tested against the timestamp and the tails
  of the tagless shapes in SWAR masks: an estimate of a vectorised exact pre-test (not complete: tagged heads,
  lines it cannot vouch for, the run bookkeeping are left out).

    .venv/bin/python -m benchmarks.log_summary_floor --lines 1000000
    PYTHONPATH=. python3 -m benchmarks.log_summary_floor --lines 1000000   # a Python with numpy, for that row
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import repeat
from pathlib import Path

from benchmarks.log_summary_serving import bare_loop, build_log, summarize
from specmon.logs.tracker import STEADY_WHEN_READY

CHUNK = 1 << 20
TAILS = (b"] Decode batch", b"] Prefill batch", b"] INFO:")
_SCAN = re.compile(rb"(?:.*\n)*")
_STEADY_RUN = re.compile(rb"(?:" + STEADY_WHEN_READY + rb".*\n)*")


def chunks_of_lines(path: Path):
    """The file's complete lines, a 1 MiB read at a time (a cut line carried to the next read)."""
    with open(path, "rb") as f:
        read = f.read1
        carry = b""
        while chunk := read(CHUNK):
            if carry:
                chunk = carry + chunk
            end = chunk.rfind(b"\n") + 1
            carry = chunk[end:]
            yield chunk[:end] if carry else chunk


def read_only(path: Path) -> int:
    with open(path, "rb") as f:
        read = f.read1
        size = 0
        while chunk := read(CHUNK):
            size += len(chunk)
    return size


def lines(path: Path) -> int:
    count = 0
    for chunk in chunks_of_lines(path):
        count += len(chunk.split(b"\n")) - 1
    return count


def lines_tested(path: Path) -> int:
    """The lines whose head does not pass the loose test (a count, so the test cannot be skipped)."""
    failed = 0
    for chunk in chunks_of_lines(path):
        split = chunk.split(b"\n")
        split.pop()
        failed += len(split) - sum(map(bytes.startswith, split, repeat(TAILS), repeat(20)))
    return failed


def regex_scan(path: Path) -> int:
    ends = 0
    for chunk in chunks_of_lines(path):
        ends += _SCAN.match(chunk).end()  # type: ignore[union-attr]
    return ends


def regex_steady(path: Path) -> int:
    """The lines that are not steady (stepped over one by one)."""
    other = 0
    for chunk in chunks_of_lines(path):
        pos, size = 0, len(chunk)
        while (pos := _STEADY_RUN.match(chunk, pos).end()) < size:  # type: ignore[union-attr]
            pos = chunk.index(b"\n", pos) + 1
            other += 1
    return other


def numpy_words() -> Callable[[Path], int] | None:
    try:
        import numpy as np
    except ImportError:
        return None
    head = b"[0000-00-00 00:00:00"
    digit = [c == ord("0") for c in head]

    def masks(offset: int, shape: bytes, digits: list[bool]) -> tuple[int, int, int, int]:
        """(hi mask, hi expected, lo mask, lo add) for the 8 bytes at ``offset`` of ``shape`` (short: unchecked)."""
        hi_mask = hi_want = lo_mask = lo_add = 0
        for i in range(8):
            k = offset + i
            if k >= len(shape):
                continue
            if digits[k] if k < len(digits) else False:
                hi_mask |= 0xF0 << (8 * i)
                hi_want |= 0x30 << (8 * i)
                lo_mask |= 0x0F << (8 * i)
                lo_add |= 0x06 << (8 * i)
            else:
                hi_mask |= 0xFF << (8 * i)
                hi_want |= shape[k] << (8 * i)
        return hi_mask, hi_want, lo_mask, lo_add

    tens = int.from_bytes(b"\x10" * 8, "little")
    stamp = [masks(o, head, digit) for o in (0, 8, 16)]
    tails = [[masks(o, head + tail, digit) for o in (16, 24, 32)] for tail in TAILS]
    u64 = np.uint64

    def passes(word, m: tuple[int, int, int, int]):
        ok = (word & u64(m[0])) == u64(m[1])
        if m[2]:
            ok &= ((word & u64(m[2])) + u64(m[3])) & u64(m[2] and tens) == 0
        return ok

    def run(path: Path) -> int:
        failed = 0
        for chunk in chunks_of_lines(path):
            padded = chunk + bytes(48)
            a = np.frombuffer(padded, np.uint8)
            ends = np.flatnonzero(a[: len(chunk)] == 10)
            starts = np.empty(len(ends), np.int64)
            starts[0] = 0
            starts[1:] = ends[:-1] + 1
            words = np.ndarray((len(padded) - 7,), "<u8", padded, 0, (1,))
            w = [words[starts + o] for o in (0, 8, 16, 24, 32)]
            ok = passes(w[0], stamp[0]) & passes(w[1], stamp[1]) & passes(w[2], stamp[2])
            tail_ok = np.zeros(len(starts), bool)
            for t in tails:
                tail_ok |= passes(w[2], t[0]) & passes(w[3], t[1]) & passes(w[4], t[2])
            failed += int(len(starts) - np.count_nonzero(ok & tail_ok))
        return failed

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000, help="serving lines after the startup")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the best is reported")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="specmon-floor-") as tmp:
        log = Path(tmp) / "serving.log"
        total = build_log(log, args.lines)
        cases: dict[str, Callable[[], object]] = {
            "bare loop, binary": lambda: bare_loop(log, "rb"),
            "read": lambda: read_only(log),
            "lines": lambda: lines(log),
            "lines + cheapest test": lambda: lines_tested(log),
            "regex scan": lambda: regex_scan(log),
            "regex scan + steady test": lambda: regex_steady(log),
            "summarize_stream": lambda: summarize(log),
        }
        words = numpy_words()
        if words is not None:
            cases["numpy words"] = lambda: words(log)
        print(
            f"# {platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs: "
            f"{total:,} lines, {log.stat().st_size / 1e6:.0f} MB"
            + ("" if words else "; numpy not installed: no numpy row")
        )
        times: dict[str, list[float]] = {name: [] for name in cases}
        results: dict[str, object] = {}
        for _ in range(args.repeat):
            for name, case in cases.items():
                started = time.perf_counter()
                results[name] = case()
                times[name].append(time.perf_counter() - started)
        baseline = min(times["bare loop, binary"])
        print(f"budget for 0.5×: {2 * baseline:.3f} s")
        for name, runs in times.items():
            best = min(runs)
            print(
                f"{name:<24} best {best:.3f} s  {best / total * 1e9:5.0f} ns/line  ratio {baseline / best:.2f}"
            )
        if results["lines"] != total:
            print(f"!! counted {results['lines']:,} lines of {total:,}", file=sys.stderr)
            return 2
        print(
            f"lines failing the loose test: {results['lines + cheapest test']}; "
            f"not steady: {results['regex scan + steady test']}"
            + (f"; failing the numpy test: {results['numpy words']}" if words else "")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
