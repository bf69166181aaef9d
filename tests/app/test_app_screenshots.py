"""Screenshots (F8, headless --screenshot/--screenshot-at) are private files: 0600, never through a symlink."""

from __future__ import annotations

import stat

from specmon.tui import shots
from tests.support.app_harness import fixture_app

READY_LOG = "h200-0.5.16-standalone-ready.log"


def _notices(app) -> list[str]:
    return [str(notice.message) for notice in app._notifications]


async def test_f8_saves_a_0600_svg_in_the_current_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    app = fixture_app(READY_LOG)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.press("f8")
        await pilot.pause()
        saved = list(tmp_path.glob("*.svg"))
        assert len(saved) == 1, saved
        assert stat.S_IMODE(saved[0].stat().st_mode) == 0o600
        assert saved[0].read_text().startswith("<svg")
        assert any(str(saved[0]) in notice for notice in _notices(app))


async def test_a_headless_screenshot_is_0600_and_replaces_a_wider_file(tmp_path):
    path = tmp_path / "shot.svg"
    path.write_text("old")
    path.chmod(0o644)
    app = fixture_app(READY_LOG)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert shots.save_svg(app, str(path)) == str(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "<svg" in path.read_text()


async def test_a_symlink_at_the_screenshot_path_is_refused_with_a_notification(tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep me")
    link = tmp_path / "shot.svg"
    link.symlink_to(target)
    app = fixture_app(READY_LOG)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert shots.save_svg(app, str(link)) is None
        await pilot.pause()
        notices = _notices(app)
        assert any("Not saved" in notice and "symbolic link" in notice for notice in notices), notices
    assert target.read_text() == "keep me"
    assert link.is_symlink()
    assert app.return_code in (None, 0)
