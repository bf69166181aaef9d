"""Every test's specmon state (server records, logs, benchmark results, sweeps) lives in a directory of this
test session, never in the user's own: a test neither reads a developer's stored runs nor leaves its own there.
Tests that need a state directory of their own still set SPECMON_STATE_DIR or XDG_STATE_HOME themselves."""

from __future__ import annotations

import os

import pytest

TERMINAL_SIZE_VARIABLES = ("COLUMNS", "LINES")


@pytest.fixture(autouse=True, scope="session")
def _session_state_home(tmp_path_factory):
    saved = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("xdg-state"))
    yield
    if saved is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = saved


@pytest.fixture(autouse=True, scope="session")
def _no_inherited_terminal_size():
    """The processes tests start measure their own terminal (or get 80x24), not the one pytest runs in.

    pytest imports readline at start-up, and GNU readline on a terminal exports that terminal's COLUMNS and LINES
    into the process environment (below `os.environ`, which does not see them), so every child inherited them: an
    argparse usage wrapped at 200 columns, an app in an 80x24 tmux pane laid out for 200x50. A test about a width
    sets COLUMNS itself."""
    saved = {name: os.environ.get(name) for name in TERMINAL_SIZE_VARIABLES}
    for name in TERMINAL_SIZE_VARIABLES:
        os.environ.pop(name, None)
        os.unsetenv(name)  # also when only the C environment had it (readline's setenv)
    yield
    for name, value in saved.items():
        if value is not None:
            os.environ[name] = value


@pytest.fixture
def oc(tmp_path):
    """An on-call environment of the test's own (state, presets, the processes it starts, cleaned up after)."""
    from tests.support.oncall import Oncall

    env = Oncall(tmp_path)
    yield env
    env.cleanup()
