"""The results store: one JSONL file per run in the user's state directory, appended as requests finish.

Each file starts with a `run` record, then one `request` record per finished request (warmups included,
marked), then a `summary` record when the run ends; a run read back without a summary (the app died) is
re-summarised from its requests and marked "incomplete". The directory is 0700 and the files 0600.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from specmon.tui.bench.model import BenchResult, RequestResult
from specmon.tui.private_files import make_private_dir, open_private_file

RESULTS_SUBDIR = "results"


def default_results_dir() -> Path:
    """`<user state dir>/specmon/results` (platformdirs; honours XDG_STATE_HOME)."""
    from platformdirs import user_state_dir

    return Path(user_state_dir("specmon")) / RESULTS_SUBDIR


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
                "settings": result.settings,
                "server": result.server,
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
                "server": result.server,
                "summary": result.summary,
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

    def load_all(self) -> list[BenchResult]:
        """Every readable run, oldest first by start time (unreadable files are skipped)."""
        runs = []
        for run_id in self.run_ids():
            try:
                runs.append(self.load(run_id))
            except (OSError, ValueError):
                continue
        return sorted(runs, key=lambda run: run.started_at)


def read_run_file(path: Path) -> BenchResult:
    """A BenchResult from one run's JSONL file; a torn last line (a crash mid-write) is ignored."""
    from specmon.tui.bench.stats import summarize

    result: BenchResult | None = None
    summary_record: dict[str, Any] | None = None
    requests: list[RequestResult] = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            kind = record.get("kind")
            if kind == "run":
                result = BenchResult(
                    run_id=record["run_id"],
                    preset=record.get("preset", ""),
                    url=record.get("url", ""),
                    started_at=record.get("started_at", 0.0),
                    settings=record.get("settings") or {},
                    server=record.get("server") or {},
                )
            elif kind == "request":
                requests.append(RequestResult.from_json(record))
            elif kind == "summary":
                summary_record = record
    if result is None:
        raise ValueError(f"{path}: no run record")
    result.requests = requests
    if summary_record is not None:
        result.status = summary_record.get("status", "finished")
        result.finished_at = summary_record.get("finished_at")
        result.server = summary_record.get("server") or result.server
        result.summary = summary_record.get("summary") or {}
        result.cross_checks = summary_record.get("cross_checks") or {}
        result.notes = summary_record.get("notes") or []
        result.gpus = summary_record.get("gpus") or []
    else:
        result.status = "incomplete"
        result.summary = summarize(
            requests, result.settings.get("max_new_tokens"), result.settings.get("ignore_eos", True)
        )
    return result
