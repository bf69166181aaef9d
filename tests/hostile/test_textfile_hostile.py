"""The textfile directory is node-exporter's, often one others can write: a FIFO or a symbolic link planted
where specmon writes (the lock file, the file, the temporary file's name) is refused at once or replaced,
never waited on and never followed. So is a FIFO planted where specmon writes its own private files."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading

import pytest

FILE_NAME, LOCK_NAME = "specmon.prom", ".specmon.prom.lock"  # what node-exporter and other writers see

SAMPLE = ("specmon_leftover_gpu_memory_bytes", {"server": "h:1"}, 1024.0)
EXPORT = """
import sys
from pathlib import Path
from specmon.textfile import export
warnings = []
export(Path(sys.argv[1]), warnings.append, set_=[("specmon_leftover_gpu_memory_bytes", {"server": "h:1"}, 1024.0)])
print("\\n".join(warnings))
"""


def export_in_a_process(directory) -> subprocess.CompletedProcess:
    """What `bench`, `start`, `stop` and `sweep` do with --textfile-dir, in a process of its own: one that
    waits on a FIFO is stopped by the timeout (and the test fails)."""
    return subprocess.run([sys.executable, "-c", EXPORT, str(directory)], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def test_a_fifo_planted_at_the_lock_file_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / LOCK_NAME)
    done = export_in_a_process(tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"could not write {tmp_path / FILE_NAME}" in done.stdout and "FIFO" in done.stdout, done.stdout
    assert not (tmp_path / FILE_NAME).exists()


def test_a_fifo_planted_at_the_textfile_is_replaced_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / FILE_NAME)
    done = export_in_a_process(tmp_path)
    assert done.returncode == 0 and done.stdout.strip() == "", done.stdout + done.stderr
    path = tmp_path / FILE_NAME
    assert stat.S_ISREG(os.lstat(path).st_mode) and 'specmon_leftover_gpu_memory_bytes{server="h:1"}' in path.read_text()


def test_a_symlink_planted_at_the_lock_file_creates_nothing(tmp_path):
    from specmon.textfile import export

    victim = tmp_path / "victim-dir" / "created-by-specmon"
    victim.parent.mkdir()
    (tmp_path / "textfile").mkdir()
    (tmp_path / "textfile" / LOCK_NAME).symlink_to(victim)
    warnings: list[str] = []
    export(tmp_path / "textfile", warnings.append, set_=[SAMPLE])
    assert not victim.exists() and not os.path.lexists(tmp_path / "textfile" / FILE_NAME)
    assert len(warnings) == 1 and "symbolic link" in warnings[0] and LOCK_NAME in warnings[0], warnings


def test_a_symlink_planted_at_a_temporary_name_never_overwrites_its_target(tmp_path):
    """prometheus_client's write_to_textfile writes `specmon.prom.PID.TID` (both known to anyone who can see the
    process), following a link planted there; specmon's name is random and created new (O_EXCL|O_NOFOLLOW)."""
    from specmon.textfile import Textfile

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    directory = tmp_path / "textfile"
    directory.mkdir()
    predictable = [f"{FILE_NAME}.{os.getpid()}.{threading.get_ident()}",
                   f".{FILE_NAME}.{os.getpid()}.tmp", f"{FILE_NAME}.tmp", f"{FILE_NAME}.new"]
    for name in predictable:
        (directory / name).symlink_to(victim)
    old_umask = os.umask(0o022)
    try:
        Textfile(directory).update(set_=[SAMPLE])
    finally:
        os.umask(old_umask)
    assert victim.read_text() == "precious\n"
    path = directory / FILE_NAME
    assert stat.S_ISREG(os.lstat(path).st_mode), "specmon.prom must be a file of its own, never a link"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644  # node-exporter, often another user, reads it
    assert stat.S_IMODE(os.stat(directory / LOCK_NAME).st_mode) == 0o644  # another user's specmon locks it
    assert 'server="h:1"' in path.read_text()
    left = sorted(p.name for p in directory.iterdir())
    assert left == sorted([FILE_NAME, LOCK_NAME, *predictable]), left  # no temporary file of its own left


def test_a_symlink_planted_at_the_textfile_is_replaced_not_followed(tmp_path):
    from specmon.textfile import Textfile

    victim = tmp_path / "victim"
    victim.write_text('specmon_leftover_gpu_memory_bytes{server="stolen:1"} 7\n')
    (tmp_path / "textfile").mkdir()
    (tmp_path / "textfile" / FILE_NAME).symlink_to(victim)
    Textfile(tmp_path / "textfile").update(set_=[SAMPLE])
    text = (tmp_path / "textfile" / FILE_NAME).read_text()
    assert victim.read_text() == 'specmon_leftover_gpu_memory_bytes{server="stolen:1"} 7\n'
    assert not os.path.islink(tmp_path / "textfile" / FILE_NAME) and "stolen" not in text, text


PRIVATE_WRITE = """
import sys
from specmon.private_files import write_private_text
try:
    write_private_text(sys.argv[1], "x")
except OSError as exc:
    print("refused:", exc.strerror)
"""


@pytest.mark.parametrize("reader", [False, True])
def test_a_fifo_where_specmon_writes_a_private_file_is_refused_at_once(tmp_path, reader):
    """State files, results, logs and screenshots are written by private_files: a FIFO there is refused, with
    no reader (where opening for writing would wait) and with one (where the write would go to it)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    holder = None
    if reader:
        holder = threading.Thread(target=lambda: open(fifo, "rb").read(), daemon=True)  # noqa: SIM115
        holder.start()  # it may open before or after the writer tries: either way nothing may be written
    try:
        done = subprocess.run([sys.executable, "-c", PRIVATE_WRITE, str(fifo)], capture_output=True, text=True,
                              timeout=60, stdin=subprocess.DEVNULL)
    finally:
        if holder is not None and holder.is_alive():
            with open(fifo, "wb"):  # the reader ends when a writer comes and goes
                pass
            holder.join(10)
    assert done.stdout.startswith("refused:") and ("FIFO" in done.stdout or "regular" in done.stdout), done.stdout
