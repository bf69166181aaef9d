"""specmon.private_files on real files: 0700 directories, 0600 files, no symlinks followed."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from specmon.private_files import make_private_dir, open_private_file, write_private_text


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


def test_a_directory_that_is_a_symlink_is_refused_and_nothing_is_written_through_it(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    (tmp_path / "results").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(OSError) as raised:
        make_private_dir(tmp_path / "results")
    assert raised.value.errno == errno.ELOOP and "symbolic link" in str(raised.value)
    assert mode(elsewhere) == 0o755
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(OSError):
        make_private_dir(tmp_path / "dangling")
    assert not (tmp_path / "nowhere").exists()


def test_write_private_text_makes_a_0600_file_even_over_a_readable_one_and_never_follows_a_link(tmp_path):
    shot = tmp_path / "screen.svg"
    shot.write_text("old")
    shot.chmod(0o644)
    assert write_private_text(shot, "<svg>é</svg>") == shot
    assert mode(shot) == 0o600 and shot.read_text(encoding="utf-8") == "<svg>é</svg>"
    fresh = tmp_path / "new.svg"
    write_private_text(str(fresh), "x" * 300_000)
    assert mode(fresh) == 0o600 and fresh.stat().st_size == 300_000
    (tmp_path / "link.svg").symlink_to(fresh)
    with pytest.raises(OSError) as raised:
        write_private_text(tmp_path / "link.svg", "overwritten")
    assert raised.value.errno == errno.ELOOP and fresh.stat().st_size == 300_000
