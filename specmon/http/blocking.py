"""`HttpClient.fetch` for code that does not run in an event loop (threads, commands, the app's callbacks)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from specmon.http.client import Answer, HttpClient

T = TypeVar("T")


class BlockingFetcher:
    """`HttpClient.fetch` with its own loop, kept between calls, and a client made and closed with each call
    (`client_options` are HttpClient's), so none is left open whoever forgets to close this. Called from a
    thread whose loop is running (the app's), each call runs on a short-lived thread instead."""

    def __init__(self, base_url: str = "", **client_options: Any) -> None:
        self._runner = asyncio.Runner()
        self._base_url = base_url
        self._options = client_options
        self._closed = False

    def fetch(self, method: str, url: str, *, limit: int, deadline_s: float, **options: Any) -> Answer:
        if self._closed:  # a reader's thread may ask once more as its owner closes it
            raise RuntimeError("closed")
        return _outside_a_loop(lambda: self._runner.run(self._fetch(method, url, limit, deadline_s, options)))

    async def _fetch(self, method: str, url: str, limit: int, deadline_s: float, options: dict) -> Answer:
        async with HttpClient(self._base_url, **self._options) as http:
            return await http.fetch(method, url, limit=limit, deadline_s=deadline_s, **options)

    def close(self) -> None:
        """Close the loop; a second close does nothing (sources are stopped by more than one owner as the app
        ends)."""
        if self._closed:
            return
        self._closed = True
        _outside_a_loop(self._runner.close)

    def __enter__(self) -> BlockingFetcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _outside_a_loop(call: Callable[[], T]) -> T:
    """`call()` here, or on a short-lived thread when this thread runs an event loop (which would refuse it)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return call()
    outcome: dict[str, Any] = {}

    def work() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:  # handed to the caller's thread
            outcome["error"] = error

    worker = threading.Thread(target=work, name="specmon-fetch", daemon=True)
    worker.start()
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
