"""The results store: one JSONL file per run in the user's state directory, appended as requests finish.

Each file starts with a `run` record, then one `request` record per finished request (warmups included,
marked), then a `summary` record when the run ends; a run read back without a summary (the app died) is
re-summarised from its requests and marked "incomplete". The directory is 0700 and the files 0600.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from specmon.bench.model import (
    MAX_STORED_TOKENS,
    BenchResult,
    RequestResult,
    RunSettings,
    ServerFacts,
    Summary,
)
from specmon.bench.prompts import token_ids
from specmon.inputs import MIB, parse_json, read_file
from specmon.private_files import make_private_dir, open_private_file, state_dir
from specmon.typed import FieldError, Time, convert
from specmon.urls import base_url

RESULTS_SUBDIR = "results"
MAX_RUN_FILE_BYTES = 512 * MIB
MAX_RECORD_DEPTH = 16
"""specmon's own records nest 5 levels (a summary's figures); a deeper one is not specmon's."""


def default_results_dir() -> Path:
    """`<state dir>/results` (`$SPECMON_STATE_DIR`, else platformdirs' user state directory for specmon)."""
    return state_dir() / RESULTS_SUBDIR


class ResultStore:
    """Appends benchmark records to `<dir>/<run_id>.jsonl` and reads runs back."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_results_dir()

    def path_for(self, run_id: str) -> Path:
        return self.directory / f"{run_id}.jsonl"

    def _append(self, run_id: str, record: dict[str, Any]) -> None:
        make_private_dir(self.directory)
        os.chmod(self.directory, 0o700)  # specmon's own directory: tightened even if it was there before
        line = json.dumps(record, separators=(",", ":"), default=str) + "\n"
        fd = open_private_file(self.path_for(run_id), append=True)
        try:
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)

    def start_run(self, result: BenchResult) -> None:
        """Write the run record (settings, server) before any request finishes."""
        self._append(
            result.run_id,
            {
                "kind": "run",
                "run_id": result.run_id,
                "preset": result.preset,
                "url": result.url,
                "started_at": result.started_at,
                "settings": result.settings.to_json(),
                "server": msgspec.to_builtins(result.server),
            },
        )

    def add_request(self, run_id: str, request: RequestResult) -> None:
        self._append(run_id, {"kind": "request", "run_id": run_id, **request.to_json()})

    def finish_run(self, result: BenchResult) -> None:
        self._append(
            result.run_id,
            {
                "kind": "summary",
                "run_id": result.run_id,
                "status": result.status,
                "finished_at": result.finished_at,
                "server": msgspec.to_builtins(result.server),
                "summary": result.summary.to_json(),
                "cross_checks": result.cross_checks,
                "notes": result.notes,
                "gpus": result.gpus,
            },
        )

    def run_ids(self) -> list[str]:
        """Every stored run id, oldest first (run ids sort by start time)."""
        if not self.directory.is_dir():
            return []
        return sorted(p.stem for p in self.directory.glob("*.jsonl"))

    def load(self, run_id: str) -> BenchResult:
        """One run read back; raises FileNotFoundError when there is no such run."""
        return read_run_file(self.path_for(run_id))

    def load_all(self, warn: Callable[[str], None] | None = None) -> list[BenchResult]:
        """Every readable run, oldest first by start time; each record or file skipped is told to `warn`."""
        runs = []
        for run_id in self.run_ids():
            path = self.path_for(run_id)
            try:
                runs.append(read_run_file(path, warn))
            except (OSError, ValueError) as exc:
                if warn is not None:
                    reason = exc.strerror if isinstance(exc, OSError) else str(exc).removeprefix(f"{path}: ")
                    warn(f"{path}: skipped ({reason})")
        return sorted(runs, key=lambda run: run.started_at)


MAX_PENDING_RUNS = 32
"""At most this many runs still being written (by another `specmon bench`) are watched until they finish."""


class StoreWatch:
    """The runs that other processes (a `specmon bench`, a sweep) add to a result store while the app runs,
    looked for cheaply: one stat of the directory says when files came (``due``, from the app's timer; a listing
    at least every ``RELIST_S``, for a file made within the directory's last timestamp tick); each new run is
    read once it has finished (``look``, on a thread), and re-read as it grows until then."""

    RELIST_S = 60.0

    def __init__(self, store: ResultStore) -> None:
        import threading

        self.store = store
        self._lock = threading.Lock()
        self._known: set[str] = set()
        self._pending: dict[str, tuple[int, int] | None] = {}
        """Each run still being written: its file's (size, mtime) when last read (None: not read yet)."""
        self._listed_mtime: int | None = None
        self._listed_at = 0.0

    def prime(self) -> list[str]:
        """The store's run ids now (oldest first), all known from here on: the app reads them itself."""
        with self._lock:
            run_ids = self._list()
            self._known.update(run_ids)
            return run_ids

    def watch_unfinished(self, run_ids: list[str]) -> None:
        """Runs read before they finished (status "incomplete"): read again once they grow."""
        with self._lock:
            for run_id in run_ids[-MAX_PENDING_RUNS:]:
                self._pending[run_id] = self._file_key(run_id)

    def due(self) -> bool:
        """Whether ``look`` has something to do: files may have come, or a run being written may have grown."""
        import time

        with self._lock:
            return (bool(self._pending) or self._directory_mtime() != self._listed_mtime
                    or time.monotonic() - self._listed_at >= self.RELIST_S)

    def look(self) -> tuple[list[BenchResult], int]:
        """The runs that finished since the last look (new files, and those being written that grew), and how
        many could not be read."""
        with self._lock:
            for run_id in self._list():
                if run_id not in self._known:
                    self._known.add(run_id)
                    self._pending[run_id] = None
            while len(self._pending) > MAX_PENDING_RUNS:
                del self._pending[next(iter(self._pending))]  # the oldest
            finished: list[BenchResult] = []
            unreadable = 0
            for run_id, seen in list(self._pending.items()):
                key = self._file_key(run_id)
                if key is None:
                    del self._pending[run_id]  # gone, or not a regular file
                    continue
                if key == seen:
                    continue
                try:
                    run = read_run_file(self.store.path_for(run_id))
                except (OSError, ValueError):
                    if seen is not None:  # a file just made may hold no whole record yet: once more
                        unreadable += 1
                        del self._pending[run_id]
                    else:
                        self._pending[run_id] = key
                    continue
                if run.status == "incomplete":
                    self._pending[run_id] = key
                else:
                    finished.append(run)
                    del self._pending[run_id]
            return sorted(finished, key=lambda run: run.started_at), unreadable

    def _list(self) -> list[str]:
        import time

        self._listed_mtime, self._listed_at = self._directory_mtime(), time.monotonic()  # before the listing
        return self.store.run_ids()

    def _directory_mtime(self) -> int | None:
        try:
            return os.stat(self.store.directory).st_mtime_ns
        except OSError:
            return None

    def _file_key(self, run_id: str) -> tuple[int, int] | None:
        try:
            st = os.lstat(self.store.path_for(run_id))
        except OSError:
            return None
        return (st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None


def read_run_file(path: Path, warn: Callable[[str], None] | None = None) -> BenchResult:
    """A BenchResult from one run's JSONL file; a torn last line (a crash mid-write) is ignored.

    A record that is not what specmon writes (wrong types, NaN, impossible counts) is skipped, told to `warn`
    as FILE:LINE and kept in the run's `skipped_records` (each reader says how many and why); a bad summary
    record makes the run re-summarised from its requests.
    """
    from specmon.bench.summary import summarize

    result: BenchResult | None = None
    summary_record: SummaryRecord | None = None
    requests: list[RequestResult] = []
    skipped: list[SkippedRecord] = []
    lines = _read_lines(path)
    for number, line in enumerate(lines, 1):
        try:
            record = parse_json(line, where="the record", max_depth=MAX_RECORD_DEPTH, finite=True)
            kind = record.get("kind") if isinstance(record, dict) else None
            if kind == "run":
                result = _run_record(record)
            elif kind == "request":
                requests.append(_request_record(record, result))
            elif kind == "summary":
                summary_record = _summary_record(record)
            else:
                raise ValueError("not a run, request or summary record")
        except (ValueError, TypeError) as exc:
            if number == len(lines) and not line.endswith("\n"):
                continue  # torn last line
            skipped.append(SkippedRecord(str(path), number, str(exc)))
            if warn is not None:
                warn(f"{path}:{number}: record skipped ({exc})")
    if result is None:
        raise ValueError("no run record")
    result.requests = requests
    result.skipped_records = [s.to_json() for s in skipped]
    if summary_record is not None:
        result.status = summary_record.status
        result.finished_at = summary_record.finished_at
        result.server = summary_record.server or result.server
        result.summary = summary_record.summary or Summary()
        result.cross_checks = summary_record.cross_checks or {}
        result.notes = summary_record.notes or []
        result.gpus = summary_record.gpus or []
    else:
        result.status = "incomplete"
        result.summary = summarize(requests, result.settings.max_new_tokens, result.settings.ignore_eos)
    return result


@dataclass(frozen=True)
class SkippedRecord:
    """A stored record the reader left out: where it was and why."""

    path: str
    line: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "reason": self.reason}


def skipped_note(run: BenchResult) -> str | None:
    """One line saying how many of the run's stored records were skipped and why (None when none was)."""
    skipped = run.skipped_records
    if not skipped:
        return None
    reasons = Counter(_reason_kind(str(s.get("reason", ""))) for s in skipped)
    why = "; ".join(f"{count}× {reason}" if count > 1 else reason for reason, count in reasons.most_common(3))
    more = f"; {len(reasons) - 3} other reasons" if len(reasons) > 3 else ""
    noun = "record" if len(skipped) == 1 else "records"
    return f"run {run.run_id}: {len(skipped)} stored {noun} skipped ({why}{more})"


def _reason_kind(reason: str) -> str:
    """A skip reason without its figures, so that like reasons are counted together."""
    return re.sub(r"-?\d[\d.e+]*", "N", reason)


def _read_lines(path: Path) -> list[str]:
    """The file's lines: a regular file (not through a link) of at most MAX_RUN_FILE_BYTES."""
    text = read_file(path, MAX_RUN_FILE_BYTES, what="results file", follow=False).decode("utf-8", "replace")
    *whole, last = text.split("\n")
    return [line + "\n" for line in whole] + ([last] if last else [])


def _is_number(value: Any, low: float = 0.0, high: float = 1e12) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and low <= value <= high


class RunRecord(msgspec.Struct, kw_only=True):
    """The first record of a run's file: what was run against which server (its settings before any request)."""

    run_id: str
    preset: str = ""
    url: str = ""
    started_at: Time = 0.0
    settings: RunSettings | None = None
    server: ServerFacts | None = None


class SummaryRecord(msgspec.Struct, kw_only=True):
    """The last record of a finished run's file: how it ended, the server's settings then, and the summary."""

    status: str = "finished"
    finished_at: Time | None = None
    server: ServerFacts | None = None
    summary: Summary | None = None
    cross_checks: dict[str, Any] | None = None
    notes: list[str] | None = None
    gpus: list[dict[str, Any]] | None = None


def _typed_record(record: dict[str, Any], kind: type[Any]) -> Any:
    """`record` as a `kind`; ValueError naming the first key that is not what specmon writes."""
    try:
        return convert(record, kind, table="an object")
    except FieldError as exc:
        raise ValueError(exc.message) from None


def _run_record(record: dict[str, Any]) -> BenchResult:
    run = _typed_record(record, RunRecord)
    if run.url:
        base_url(run.url, what="its url")  # UrlRefused (a ValueError): a user:password@ is never shown nor exported
    return BenchResult(
        run_id=run.run_id, preset=run.preset, url=run.url, started_at=float(run.started_at),
        settings=run.settings or RunSettings(), server=run.server or ServerFacts(),
    )


REQUEST_NUMBERS = ("ttft_s", "decode_tok_s", "e2e_s", "accept_length", "server_e2e_s")


def token_limits(run: BenchResult | None) -> tuple[int, int]:
    """The most prompt tokens and completion tokens a request of `run` can hold: a prompt by the server's
    context length (else the sane cap), a completion by max_new_tokens plus a verify step's overshoot."""
    from specmon.bench.stream import MAX_TOKEN_OVERSHOOT

    prompt_limit = completion_limit = MAX_STORED_TOKENS
    if run is not None:
        context = run.server.context_length
        if isinstance(context, int) and 0 < context <= MAX_STORED_TOKENS:
            prompt_limit = context
        completion_limit = run.settings.max_new_tokens + MAX_TOKEN_OVERSHOOT
    return prompt_limit, completion_limit


def _count_field(request: RequestResult, name: str, limit: int, what: str) -> None:
    value = getattr(request, name)
    if value is None and name != "completion_tokens":
        return
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= limit:
        raise ValueError(f"{name} is {value!r}, not a count of at most {limit} ({what})")


def _request_record(record: dict[str, Any], run: BenchResult | None) -> RequestResult:
    """A request record checked field by field: what specmon itself writes, nothing else. Each count is bounded
    by what it is: the prompt by the context length, the completion by max_new_tokens plus overshoot."""
    request = RequestResult.from_json(record)
    if not isinstance(request.index, int) or isinstance(request.index, bool) or not isinstance(request.prompt_id, str):
        raise ValueError("index or prompt_id of the wrong type")
    for name in REQUEST_NUMBERS:
        value = getattr(request, name)
        if value is not None and not _is_number(value):
            raise ValueError(f"{name} is {value!r}")
    prompt_limit, limit = token_limits(run)
    _count_field(request, "prompt_tokens", prompt_limit, "the context length")
    _count_field(request, "completion_tokens", limit, "max_new_tokens plus overshoot")
    _count_field(request, "spec_verify_ct", limit, "one token or more per verify step")
    gaps, chunks = request.chunk_gaps_ms, request.chunk_tokens
    if not isinstance(gaps, list) or not isinstance(chunks, list) or len(gaps) != len(chunks) or len(chunks) > limit:
        raise ValueError("chunk_gaps_ms and chunk_tokens are not two lists of one length")
    if not all(_is_number(g) for g in gaps) or not all(isinstance(n, int) and 0 <= n <= limit for n in chunks):
        raise ValueError("a chunk gap or chunk token count out of range")
    if sum(chunks) > limit:
        raise ValueError(f"its chunks hold {sum(chunks)} tokens, more than {limit}")
    if not isinstance(request.output_text, str) or not isinstance(request.flags, list):
        raise ValueError("output_text or flags of the wrong type")
    if not isinstance(request.category, str) or not isinstance(request.prompt_hash, str) or not (
            request.prompt_text is None or isinstance(request.prompt_text, str)):
        raise ValueError("category, prompt_hash or prompt_text of the wrong type")
    if request.prompt_ids is not None:
        try:
            token_ids(request.prompt_ids)
        except ValueError as exc:
            raise ValueError(f"prompt_ids: {exc}") from None
    if request.max_new_tokens is not None:
        _count_field(request, "max_new_tokens", limit, "the run's max_new_tokens")
    if request.error is not None and not isinstance(request.error, str):
        raise ValueError("error is not a string")
    request.ok = request.ok is True
    request.warmup = request.warmup is True
    return request


def _summary_record(record: dict[str, Any]) -> SummaryRecord:
    """A summary record whose figures the formatters can print (else ValueError: re-summarised instead)."""
    return _typed_record(record, SummaryRecord)
