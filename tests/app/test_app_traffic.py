"""The Live pane's Traffic tab (issue 35): production τ from request records followed live, its key in the footer
and the palette, its classes cycled, at 80x24 and 200x50."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.support.app_harness import READY_LOG, fixture_app, fixture_preset, fixture_status, screen_text

SIZES = {"80x24": (80, 24), "200x50": (200, 50)}


def write_export(folder: Path, count: int = 400, seed: int = 3, start: int = 0) -> None:
    """Export records with no time of their own (read now: the same picture at any hour), a known mix."""
    rng = random.Random(seed)
    with open(folder / "sglang-request-metrics-20260101_10.log", "a") as handle:
        for i in range(start, start + count):
            verify = rng.randint(20, 200)
            code = i % 3 == 0
            completion = verify * (3 if code else 2) + rng.randint(0, verify)
            if i == 7:
                completion = verify = 150  # nothing from the draft
            meta = {"id": f"req-{i:05d}", "prompt_tokens": rng.choice((100, 800, 3000, 9000)),
                    "completion_tokens": completion, "spec_verify_ct": verify}
            params = {"rid": f"req-{i:05d}", "custom_labels": {"team": "code" if code else "chat"}}
            handle.write(json.dumps({"request_parameters": json.dumps(params), **meta}) + "\n")


def traffic_app(folder: Path, by: str | None = "custom_labels.team"):
    app = fixture_app(READY_LOG, until="SIGTERM received", preset=fixture_preset(), traffic_paths=[str(folder)],
                      traffic_by=by)
    app.server_state.http = fixture_status()
    return app


async def _until_traffic(pilot) -> None:
    for _ in range(200):
        await pilot.pause(0.05)
        if "token-weighted" in screen_text(pilot.app):
            break
    await pilot.wait_for_scheduled_animations()


@pytest.mark.parametrize("size", SIZES)
def test_traffic_tab(snap_compare, tmp_path, size):
    write_export(tmp_path)
    assert snap_compare(traffic_app(tmp_path), terminal_size=SIZES[size], press=["5"], run_before=_until_traffic)


def test_traffic_tab_by_label_at_80x24(snap_compare, tmp_path):
    write_export(tmp_path)
    assert snap_compare(traffic_app(tmp_path), terminal_size=(80, 24), press=["5", "5", "5"],
                        run_before=_until_traffic)


def test_traffic_tab_without_records_says_how_to_get_them(snap_compare):
    app = fixture_app(READY_LOG, until="SIGTERM received", preset=fixture_preset())
    assert snap_compare(app, terminal_size=(80, 24), press=["5"])


async def _until(pilot, text: str, seconds: float = 60.0) -> bool:
    for _ in range(int(seconds / 0.05)):
        if text in screen_text(pilot.app):
            return True
        await pilot.pause(0.05)
    return False


async def test_the_tab_follows_records_as_they_are_written(tmp_path):
    write_export(tmp_path, count=10)
    app = traffic_app(tmp_path, by=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("5")
        assert await _until(pilot, "· 10 req ·"), screen_text(app)
        write_export(tmp_path, count=25, start=10)  # appended while the app runs
        assert await _until(pilot, "· 35 req ·"), screen_text(app)
        titles = [command.title for command in app.get_system_commands(app.screen)]
        assert "Show the Traffic tab" in titles
        await pilot.press("5")  # again: the next classes
        assert await _until(pilot, "by output tokens (5: next)")
        await pilot.press("4")
        assert await _until(pilot, "Speculation") and "token-weighted" not in screen_text(app)
        await pilot.press("5")
        assert await _until(pilot, "by output tokens (5: next)")  # back where it was, not cycled


def test_the_tab_is_redrawn_without_a_bootstrap(tmp_path, monkeypatch):
    """Every 2 s: a bootstrap of each small class at each redraw cost 5 % of a core at 1,000 records a second
    (benchmarks/app_traffic_follow.py); the tab's CIs are the normal approximation."""
    from specmon.traffic import summary
    from specmon.traffic.follow import TrafficFollower
    from specmon.tui.config import AppConfig
    from specmon.tui.traffic import TrafficWiring

    def no_bootstrap(*args, **kwargs):
        raise AssertionError("bootstrapped")

    monkeypatch.setattr(summary, "ci95", no_bootstrap)
    write_export(tmp_path, count=40)
    posted = []

    class Host:
        config = AppConfig(url="http://127.0.0.1:9", traffic_paths=[str(tmp_path)])

        def post_message(self, message) -> bool:
            posted.append(message.model)
            return True

    wiring = TrafficWiring(Host())
    wiring.follower = TrafficFollower([str(tmp_path)])
    wiring.read()
    wiring.stop()
    (model,) = posted
    assert model.state == "reading" and "[" in model.headline  # a CI, not "(n<5: no CI)"


async def test_key_5_cycles_to_your_prompt_categories(tmp_path):
    from specmon.traffic.categories import read

    rules = tmp_path / "categories.toml"
    rules.write_text("default = 'chat'\n[[category]]\nname = 'code team'\nkey = 'custom_labels.team'\nequals = 'code'\n")
    records = tmp_path / "export"
    records.mkdir()
    write_export(records, count=30)
    app = fixture_app(READY_LOG, until="SIGTERM received", preset=fixture_preset(), traffic_paths=[str(records)],
                      traffic_categories=read(str(rules)))
    app.server_state.http = fixture_status()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("5")
        assert await _until(pilot, "· 30 req ·"), screen_text(app)
        await pilot.press("5", "5")
        assert await _until(pilot, "by prompt category (5: next)"), screen_text(app)
        assert "code team" in screen_text(app) and "chat" in screen_text(app)
