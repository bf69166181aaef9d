"""`specmon fix-draft-keys SRC DST --to midlayer|layers.0`: a corrected copy of an EAGLE-3 draft.

Safetensors headers are rewritten without torch (tensor bytes copied as they are), the index's weight_map
renamed to match, a config.json written the speculators library's way rewritten as SGLang reads it
(`heads.sglang_config`), every other file copied; SRC is never written; DST must not exist (the copy is built
in a sibling temporary folder and renamed into place at the end)."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from specmon.inputs import InputError, load_json_file, open_regular
from specmon.preflight.draft import INDEX_FILE, MAX_CONFIG_BYTES, MAX_INDEX_BYTES
from specmon.preflight.heads import is_speculators, sglang_config
from specmon.preflight.safetensors import CheckpointError, rewrite

LAYOUTS = ("midlayer", "layers.0")
_LAYER = re.compile(r"^(model\.)?(midlayer|layers\.(\d+))\.")


def renamer(to: str):
    """A function renaming one key to the `to` layout (`midlayer.*` <-> `layers.0.*`, `model.` kept)."""
    if to not in LAYOUTS:
        raise ValueError(f"--to must be one of {', '.join(LAYOUTS)}")

    def rename(name: str) -> str:
        match = _LAYER.match(name)
        if match is None:
            return name
        if match.group(3) is not None and match.group(3) != "0" and to == "midlayer":
            raise CheckpointError(f"{name}: layer {match.group(3)} cannot become midlayer (one layer only)")
        return f"{match.group(1) or ''}{to}.{name[match.end():]}"

    return rename


CONFIG_FILE = "config.json"
CONVERTED = "config.json (the speculators library's, written as SGLang reads it)"
"""The entry `fix_draft_keys` returns for a converted config.json."""


def fix_draft_keys(src: str | Path, dst: str | Path, to: str = "midlayer") -> dict[str, str]:
    """Write the corrected copy; returns {old key: new key}, and {"config.json": CONVERTED} when its config was
    converted. Raises CheckpointError or FileExistsError."""
    src, dst = Path(src), Path(dst)
    rename = renamer(to)
    if not src.is_dir():
        raise CheckpointError(f"{src} is not a directory")
    if dst.exists():
        raise FileExistsError(f"{dst} already exists; give a new folder")
    if dst.resolve().is_relative_to(src.resolve()):
        raise CheckpointError(f"{dst} is inside {src}")
    if not list(src.glob("*.safetensors")):
        raise CheckpointError(f"{src} holds no .safetensors files")
    dst.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dst.name}-", dir=dst.parent))
    changed: dict[str, str] = {}
    try:
        for item in sorted(src.iterdir()):
            if item.is_dir():
                _copy_folder(item, work / item.name)
            elif item.suffix == ".safetensors":
                changed.update(rewrite(item, work / item.name, rename))
            elif item.name == INDEX_FILE:
                _rename_index(item, work / item.name, rename)
            elif item.name == CONFIG_FILE and _convert_config(item, work / item.name):
                changed[CONFIG_FILE] = CONVERTED
            else:
                _copy_file(item, work / item.name)
        work.rename(dst)
    except InputError as error:
        shutil.rmtree(work, ignore_errors=True)
        raise CheckpointError(str(error)) from None
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return changed


def _copy_file(src: Path, dst: Path) -> None:
    """A regular file (links followed: a Hugging Face cache links to its blobs); InputError for a FIFO or a
    device (/dev/zero would never end)."""
    with open_regular(src, what="checkpoint file") as source, dst.open("xb") as target:
        shutil.copyfileobj(source, target, 1 << 20)
    shutil.copystat(src, dst)


def _copy_folder(src: Path, dst: Path) -> None:
    """A folder's regular files, its folders walked without following links (a link to a folder is refused:
    it could loop)."""
    if src.is_symlink():
        raise InputError(f"{src}: a link to a folder, not copied (copy the folder itself)")
    for root, folders, files in os.walk(src, followlinks=False):
        here = Path(root)
        (dst / here.relative_to(src)).mkdir(parents=True, exist_ok=True)
        for name in folders:
            if (here / name).is_symlink():
                raise InputError(f"{here / name}: a link to a folder, not copied (copy the folder itself)")
        for name in files:
            _copy_file(here / name, dst / here.relative_to(src) / name)


def _convert_config(src: Path, dst: Path) -> bool:
    """Write a speculators config.json as SGLang reads it; False (nothing written) for any other config."""
    try:
        config = load_json_file(src, MAX_CONFIG_BYTES, what="config.json")
    except (InputError, OSError, UnicodeDecodeError, ValueError):
        return False  # copied as it is; the doctor says what is wrong with it
    if not isinstance(config, dict) or not is_speculators(config):
        return False
    try:
        converted = sglang_config(config)
    except ValueError as error:
        raise CheckpointError(f"{src}: a speculators config that cannot be written as SGLang's: {error}") from None
    with dst.open("x", encoding="utf-8") as out:
        out.write(json.dumps(converted, indent=2) + "\n")
    return True


def _rename_index(src: Path, dst: Path, rename) -> None:
    try:
        index = load_json_file(src, MAX_INDEX_BYTES, what="safetensors index")
    except InputError as error:
        raise CheckpointError(str(error)) from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise CheckpointError(f"{src.name}: {error}") from None
    if not isinstance(index, dict) or not isinstance(index.get("weight_map"), dict):
        raise CheckpointError(f"{src.name} has no weight_map object")
    index["weight_map"] = {rename(k): v for k, v in index["weight_map"].items()}
    dst.write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
