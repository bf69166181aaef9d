"""A server specmon did not launch is acted on only when the user names it (id or pid): `stop`, `switch`, `monitor`
(attach), `sweep` and the app's successor rule all pick through one function, `discovery.pick_server`; without a
name they say in one line what they left alone and how to name it. Real servers, real processes."""

from __future__ import annotations

import re
import subprocess
import sys

import httpx
import pytest

from specmon.oncall.discovery import (
    MAX_NAMED,
    FoundServer,
    Inventory,
    NotPicked,
    not_launched_note,
    pick_server,
)
from specmon.ports import free_port_pair
from tests.support.oncall import Oncall, gone, wait_for, write_preset

pytestmark = pytest.mark.timeout(300)


def found(pid: int, ours: bool, alive: bool = True, started: float = 0.0) -> FoundServer:
    return FoundServer(id=f"s{pid}" if ours else str(pid), preset="p" if ours else None, pid=pid,
                       url=f"http://127.0.0.1:{pid}", host="127.0.0.1", port=pid, log=None, alive=alive,
                       launched_by_specmon=ours, started_at=started)


NAMING = "specmon stop {pid}"


@pytest.mark.parametrize(
    ("servers", "key", "expected"),
    [
        ([found(31000, ours=False)], None, None),  # the only one alive, but nobody named it
        ([found(31000, ours=False), found(31002, ours=False)], None, None),
        ([found(31000, ours=False), found(31002, ours=True)], None, 31002),  # the one specmon launched
        ([found(31000, ours=False), found(31002, ours=True, alive=False)], None, None),
        ([found(31000, ours=False)], "31000", 31000),  # named by pid
        ([found(31000, ours=True)], "s31", 31000),  # named by id prefix
        ([], None, None),
    ],
)
def test_only_a_named_server_or_the_one_specmon_launched_is_picked(servers, key, expected) -> None:
    picked = pick_server(Inventory(servers, []), key, "stop", NAMING)
    assert (picked.pid if picked else None) == expected


def test_what_was_left_alone_is_one_line_that_says_how_to_name_it() -> None:
    inventory = Inventory([found(31000, ours=False), found(31002, ours=False), found(31004, ours=True, alive=False)],
                          [])
    note = not_launched_note(inventory, NAMING)
    assert note is not None and "\n" not in note
    assert "2 running server(s) specmon did not launch" in note and "pid 31000" in note and "pid 31002" in note
    assert note.endswith("specmon stop 31000")
    assert not_launched_note(Inventory([found(31002, ours=True)], []), NAMING) is None


def test_several_servers_specmon_launched_need_a_name_or_a_pick() -> None:
    older, newer = found(31000, ours=True, started=1.0), found(31002, ours=True, started=2.0)
    inventory = Inventory([older, newer, found(31004, ours=False)], [])
    with pytest.raises(NotPicked, match=r"2 servers specmon launched are running: s31002 .*s31000 .*say which to stop"):
        pick_server(inventory, None, "stop", NAMING)
    offered = []
    assert pick_server(inventory, None, "stop", NAMING, ask=lambda s: offered.extend(s) or s[1]) is older
    assert offered == [newer, older], "only servers specmon launched are offered, the newest first"
    with pytest.raises(NotPicked, match="no server 'nope'"):
        pick_server(inventory, "nope", "stop", NAMING)


def names(line: str, pid: int) -> bool:
    """Whether the line names ``pid``: it names the newest few servers specmon did not launch (others' may run on
    this host)."""
    count = int(re.search(r"(\d+) running server\(s\) specmon did not launch", line).group(1))
    return f"pid {pid}" in line or count > MAX_NAMED


@pytest.fixture
def foreign(oc: Oncall):
    """An SGLang stand-in someone else started (not through specmon): it must survive every unnamed command."""
    port = free_port_pair()
    proc = subprocess.Popen([sys.executable, "-m", "specmon.emulator", "--model-path", "demo/m", "--port", str(port),
                             "--emulator-speed", "40"], env=oc.env, start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    oc.extra_pids.append(proc.pid)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(url + "/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(healthy, 90, "the foreign server to be ready")
    yield proc, healthy


def test_unnamed_commands_leave_a_server_specmon_did_not_launch_alone(oc: Oncall, foreign) -> None:
    proc, healthy = foreign
    stop = oc.run("stop", "--yes")
    assert stop.returncode == 2, stop.stderr
    (line,) = [x for x in stop.stderr.splitlines() if "nothing stopped" in x]
    assert "specmon did not launch" in line and "specmon stop " in line, line
    assert names(line, proc.pid)
    attach = oc.run("monitor", "--headless", "--duration", "1", timeout=60)
    assert attach.returncode == 2, attach.stderr
    (line,) = [x for x in attach.stderr.splitlines() if "nothing attached" in x]
    assert "specmon monitor --server " in line and names(line, proc.pid), line
    assert healthy() and not gone(proc.pid)

    port = free_port_pair()
    write_preset(oc.presets, "fast-a", "demo-eagle3-10", f"port = {port}")
    write_preset(oc.presets, "fast-base", "demo-baseline", f"port = {port}")
    # nothing of specmon's runs: the sweep starts its presets beside the other server, and says it left it alone
    sweep = oc.run("sweep", "--presets", str(oc.presets), "fast-base", "fast-a", "--requests", "2", "--yes",
                   "--leave", "none", "--json", timeout=240)
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    (line,) = [x for x in sweep.stderr.splitlines() if "specmon did not launch" in x]
    assert "--from " in line and names(line, proc.pid), line
    assert healthy() and not gone(proc.pid)

    switched = oc.json("switch", "fast-a", "--yes", "--requests", "1", timeout=180)  # so does a switch
    assert switched["from"] is None and switched["state"] == "ready", switched
    (line,) = [n for n in switched["notes"] if "specmon did not launch" in n]
    assert "--from " in line and names(line, proc.pid), line
    assert healthy() and not gone(proc.pid)

    named = oc.json("stop", str(proc.pid), "--yes")  # named: stopped
    assert named["stopped"], named
    wait_for(lambda: gone(proc.pid), 30, "the named server to end")
