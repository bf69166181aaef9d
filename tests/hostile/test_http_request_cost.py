"""A poll of the server costs no import: each request's modules are loaded by the first (an import asked on every
request is a search of sys.path that fails, as httpcore's ask for `sniffio` was: a third of an idle app's cost)."""

from __future__ import annotations

import sys

from specmon.serving.client import SGLangClient
from tests.support.serving_replay import ReplayServer


class _CountingFinder:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def find_spec(self, name, path=None, target=None):
        self.asked.append(name)
        return None


async def test_polling_requests_import_nothing():
    with ReplayServer() as server:
        async with SGLangClient(server.url) as client:
            await client.alive(timeout=5)  # the first request may import what it needs
            finder = _CountingFinder()
            sys.meta_path.insert(0, finder)
            try:
                for _ in range(5):
                    await client.alive(timeout=5)
                    await client.metrics()
            finally:
                sys.meta_path.remove(finder)
    assert finder.asked == []
