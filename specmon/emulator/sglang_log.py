"""SGLang's log output: its own logger lines and tqdm frames on stderr, uvicorn's access lines on stdout."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import TextIO

_TQDM_PARTIALS = " ▏▎▍▌▋▊▉"
_TQDM_WIDTH = 10
_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}


def _tqdm_clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def tqdm_bar(n: int, total: int) -> str:
    """tqdm's 10-cell bar for n of total (the width tqdm falls back to without a terminal)."""
    frac = n / total if total else 0.0
    full, part = divmod(int(frac * _TQDM_WIDTH * 8), 8)
    bar = "█" * full
    if full < _TQDM_WIDTH:
        bar += _TQDM_PARTIALS[part]
    return bar.ljust(_TQDM_WIDTH)


def tqdm_frame(desc: str, n: int, total: int, elapsed: float, *, shards_style: bool = False) -> str:
    """One tqdm refresh, as tqdm renders it over a pipe (without the leading carriage return)."""
    if n == 0 or elapsed <= 0:
        timing = f"[{_tqdm_clock(elapsed)}<?, ?it/s]"
    else:
        rate = n / elapsed
        remaining = (total - n) / rate
        rate_text = f"{rate:5.2f}it/s" if rate >= 1 else f"{1 / rate:5.2f}s/it"
        timing = f"[{_tqdm_clock(elapsed)}<{_tqdm_clock(remaining)}, {rate_text}]"
    pct = 100 * n / total if total else 0.0
    if shards_style:
        return f"{desc}: {pct:3.0f}% Completed | {n}/{total} {timing}"
    prefix = f"{desc}: " if desc else ""
    return f"{prefix}{pct:3.0f}%|{tqdm_bar(n, total)}| {n}/{total} {timing}"


class SGLangLogWriter:
    """Writes log records exactly as an SGLang server prints them, flushing after every write.

    `family` is "new" (0.5.16: milliseconds-free `[ts] msg`, process tags when tp > 1) or "legacy" (0.5.3).
    `ranks` are the TP ranks on this node (all of them unless `--nnodes` splits them): a record of a rank on
    another node is not written here, nor are the tqdm bars, which only TP rank 0 prints.
    Threads may write concurrently; each record is written whole.
    """

    def __init__(
        self,
        tp_size: int = 1,
        err: TextIO | None = None,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.time,
        level: str = "info",
        http_level: str | None = None,
        ranks: list[int] | None = None,
    ) -> None:
        self.tp_size = tp_size
        self.ranks = list(ranks) if ranks is not None else list(range(max(1, tp_size)))
        self._level = _LEVELS.get(level.lower(), 20)
        self._http_level = _LEVELS.get((http_level or level).lower(), 20)
        self._err = err or sys.stderr
        self._out = out or sys.stdout
        self._clock = clock
        self._lock = threading.Lock()

    def _stamp(self) -> str:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self._clock()))

    def _write(self, stream: TextIO, text: str) -> None:
        with self._lock:
            try:
                stream.write(text)
                stream.flush()
            except (BrokenPipeError, ValueError):
                pass

    def _tag(self, rank: int | None) -> str:
        if rank is None or self.tp_size <= 1:
            return ""
        return f" TP{rank}"

    def info(self, message: str, rank: int | None = None, *, level: int = 20) -> None:
        """An SGLang logger record: `[ts TPn] message` (no level name, like SGLang), if --log-level lets it."""
        if rank is not None and self.tp_size > 1 and rank not in self.ranks:
            return
        if level >= self._level:
            self._write(self._err, f"[{self._stamp()}{self._tag(rank)}] {message}\n")

    def warning(self, message: str, rank: int | None = None) -> None:
        self.info(message, rank, level=30)

    def error(self, message: str, rank: int | None = None) -> None:
        self.info(message, rank, level=40)

    def all_ranks(self, message: str) -> None:
        """A scheduler record every TP rank prints."""
        if self._level > 20:
            return
        for rank in self.ranks:
            self.info(message, rank if self.tp_size > 1 else None)

    def raw(self, text: str) -> None:
        """Text written to stderr as it is (warnings, tracebacks, bare pre-logging messages)."""
        self._write(self._err, text if text.endswith("\n") else text + "\n")

    def frame(self, text: str, *, newline: bool = False) -> None:
        """One tqdm refresh: `\\r` + text, with a newline only at close (or always, for legacy shard bars)."""
        if 0 not in self.ranks:
            return
        self._write(self._err, "\r" + text + ("\n" if newline else ""))

    def end_frames(self) -> None:
        if 0 not in self.ranks:
            return
        self._write(self._err, "\n")

    def uvicorn(self, message: str, level: str = "INFO") -> None:
        """A uvicorn default-logger record (stderr): `[ts] INFO:     message`."""
        if _LEVELS.get(level.lower(), 20) < self._http_level:
            return
        self._write(self._err, f"[{self._stamp()}] {level + ':':<9} {message}\n")

    def access(self, client: tuple[str, int], request_line: str, status: int) -> None:
        """A uvicorn access-log record (stdout)."""
        if self._http_level > 20:
            return
        phrase = HTTPStatus(status).phrase
        self._write(
            self._out,
            f'[{self._stamp()}] INFO:     {client[0]}:{client[1]} - "{request_line}" {status} {phrase}\n',
        )
