"""The apps' own attributes never hide a method of Textual's: `self.watch = ...` on an App made `app.watch(...)`
(DOMNode.watch, how a widget follows a reactive) a call of the object put there instead."""

from __future__ import annotations

import inspect

from textual.app import App

from tests.support.app_harness import ready_app
from tests.support.fleet_harness import fleet_app


def shadowed(app: App) -> list[str]:
    """The names of the app's instance attributes that are methods of Textual's App (or of its bases)."""
    return sorted(name for name in vars(app) if inspect.isfunction(inspect.getattr_static(App, name, None)))


async def test_no_attribute_of_the_monitor_hides_a_textual_method() -> None:
    app = ready_app()
    assert shadowed(app) == []
    async with app.run_test(size=(100, 30)) as pilot:  # and none set as it mounts
        await pilot.pause()
        assert shadowed(app) == []


async def test_no_attribute_of_the_fleet_app_hides_a_textual_method() -> None:
    app = fleet_app()
    assert shadowed(app) == []
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert shadowed(app) == []
