"""A SIGINT or SIGTERM that lands inside a class body (Textual's imports are full of them) is wrapped by Python in
a RuntimeError; specmon still ends with 130 or 143 and no traceback."""

from __future__ import annotations

import pytest

from specmon import cli, exits


class _RaisesOnSetName:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __set_name__(self, owner, name) -> None:
        raise self.exc


def _wrapped(exc: BaseException) -> BaseException:
    """What a signal handler's exception becomes when it is raised while a class body is being created."""
    try:
        type("Widgetish", (), {"attr": _RaisesOnSetName(exc)})
    except BaseException as raised:  # noqa: BLE001 - the point is to catch what Python made of it
        return raised
    raise AssertionError("no exception")


@pytest.mark.parametrize(("exc", "code"), [(KeyboardInterrupt(), 130), (SystemExit(143), 143)])
def test_a_wrapped_signal_is_found_and_anything_else_is_not(exc, code):
    wrapped = _wrapped(exc)
    assert isinstance(wrapped, RuntimeError) or wrapped is exc  # CPython 3.11 wraps, 3.12+ adds a note instead
    assert exits.interrupted_code(wrapped) == code
    assert exits.interrupted_code(RuntimeError("a real error")) is None
    assert exits.interrupted_code(_wrapped(ValueError("bad"))) is None
    assert exits.interrupted_code(SystemExit(2)) is None


def test_the_command_ends_with_130_when_ctrl_c_lands_in_an_import(monkeypatch):
    def import_interrupted(argv):
        raise _wrapped(KeyboardInterrupt())

    monkeypatch.setattr(cli, "_main", import_interrupted)
    assert cli.main(["demo"]) == 130
    monkeypatch.setattr(cli, "_main", lambda argv: (_ for _ in ()).throw(RuntimeError("a real error")))
    with pytest.raises(RuntimeError, match="a real error"):
        cli.main(["demo"])


FINALIZER_SCRIPT = r"""
import sys, time
from specmon import exits
exits.install()
class Reaped:
    def __del__(self):
        print("in __del__", flush=True)
        sys.stdin.readline()  # the test sends SIGTERM now, then a line
        began = time.monotonic()
        while time.monotonic() - began < 0.3:  # the signal lands in here
            pass
        print("__del__ returned", flush=True)
try:
    Reaped()
    time.sleep(30)
    print("not interrupted", flush=True)
finally:
    print("finally ran", flush=True)
"""


def test_a_sigterm_that_lands_in_a_finalizer_still_ends_the_command_with_143():
    """Seen in CI: `specmon start`'s Popen was reaped (``Popen.__del__``) as the signal landed, and Python printed
    the SystemExit as "Exception ignored in" and went on."""
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", FINALIZER_SCRIPT], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "in __del__\n"
        proc.send_signal(signal.SIGTERM)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, (out, err)
    assert out == "__del__ returned\nfinally ran\n"
    assert "Traceback" not in err and "Exception ignored" not in err, err
