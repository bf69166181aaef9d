"""Where a server's request records are, from its own command line (SGLang's flags, as server_args.py has them):
`--export-metrics-to-file --export-metrics-to-file-dir DIR` writes export files into DIR; `--log-requests` with
`--log-requests-target stdout|DIR ...` (default stdout) writes request.finished lines into each DIR, and, for
stdout, into the server's own log (the text format always goes there)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specmon.oncall.discovery import FoundServer

MAX_PATHS = 8


def _values(argv: Sequence[str], flag: str) -> list[str] | None:
    """The values after `flag` (`--flag A B` or `--flag=A`) up to the next option; None when the flag is absent."""
    found: list[str] | None = None
    for i, word in enumerate(argv):
        if word == flag:
            found = []
            for value in argv[i + 1:]:
                if value.startswith("--"):
                    break
                found.append(value)
        elif word.startswith(flag + "="):
            found = [word.partition("=")[2]]
    return found


def record_paths(argv: Sequence[str], log_path: str | None = None, cwd: str | None = None) -> list[str]:
    """The paths a server launched with `argv` writes its request records to (relative ones against `cwd`, the
    server's working directory when known); `log_path` is its log, where stdout's records go."""
    argv = [str(word) for word in argv]
    paths: list[str] = []
    export_dir = _values(argv, "--export-metrics-to-file-dir")
    if "--export-metrics-to-file" in argv and export_dir:
        paths.append(export_dir[0])
    if "--log-requests" in argv:
        targets = _values(argv, "--log-requests-target") or ["stdout"]
        text_format = (_values(argv, "--log-requests-format") or ["text"])[0] != "json"
        for target in targets:
            if target.lower() == "stdout":
                continue
            paths.append(target)
        if (text_format or any(t.lower() == "stdout" for t in targets)) and log_path:
            paths.append(log_path)
    resolved = [os.path.join(cwd, p) if cwd and not os.path.isabs(p) else p for p in paths]
    return list(dict.fromkeys(resolved))[:MAX_PATHS]


def records_of(server: FoundServer) -> list[str]:
    """The record paths of a server specmon launched, relative ones against its own working directory (read from
    the live process; specmon's when it cannot be read)."""
    import psutil

    try:
        cwd: str | None = psutil.Process(server.pid).cwd()
    except (psutil.Error, OSError):
        cwd = None
    return record_paths(server.argv, server.log, cwd)


def launched_at(url: str) -> list[str]:
    """The record paths of the live server specmon launched that answers at `url` (what a `monitor --url`, and so
    a fleet drill-down, of a local server of yours reads); [] when none is known."""
    from specmon.oncall.discovery import find_servers

    wanted = url.rstrip("/").lower()
    for server in find_servers(with_gpus=False).alive():
        if server.launched_by_specmon and server.argv and server.url.rstrip("/").lower() == wanted:
            return records_of(server)
    return []
