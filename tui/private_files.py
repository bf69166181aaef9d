"""Files and directories private to the user: directories 0700, files 0600, never through a symlink."""

from __future__ import annotations

import errno
import os
from pathlib import Path


def make_private_dir(path: Path) -> Path:
    """Create `path` and any missing parents with mode 0700; an existing directory is left as it is."""
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
    if not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(path))
    return path


def open_private_file(path: Path, *, append: bool = False, exclusive: bool = False) -> int:
    """Open `path` for writing (appending, or reset), created with mode 0600; never through a symlink."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
    if exclusive:
        flags |= os.O_EXCL
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)
    return fd
