"""A body's Content-Encoding undone piece by piece, its decoded size bounded: the one decoder of every answer.

A client library that decodes for itself turns one 1.8 KB network chunk of `gzip, gzip` into 2 GB before anyone
can count it; here each layer goes through zlib with `max_length`, so no layer ever makes more than the limit.
"""

from __future__ import annotations

import zlib

from specmon.http.errors import AnswerRefused, AnswerTooLarge
from specmon.inputs import size_text

MAX_LAYERS = 2
"""Content-Encoding layers decoded at most ("gzip, gzip" is already more than any real server sends)."""

DECODED = "gzip, deflate"
"""The Accept-Encoding specmon sends: the encodings `BodyDecoder` undoes (no br or zstd, whatever is installed)."""


class _Layer:
    def __init__(self, name: str) -> None:
        self.name = name
        # gzip: a gzip member only (wbits 16+); deflate: zlib-wrapped, as RFC 9110 means it.
        self.inflater = zlib.decompressobj(16 + zlib.MAX_WBITS if name in ("gzip", "x-gzip") else zlib.MAX_WBITS)
        self.produced = 0


class BodyDecoder:
    """Decodes a body's Content-Encoding piece by piece; AnswerRefused as soon as a layer's output passes
    `limit` bytes (before it is made), for an encoding other than gzip/deflate, or for bytes past its end."""

    def __init__(self, content_encoding: str | None, limit: int, what: str = "the answer") -> None:
        names = [part.strip().lower() for part in (content_encoding or "").split(",")]
        names = [name for name in names if name and name != "identity"]
        for name in names:
            if name not in ("gzip", "x-gzip", "deflate"):
                raise AnswerRefused.of(what, f"Content-Encoding {name[:40]!r} is not one specmon decodes")
        if len(names) > MAX_LAYERS:
            raise AnswerRefused.of(what, f"Content-Encoding with {len(names)} layers (at most {MAX_LAYERS})")
        self.layers = [_Layer(name) for name in reversed(names)]  # the last applied is undone first
        self.limit = limit
        self.what = what
        self.size = 0

    def _too_large(self) -> AnswerTooLarge:
        return AnswerTooLarge.of(self.what, f"more than {size_text(self.limit)} once decoded")

    def feed(self, raw: bytes) -> bytes:
        data = raw
        for layer in self.layers:
            if not data:
                return b""
            if layer.inflater.eof:
                raise AnswerRefused.of(self.what, f"bytes after the end of its {layer.name} data")
            room = self.limit + 1 - layer.produced
            try:
                data = layer.inflater.decompress(data, room)
            except zlib.error as error:
                raise AnswerRefused.of(self.what, f"broken {layer.name} data ({error})") from None
            layer.produced += len(data)
            if layer.produced > self.limit or layer.inflater.unconsumed_tail:
                raise self._too_large()
            if layer.inflater.unused_data:
                raise AnswerRefused.of(self.what, f"bytes after the end of its {layer.name} data")
        self.size += len(data)
        if self.size > self.limit:
            raise self._too_large()
        return data

    def finish(self) -> bytes:
        for layer in self.layers:
            if not layer.inflater.eof:
                raise AnswerRefused.of(self.what, f"its {layer.name} data ends early")
        return b""
