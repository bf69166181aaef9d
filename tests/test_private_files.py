"""specmon.tui.private_files on real files: 0700 directories, 0600 files, no symlinks followed."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from specmon.tui.private_files import make_private_dir, open_private_file


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_missing_parents_are_created_private_and_an_existing_directory_is_left_alone(tmp_path):
    tmp_path.chmod(0o755)
    target = tmp_path / "a" / "b" / "c"
    assert make_private_dir(target) == target
    assert [mode(p) for p in (target, target.parent, target.parent.parent)] == [0o700] * 3
    assert mode(tmp_path) == 0o755


def test_a_file_in_the_way_is_not_a_directory(tmp_path):
    (tmp_path / "taken").write_text("")
    with pytest.raises(NotADirectoryError):
        make_private_dir(tmp_path / "taken")


def test_files_are_0600_reset_or_appended_and_never_through_a_symlink(tmp_path):
    path = tmp_path / "log"
    path.write_text("old\n")
    path.chmod(0o644)
    os.close(open_private_file(path))
    assert mode(path) == 0o600 and path.read_text() == ""
    for text in ("one\n", "two\n"):
        fd = open_private_file(path, append=True)
        os.write(fd, text.encode())
        os.close(fd)
    assert path.read_text() == "one\ntwo\n"
    with pytest.raises(FileExistsError):
        open_private_file(path, exclusive=True)
    (tmp_path / "link").symlink_to(path)
    with pytest.raises(OSError) as raised:
        open_private_file(tmp_path / "link", append=True)
    assert raised.value.errno == errno.ELOOP
    assert path.read_text() == "one\ntwo\n"
