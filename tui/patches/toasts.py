"""Notifications that leave nothing painted behind them once they have gone.

Written for Textual 8.2.8 (pinned ``<9``): in a busy app the region an expired toast uncovered was left painted
over on the terminal (seen in tmux; no upstream issue found). Public API only (``notify``, ``set_timer``,
``refresh``): a repaint of the whole screen once each toast has gone. Drop it when toasts leave nothing behind."""

from __future__ import annotations

import contextlib
from typing import Any

from textual.app import App

TOAST_REPAINT_AFTER_S = 0.5
"""A notification's area is repainted this long after it expired (its slide-out is over by then)."""


class RepaintedToasts(App):
    """Textual's notifications, and a whole-screen repaint once each has gone: in a busy app, the region a toast
    uncovered was left painted over on the terminal (a "Benchmark finished" toast over the table, minutes after
    it expired)."""

    def notify(self, message: str, *, title: str = "", severity: Any = "information", timeout: float | None = None,
               markup: bool = True) -> None:
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)
        shown = self.NOTIFICATION_TIMEOUT if timeout is None else timeout
        self.set_timer(shown + TOAST_REPAINT_AFTER_S, self._repaint_screen)

    def clear_notifications(self) -> None:
        super().clear_notifications()
        self.call_after_refresh(self._repaint_screen)

    def _repaint_screen(self) -> None:
        with contextlib.suppress(Exception):  # no screen (shutting down): nothing to repaint
            self.screen.refresh()
