"""Files and directories private to the user: directories 0700, files 0600, never through a symlink; and where
they all live, the state directory."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

STATE_DIR_ENV = "SPECMON_STATE_DIR"


def state_dir() -> Path:
    """specmon's one state directory: `$SPECMON_STATE_DIR`, else `<platformdirs user_state_dir>/specmon`. Server
    records, their logs, demo logs, benchmark results, sanity runs and sweeps all live under it."""
    override = os.environ.get(STATE_DIR_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_state_dir("specmon"))


class PrivatePathRefused(OSError):
    """A private directory or file specmon will not write through: a symbolic link (ELOOP). Every command that
    meets one says it in one line and exits 2 (`specmon.cli`), whoever did not catch it before."""


_REFUSED = "is a symbolic link (refused: specmon's files are never written through one)"


def _refuse_symlink(path: Path) -> None:
    if path.is_symlink():
        raise PrivatePathRefused(errno.ELOOP, _REFUSED, str(path))


def make_private_dir(path: Path) -> Path:
    """Create `path` and any missing parents with mode 0700; an existing directory is left as it is.

    A `path` that is a symbolic link is refused (PrivatePathRefused, an OSError ELOOP), like a symlinked file in
    `open_private_file`.
    """
    _refuse_symlink(path)
    missing = []
    for candidate in (path, *path.parents):
        if candidate.exists():
            break
        missing.append(candidate)
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            continue
        os.chmod(directory, 0o700)
    _refuse_symlink(path)
    if not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(path))
    return path


def open_private_file(path: Path, *, append: bool = False, exclusive: bool = False, mode: int = 0o600) -> int:
    """Open `path` for writing (appending, or reset), created with mode 0600 (or `mode`, for a file others must
    read: the textfile collector's); never through a symlink (PrivatePathRefused), and only a regular file:
    a FIFO is refused at once, never waited on (OSError EINVAL, or ENXIO when no reader holds it open)."""
    flags = (os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
             | (os.O_APPEND if append else os.O_TRUNC))
    if exclusive:
        flags |= os.O_EXCL
    try:
        fd = os.open(path, flags, mode)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise PrivatePathRefused(errno.ELOOP, _REFUSED, str(path)) from None
        if error.errno == errno.ENXIO:  # O_NONBLOCK's answer for a FIFO no one reads
            raise OSError(errno.ENXIO, "a FIFO, not a regular file (refused)", str(path)) from None
        raise
    try:
        kind = os.fstat(fd).st_mode
        if not stat.S_ISREG(kind):
            raise OSError(errno.EINVAL, "not a regular file (refused)", str(path))
        os.set_blocking(fd, True)
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_private_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` (UTF-8) to `path`, replacing it, as a 0600 file; never through a symlink (OSError)."""
    target = Path(path)
    fd = open_private_file(target)
    try:
        data = text.encode("utf-8")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    return target
