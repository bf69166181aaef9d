"""A switch checks everything it can before it stops the working server: a bad target preset leaves the old
server serving, and says so (issue 22 item 1). `specmon switch`, the app's `p` (attached, and the demo's
supervisor) and the sweep all go this way. Real processes."""

from __future__ import annotations

import dataclasses
import os

import httpx
import pytest

from specmon.launch.presets import load_presets
from specmon.launch.supervisor import PreflightFailed, ServerSupervisor, SupervisorError
from specmon.ports import free_port_pair
from specmon.preflight import launch_check
from tests.support.app_harness import wait_for as app_wait_for
from tests.support.oncall import Oncall, gone, write_preset

pytestmark = pytest.mark.timeout(180)

TYPO = "num-speculative-tokens = 16"  # SGLang has no such flag: the preflight says so in a blink


@pytest.fixture
def oc(tmp_path, monkeypatch):
    env = Oncall(tmp_path)
    for name in ("SPECMON_STATE_DIR", "XDG_STATE_HOME"):
        monkeypatch.setenv(name, env.env[name])
    yield env
    env.cleanup()


def serving(url: str) -> bool:
    try:
        return httpx.get(url + "/health", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_bad_preset_switched_to_leaves_the_old_server_serving(oc):
    write_preset(oc.presets, "fast-typo", "demo-eagle3-10", TYPO)
    first = oc.json("start", "fast-a", "--port", str(free_port_pair()), "--wait")
    out = oc.json("switch", "fast-typo", "--yes", expect=1)
    assert out["state"] == "failed" and out["old_still_serving"], out
    assert [(s["name"], s.get("status")) for s in out["steps"]] == [("preflight", "failed")], out["steps"]
    assert "num-speculative-tokens" in out["error"] and "still serves at " + first["url"] in out["error"]
    assert not gone(first["pid"]) and serving(first["url"])
    listed = next(s for s in oc.json("ps")["servers"] if s["id"] == first["id"])
    assert listed["alive"]


def test_a_launcher_that_cannot_run_is_found_before_the_stop_even_without_the_preflight(oc, tmp_path):
    write_preset(oc.presets, "fast-gone", "demo-eagle3-10", launcher=[str(tmp_path / "no-such-serve.sh")])
    first = oc.json("start", "fast-a", "--port", str(free_port_pair()), "--wait")
    out = oc.json("switch", "fast-gone", "--yes", "--no-preflight", expect=1)
    assert out["state"] == "failed" and out["old_still_serving"] and out["steps"] == [], out
    assert "cannot launch" in out["error"] and "still serves" in out["error"]
    assert not gone(first["pid"]) and serving(first["url"])


def test_a_good_switch_checks_first_then_stops(oc):
    first = oc.json("start", "fast-a", "--port", str(free_port_pair()), "--wait")
    out = oc.json("switch", "fast-b", "--yes", "--requests", "0")
    names = [s["name"] for s in out["steps"]]
    assert names == ["preflight", "stopping", "gpus free", "port free", "launching", "startup"], names
    assert out["state"] == "ready" and not out["old_still_serving"] and gone(first["pid"])


def fast(name: str, presets_dir=None):
    preset = load_presets([presets_dir] if presets_dir else (), user_dir=None).presets[name]
    return dataclasses.replace(preset, args={**preset.args, "emulator-speed": 50})


def test_the_demo_supervisor_checks_a_restart_before_it_stops(oc, tmp_path):
    write_preset(oc.presets, "fast-typo", "demo-eagle3-10", TYPO)
    port = free_port_pair()
    sup = ServerSupervisor(fast("demo-eagle3-10"), tmp_path / "runs" / "first.log", port, preflight=launch_check)
    try:
        sup.start()
        first_pid = sup.pid
        url = f"http://127.0.0.1:{port}"
        assert app_wait_sync(lambda: serving(url))
        with pytest.raises(PreflightFailed, match="num-speculative-tokens"):
            sup.restart_with(fast("fast-typo", oc.presets))
        missing = dataclasses.replace(fast("demo-eagle3-5"), launcher=[str(tmp_path / "no-such-serve")])
        with pytest.raises(SupervisorError, match="cannot launch"):
            sup.restart_with(missing)
        assert sup.is_running and sup.pid == first_pid and serving(url)
    finally:
        sup.stop(timeout=10)


def app_wait_sync(condition, timeout: float = 30.0) -> bool:
    from tests.support.oncall import wait_for

    return bool(wait_for(condition, timeout, "the server to serve"))


async def test_the_apps_switch_to_a_bad_preset_leaves_the_attached_server_serving(oc):
    from specmon.oncall.discovery import find_servers
    from specmon.tui.app import AppConfig, SpecmonApp

    write_preset(oc.presets, "fast-typo", "demo-eagle3-10", TYPO)
    first = oc.json("start", "fast-a", "--port", str(free_port_pair()), "--wait")
    found = find_servers(with_gpus=False).find(first["id"])
    presets = {n: p for n, p in load_presets([oc.presets]).presets.items() if p.demo}
    app = SpecmonApp(AppConfig(url=found.url, log_path=found.log, preset=presets["fast-a"], presets=presets,
                               attached=found, emulator=True, sanity_check=False))  # fmt: skip
    async with app.run_test(size=(200, 50)) as pilot:
        assert await app_wait_for(pilot, lambda: app.current_state() == "ready", 30)
        app.switch_preset("fast-typo")
        assert await app_wait_for(pilot, lambda: app.oncall.switch is not None and app.oncall.switch.finished, 60)
        notes = " ".join(text for text, _ in app.oncall.switch.notes())
        assert "still serves" in notes and "stopping" not in notes, notes
        assert not gone(first["pid"]) and serving(first["url"])
        assert app.config.attached.pid == first["pid"] and app.server_state.preset.name == "fast-a"
        assert await app_wait_for(pilot, lambda: app.current_state() == "ready", 30), app.current_state()
        assert await app_wait_for(pilot, lambda: app.feed.state.state == "ready", 30), "the old log again"


def test_the_preflight_counts_the_replaced_servers_port_and_gpu_memory_as_free():
    import socket

    from specmon.preflight import run_preflight
    from tests.support.gpu_fixtures import load

    snapshot = load("h200x8-sglang-tp8.json")  # a TP-8 SGLang server holds most of every GPU
    server_pids = {p.pid for p in snapshot.processes}
    preset = load_presets(user_dir=None).presets["eagle3-10"]
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        alone = run_preflight(preset, port=port, gpus=snapshot)
        replaced = run_preflight(preset, port=port, gpus=snapshot, replacing={*server_pids, os.getpid()})
    codes = lambda report: {p.code for p in report.problems}  # noqa: E731
    assert {"port-in-use", "gpu-memory"} <= codes(alone)
    assert not {"port-in-use", "gpu-memory"} & codes(replaced), replaced.problems
    assert any("held by the server this launch replaces" in note for note in replaced.notes)
