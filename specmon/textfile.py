"""specmon's own measurements for node-exporter's textfile collector: `DIR/specmon.prom`, written atomically in
prometheus-client's text format (no Textual here).

DIR may be one others can write (node-exporter's collector directory often is), so nothing there is trusted:
the lock file and the temporary file are opened without following a symbolic link, the temporary file is
created new (O_EXCL) under a name nobody can guess, anything that is not a regular file (a FIFO planted at
the lock, the file or the temporary name) is refused at once instead of waited on, and the file is read back
through `inputs` (bounded, never through a link). prometheus_client's `write_to_textfile` does none of this.

With `--textfile-dir DIR` (or `$SPECMON_TEXTFILE_DIR`) `bench`, `sweep`, `start` and `stop` each update the file:
the samples they own are replaced, the others kept (read back from the file, under a lock). Labels are small
sets (server, preset, phase, reason, gpu): never a pid, a request id or a path. SGLang 0.5.23 exports its own
startup phase durations (`sglang:startup_time_seconds{phase}`): specmon's use the same `phase` label and are
not written for a server that exports SGLang's.
"""

from __future__ import annotations

import errno
import fcntl
import math
import os
import secrets
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from specmon.inputs import InputError, kind_of, read_file
from specmon.private_files import PrivatePathRefused, open_private_file
from specmon.urls import UrlRefused, address_of

ENV = "SPECMON_TEXTFILE_DIR"
FILE_NAME = "specmon.prom"
LOCK_NAME = ".specmon.prom.lock"
FILE_MODE = 0o644
"""node-exporter, often another user, reads the file: readable by all (it holds no secret: `server_label`)."""
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_SAMPLES = 20000
"""A file with more samples than this (or larger) is started afresh: bounded whatever is in it."""


@dataclass(frozen=True)
class Family:
    """One metric family specmon writes: its name (without `_total`), type, help and labels."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...]


FAMILIES = {f.name: f for f in (
    Family("specmon_bench_decode_tokens_per_second", "gauge",
           "Median decode tokens per second of the last specmon benchmark.", ("server", "preset")),
    Family("specmon_bench_accept_length", "gauge",
           "Acceptance length (tokens per verify step) of the last specmon benchmark.", ("server", "preset")),
    Family("specmon_bench_ttft_seconds", "gauge", "Median time to first token of the last specmon benchmark.",
           ("server", "preset")),
    Family("specmon_bench_speedup_ratio", "gauge",
           "Decode tok/s of the last benchmark over the baseline's (no speculation).", ("server", "preset")),
    Family("specmon_bench_timestamp_seconds", "gauge", "When the last specmon benchmark finished (Unix time).",
           ("server", "preset")),
    Family("specmon_startup_phase_seconds", "gauge", "Duration of each startup phase of the server's last start.",
           ("server", "phase")),
    Family("specmon_startup_ready_seconds", "gauge", "Time from launch to ready of the server's last start.",
           ("server", "preset")),
    Family("specmon_startup_capture_progress_ratio", "gauge",
           "CUDA-graph capture progress (0..1) while the server starts.", ("server",)),
    Family("specmon_startup_failures", "counter", "Startup failures, by the failure's kind.", ("server", "reason")),
    Family("specmon_leftover_gpu_memory_bytes", "gauge",
           "GPU memory still held by processes of a stopped (dead) server.", ("server",)),
)}


def textfile_dir(given: str | None) -> Path | None:
    """`--textfile-dir`, else `$SPECMON_TEXTFILE_DIR`, else None (nothing is written)."""
    value = given or os.environ.get(ENV)
    return Path(value) if value else None


def server_label(url: str) -> str:
    """A server as `host:port` (what Prometheus calls its `instance`), from its URL (`urls.address_of`); never
    with a user:password@, whatever URL a stored record holds."""
    try:
        return address_of(url)
    except UrlRefused:
        return url.split("://", 1)[-1].split("/", 1)[0].rpartition("@")[2]


Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


class Textfile:
    """`DIR/specmon.prom`: `update(set_=..., add=..., drop=...)` rewrites it atomically under a lock."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.path = self.directory / FILE_NAME

    def update(self, set_: Iterable[tuple[str, Mapping[str, str], float]] = (),
               add: Iterable[tuple[str, Mapping[str, str], float]] = (),
               drop: Iterable[tuple[str, Mapping[str, str]]] = ()) -> None:
        """Set gauges, add to counters and drop samples (a family name and its labels), then write the file.
        Raises OSError when the directory cannot be written, or holds a link or a FIFO where specmon writes."""
        self.directory.mkdir(parents=True, exist_ok=True)
        lock = _open_lock(self.directory / LOCK_NAME)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            samples = self.read()
            for name, labels in drop:
                samples.get(name, {}).pop(_key(name, labels), None)
            for name, labels, value in set_:
                if _usable(value):
                    samples.setdefault(name, {})[_key(name, labels)] = float(value)
            for name, labels, value in add:
                if _usable(value):
                    family = samples.setdefault(name, {})
                    key = _key(name, labels)
                    family[key] = family.get(key, 0.0) + float(value)
            self._write(generate_latest(_registry(samples)))
        finally:
            os.close(lock)

    def _write(self, data: bytes) -> None:
        """`data` to a new temporary file of an unguessable name (O_EXCL, never through a link), renamed over the
        file (a link planted at the file's own name is replaced, never followed)."""
        temporary = self.directory / f".{FILE_NAME}.{secrets.token_hex(8)}.tmp"
        fd = open_private_file(temporary, exclusive=True, mode=FILE_MODE)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temporary, self.path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise

    def read(self) -> Samples:
        """The samples of specmon's families now in the file (others, and unreadable files, are left out)."""
        try:
            data = read_file(self.path, MAX_FILE_BYTES, what="textfile", follow=False)
        except FileNotFoundError:
            return {}
        except InputError:  # over its size, a FIFO, a device: started afresh (the rename replaces it)
            return {}
        except OSError as error:
            if error.errno == errno.ELOOP:  # a link planted at its name: never read through (the rename replaces it)
                return {}
            raise
        samples: Samples = {}
        count = 0
        try:
            for family in text_string_to_metric_families(data.decode("utf-8", "replace")):
                spec = FAMILIES.get(family.name)
                if spec is None:
                    continue
                for sample in family.samples:
                    if sample.name.endswith("_created") or not _usable(sample.value):
                        continue
                    count += 1
                    if count > MAX_SAMPLES:
                        return {}
                    samples.setdefault(spec.name, {})[_key(spec.name, sample.labels)] = float(sample.value)
        except ValueError:
            return {}
        return samples


