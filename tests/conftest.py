"""Every test's specmon state (server records, logs, benchmark results, sweeps) lives in a directory of this
test session, never in the user's own: a test neither reads a developer's stored runs nor leaves its own there.
Tests that need a state directory of their own still set SPECMON_STATE_DIR or XDG_STATE_HOME themselves."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True, scope="session")
def _session_state_home(tmp_path_factory):
    saved = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("xdg-state"))
    yield
    if saved is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = saved


@pytest.fixture
def oc(tmp_path):
    """An on-call environment of the test's own (state, presets, the processes it starts, cleaned up after)."""
    from tests.support.oncall import Oncall

    env = Oncall(tmp_path)
    yield env
    env.cleanup()
