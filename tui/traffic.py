"""The Traffic tab's wiring: SGLang's request records followed on the one poll loop (`PeriodicReader`), the last
minutes summarised and their model built on that thread, handed to the app as a `TrafficRead` message."""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Protocol

from specmon.loop_thread import PeriodicReader
from specmon.traffic.follow import TrafficFollower
from specmon.traffic.window import DEFAULT_WINDOW_S, TrafficWindow
from specmon.tui.messages import TrafficRead
from specmon.view.traffic_pane import traffic_pane

if TYPE_CHECKING:
    from textual.message import Message

    from specmon.tui.config import AppConfig

REFRESH_S = 2.0


class TrafficHost(Protocol):
    """What the Traffic tab's wiring uses of the app: its settings, and a thread-safe way to post a message."""

    config: AppConfig

    def post_message(self, message: Message) -> bool: ...


class TrafficWiring:
    """Follows the app's request records (none named: the tab says how to get them) and posts the tab's model."""

    def __init__(self, app: TrafficHost, window_s: float = DEFAULT_WINDOW_S) -> None:
        self.app = app
        self.window_s = window_s
        self.paths = list(app.config.traffic_paths)
        self.by = app.config.traffic_by
        self.categories = app.config.traffic_categories
        self.follower: TrafficFollower | None = None
        self.window = TrafficWindow(window_s, self.by, self.categories.of_record if self.categories else None)
        self.reader: PeriodicReader | None = None

    def start(self) -> None:
        if not self.paths:
            self._post(None)
            return
        self.follower = TrafficFollower(self.paths, since_ts=time.time() - self.window_s,
                                        want_params=self.by is not None or self.categories is not None)
        self.reader = PeriodicReader("traffic records", self.read, interval_s=REFRESH_S)
        self.reader.start()

    def read(self, _session: None = None) -> None:
        """Read what the records gained, and post the model of the window ending now."""
        assert self.follower is not None
        records = self.follower.poll()
        now = time.time()
        self.window.add(records, now)
        self._post(self.window.summary(now).result(bootstrap=False))

    def _post(self, result: dict | None) -> None:
        follower = self.follower
        self.app.post_message(TrafficRead(traffic_pane(
            result, window_s=self.window_s, paths=self.paths, problems=follower.problems if follower else {},
            skipped=dict(follower.tally.skipped) if follower else {}, by=self.by)))

    def stop(self) -> None:
        if self.reader is not None:
            self.reader.stop()
        if self.follower is not None:
            with contextlib.suppress(OSError):
                self.follower.close()
