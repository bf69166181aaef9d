"""Hostile files for tests: FIFOs nobody writes to, links to /dev/zero, sparse files of many GiB (no disk used),
JSON and TOML nested 100,000 deep, and a small EAGLE-3 draft checkpoint to spoil."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

DRAFT_NAMES = [f"midlayer.{key}" for key in (
    "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
    "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight",
    "post_attention_layernorm.weight", "hidden_norm.weight")] + ["fc.weight", "norm.weight", "lm_head.weight",
                                                                  "d2t", "t2d"]
DRAFT_CONFIG = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 8, "vocab_size": 32,
                "draft_vocab_size": 16, "num_hidden_layers": 1, "tie_word_embeddings": False}


def fifo(path: Path) -> Path:
    """A FIFO at `path` that nobody writes to: opening it the usual way waits forever."""
    os.mkfifo(path)
    return path


def zero_link(path: Path) -> Path:
    """A link to /dev/zero at `path`: endless bytes, size 0."""
    path.symlink_to("/dev/zero")
    return path


def sparse(path: Path, size: int = 20 << 30, head: bytes = b"") -> Path:
    """A file of `size` bytes that takes no disk (a hole after `head`)."""
    with path.open("wb") as handle:
        handle.write(head)
        handle.truncate(size)
    return path


def deep_json_text(depth: int = 100_000, opener: str = "[") -> str:
    return ('{"a":' * depth + "1" + "}" * depth) if opener == "{" else "[" * depth + "1" + "]" * depth


DEEP_TOML = {
    "arrays": "x = " + "[" * 100_000 + "]" * 100_000 + "\n",
    "inline tables": "x = " + "{a = " * 5_000 + "1" + "}" * 5_000 + "\n",
    "dotted keys": "[" + ".".join(["a"] * 20_000) + "]\nx = 1\n",
    "dotted assignment": ".".join(["b"] * 20_000) + " = 1\n",
}


def safetensors_bytes(names: list[str], header_extra: dict | None = None) -> bytes:
    tensors, offset = {}, 0
    for name in names:
        tensors[name] = {"dtype": "F32", "shape": [1], "data_offsets": [offset, offset + 4]}
        offset += 4
    raw = json.dumps({"__metadata__": {"format": "pt"}, **(header_extra or {}), **tensors}).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + bytes(offset)


def make_draft(root: Path, names: list[str] | None = None, config: dict | None = None) -> Path:
    """A tiny EAGLE-3 draft that the doctor passes (the test spoils one file of it)."""
    draft = root / "draft"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps(DRAFT_CONFIG if config is None else config))
    (draft / "model.safetensors").write_bytes(safetensors_bytes(DRAFT_NAMES if names is None else names))
    return draft
