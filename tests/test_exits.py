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