def _open_lock(path: Path) -> int:
    """The lock file, opened read-only (enough to flock; created 0644 when absent, so that another user's
    specmon may lock it too) without following a link and without waiting on a FIFO. OSError (ELOOP, or
    EINVAL for anything but a regular file) otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, FILE_MODE)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise PrivatePathRefused(errno.ELOOP, "is a symbolic link (refused: never followed)",
                                     str(path)) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise OSError(errno.EINVAL, f"{kind_of(mode)}, not a lock file (refused)", str(path))
    return fd


def _usable(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value >= 0


def _key(name: str, labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    wanted = FAMILIES[name].labels
    return tuple((label, str(labels.get(label, ""))[:200]) for label in wanted)


def _registry(samples: Samples) -> CollectorRegistry:
    disable_created_metrics()  # a `_created` sample per write would read as a counter reset
    registry = CollectorRegistry(auto_describe=False)
    for name, values in samples.items():
        if not values:
            continue
        spec = FAMILIES[name]
        metric_type = Counter if spec.kind == "counter" else Gauge
        metric = metric_type(spec.name, spec.help, spec.labels, registry=registry)
        for key, value in values.items():
            child = metric.labels(**dict(key))
            if spec.kind == "counter":
                child.inc(value)
            else:
                child.set(value)
    return registry


# ----- what each command writes


def export(directory: Path | None, warn, **update) -> None:
    """`Textfile(directory).update(**update)` when a directory is given; a failure is a warning, never fatal."""
    if directory is None:
        return
    try:
        Textfile(directory).update(**update)
    except OSError as exc:
        path = Path(directory) / FILE_NAME
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else ""
        warn(f"could not write {path}: {exc.strerror or exc}{where}")


def bench_samples(url: str, preset: str | None, summary: Mapping, finished_at: float | None,
                  speedup: float | None = None) -> list[tuple[str, dict[str, str], float]]:
    """A finished benchmark's figures (a `bench --json` summary) as textfile samples."""
    labels = {"server": server_label(url), "preset": preset or "none"}
    decode = summary.get("decode_tok_s") if isinstance(summary.get("decode_tok_s"), Mapping) else {}
    accept = summary.get("accept_length") if isinstance(summary.get("accept_length"), Mapping) else {}
    ttft = summary.get("ttft_s") if isinstance(summary.get("ttft_s"), Mapping) else {}
    out = []
    for name, value in (("specmon_bench_decode_tokens_per_second", decode.get("median")),
                        ("specmon_bench_accept_length", accept.get("token_weighted")),
                        ("specmon_bench_ttft_seconds", ttft.get("median")),
                        ("specmon_bench_speedup_ratio", speedup),
                        ("specmon_bench_timestamp_seconds", finished_at)):
        if _usable(value):
            out.append((name, labels, float(value)))
    return out


def startup_samples(url: str, preset: str | None, startup: Mapping | None, ready_after_s: float | None,
                    with_phases: bool = True) -> list[tuple[str, dict[str, str], float]]:
    """A start that reached ready: phase durations (from the log), time to ready, capture done."""
    server = server_label(url)
    out = [("specmon_startup_capture_progress_ratio", {"server": server}, 1.0)]
    if _usable(ready_after_s):
        out.append(("specmon_startup_ready_seconds", {"server": server, "preset": preset or "none"},
                    float(ready_after_s)))
    phases = (startup or {}).get("phases") if with_phases else None
    for phase in phases if isinstance(phases, list) else []:
        if isinstance(phase, Mapping) and isinstance(phase.get("name"), str) and _usable(phase.get("elapsed_s")):
            out.append(("specmon_startup_phase_seconds", {"server": server, "phase": phase["name"]},
                        float(phase["elapsed_s"])))
    return out


def capture_ratio(startup_state) -> float | None:
    """CUDA-graph capture progress of a StartupState (done / total over every capture), None before any."""
    done = total = 0
    for capture in getattr(startup_state, "captures", ()):
        if capture.total:
            done += min(capture.done, capture.total)
            total += capture.total
    return done / total if total else None
