"""safetensors headers read and rewritten without torch, with bounded memory.

A file is an 8-byte little-endian header length N, N bytes of JSON (`{name: {"dtype", "shape",
"data_offsets": [begin, end]}, "__metadata__": {...}}`), then the tensor bytes; offsets are relative to the
end of the header. Nothing more than the declared header is read, and an absurd length is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmon.inputs import InputError, open_regular, parse_json

MAX_HEADER_BYTES = 100_000_000  # the safetensors library's own limit


class CheckpointError(Exception):
    """A checkpoint file that cannot be used; the message names the file and why."""


@dataclass(frozen=True)
class SafetensorsHeader:
    """The tensors of one safetensors file: name -> {"dtype", "shape", "data_offsets"}."""

    path: Path
    tensors: dict[str, dict[str, Any]]
    metadata: dict[str, Any] | None
    data_start: int  # byte offset of the tensor data in the file
    file_size: int


def read_header(path: str | Path) -> SafetensorsHeader:
    """The header of `path`; CheckpointError for a truncated file, an absurd length or bad JSON."""
    path = Path(path)
    try:
        with open_regular(path, what="safetensors file") as handle:
            size = os.fstat(handle.fileno()).st_size
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise CheckpointError(f"{path.name}: truncated ({size} bytes, no safetensors header)")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES:
                raise CheckpointError(f"{path.name}: header length {length} bytes is absurd "
                                      f"(over {MAX_HEADER_BYTES}); not a safetensors file?")
            if 8 + length > size:
                raise CheckpointError(f"{path.name}: truncated: header says {length} bytes, file has {size}")
            raw = handle.read(length)
    except InputError as error:
        raise CheckpointError(str(error).replace(str(path), path.name, 1)) from None
    except OSError as error:
        raise CheckpointError(f"{path.name}: cannot read: {error.strerror or error}") from error
    try:
        header = parse_json(raw, where=f"{path.name}: the header")
    except InputError as error:
        raise CheckpointError(str(error)) from None
    except (UnicodeDecodeError, ValueError) as error:
        raise CheckpointError(f"{path.name}: the header is not JSON: {error}") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path.name}: the header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    data_size = size - 8 - length
    for name, entry in header.items():
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            raise CheckpointError(f"{path.name}: tensor {name!r} has no valid data_offsets")
        if offsets[1] > data_size:
            raise CheckpointError(f"{path.name}: truncated: tensor {name!r} ends at byte {offsets[1]} "
                                  f"of a {data_size}-byte data section")
    return SafetensorsHeader(path, header, metadata if isinstance(metadata, dict) else None, 8 + length, size)


def encode_header(tensors: dict[str, dict[str, Any]], metadata: dict[str, Any] | None) -> bytes:
    """Length prefix + JSON header padded with spaces to 8 bytes, as safetensors writes it."""
    body: dict[str, Any] = {"__metadata__": metadata} if metadata is not None else {}
    body.update(tensors)
    raw = json.dumps(body, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def rewrite(src: Path, dst: Path, rename: Callable[[str], str]) -> dict[str, str]:
    """Copy `src` to `dst` with each tensor name passed through `rename`; the data bytes are copied as they
    are (offsets are relative to the header's end). Returns {old: new} for the names that changed."""
    header = read_header(src)
    renamed: dict[str, dict[str, Any]] = {}
    changed: dict[str, str] = {}
    for name, entry in header.tensors.items():
        new = rename(name)
        if new in renamed:
            raise CheckpointError(f"{src.name}: renaming would give two tensors the name {new!r}")
        renamed[new] = entry
        if new != name:
            changed[name] = new
    with open_regular(src, what="safetensors file") as source, dst.open("xb") as target:
        target.write(encode_header(renamed, header.metadata))
        source.seek(header.data_start)
        shutil.copyfileobj(source, target, 1 << 20)
    return changed
