"""Benchmark prompts: the built-in chat set (`builtin:chat`) and user JSONL files.

A JSONL line is `{"prompt": "..."}` or `{"prompt": [{"role": ..., "content": ...}, ...]}` (a multi-turn
conversation), optionally with `id` and `category`; `messages` is accepted for `prompt`. A conversation is
rendered into one text prompt that ends with the assistant's turn. A line may give `{"input_ids": [...]}` (token
ids, sent to /generate as they are) instead of a prompt: at most MAX_PROMPT_IDS ids, each in 0..MAX_TOKEN_ID.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from specmon.inputs import MIB, InputError, parse_json, read_text

BUILTIN_PREFIX = "builtin:"
BUILTIN_SETS = {"chat": "prompts_chat.jsonl"}
DEFAULT_PROMPTS = "builtin:chat"
MAX_PROMPTS_BYTES = 64 * MIB
MAX_PROMPT_DEPTH = 16
"""A prompt line nests at most 3 levels (a list of messages, each an object)."""
MAX_PROMPT_IDS = 1 << 20
"""The most token ids one prompt may hold (a text prompt is bounded by its file's or its record line's bytes)."""
MAX_TOKEN_ID = 2**31 - 1


class PromptError(ValueError):
    """A prompt set cannot be read or a line of it is not a prompt."""


@dataclass(frozen=True)
class Prompt:
    """One benchmark prompt: what is sent to /generate, its `text` or else its token ids (`input_ids`)."""

    id: str
    text: str
    category: str = ""
    max_new_tokens: int | None = None
    """Its own token limit (a prompt sampled from production: the tokens its request got); None: the run's."""
    input_ids: tuple[int, ...] | None = None
    """The prompt as token ids, sent as /generate's `input_ids` (then `text` is empty)."""

    def __post_init__(self) -> None:
        if bool(self.text) == (self.input_ids is not None):
            raise ValueError("a prompt holds either a text or token ids")

    @property
    def sent(self) -> str | tuple[int, ...]:
        """What /generate is sent: the text, or the token ids."""
        return self.text if self.input_ids is None else self.input_ids

    @property
    def prompt_hash(self) -> str:
        """A short hash of the text or the ids: what a stored result keeps of a prompt unless asked for it."""
        return text_hash(self.text) if self.input_ids is None else ids_hash(self.input_ids)


def text_hash(text: str) -> str:
    """The first 16 hex digits of the SHA-256 of `text` (UTF-8)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _ids_bytes(ids: tuple[int, ...]) -> bytes:
    return b"input_ids:" + ",".join(map(str, ids)).encode("ascii")


def ids_hash(ids: tuple[int, ...]) -> str:
    """The first 16 hex digits of the SHA-256 of the ids (never the hash of a text: their bytes start apart)."""
    return hashlib.sha256(_ids_bytes(ids)).hexdigest()[:16]


def token_ids(value: Any) -> tuple[int, ...]:
    """`value` as prompt token ids: a non-empty list of at most MAX_PROMPT_IDS ints in 0..MAX_TOKEN_ID; else
    ValueError saying why in a few words."""
    if not isinstance(value, list) or not value:
        raise ValueError("input_ids is not a non-empty list")
    if len(value) > MAX_PROMPT_IDS:
        raise ValueError(f"input_ids holds {len(value):,} ids, over {MAX_PROMPT_IDS:,}")
    if not all(type(i) is int and 0 <= i <= MAX_TOKEN_ID for i in value):
        raise ValueError(f"input_ids holds something not a token id (an int in 0..{MAX_TOKEN_ID})")
    return tuple(value)


def render_messages(messages: list[dict[str, Any]]) -> str:
    """A conversation as one plain-text prompt, ending with an open assistant turn."""
    lines = []
    for message in messages:
        role = str(message.get("role", "user")).strip().capitalize() or "User"
        lines.append(f"{role}: {str(message.get('content', '')).strip()}")
    if not lines or not lines[-1].startswith("Assistant:"):
        lines.append("Assistant:")
    return "\n\n".join(lines)


def _parse_line(data: Any, where: str, index: int) -> Prompt:
    if not isinstance(data, dict):
        raise PromptError(f"{where}: not a JSON object")
    body = data.get("prompt", data.get("messages"))
    if "input_ids" in data:
        if body is not None:
            raise PromptError(f"{where}: gives both a prompt and input_ids")
        try:
            ids = token_ids(data["input_ids"])
        except ValueError as exc:
            raise PromptError(f"{where}: {exc}") from None
        return Prompt(id=str(data.get("id", f"p{index:03d}")), text="", category=str(data.get("category", "")),
                      input_ids=ids)
    if isinstance(body, str) and body.strip():
        text = body
    elif isinstance(body, list) and body and all(isinstance(m, dict) for m in body):
        text = render_messages(body)
    else:
        raise PromptError(f"{where}: needs \"prompt\" (a string or a list of messages) or \"input_ids\"")
    return Prompt(id=str(data.get("id", f"p{index:03d}")), text=text, category=str(data.get("category", "")))


def parse_prompts(text: str, source: str = "<prompts>") -> list[Prompt]:
    """Prompts from JSONL text; blank lines and lines starting with # are skipped."""
    prompts: list[Prompt] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{source}:{number}"
        try:
            data = parse_json(line, where=where, max_depth=MAX_PROMPT_DEPTH)
        except InputError as exc:
            raise PromptError(str(exc)) from None
        except ValueError as exc:  # a 5,000-digit number is a plain ValueError, without .msg
            raise PromptError(f"{where}: not JSON ({getattr(exc, 'msg', exc)})") from None
        prompts.append(_parse_line(data, where, len(prompts)))
    if not prompts:
        raise PromptError(f"{source}: no prompts")
    return prompts


def load_prompts(spec: str = DEFAULT_PROMPTS) -> list[Prompt]:
    """The prompts named by `spec`: `builtin:<name>` or the path of a JSONL file."""
    if spec.startswith(BUILTIN_PREFIX):
        name = spec[len(BUILTIN_PREFIX) :]
        if name not in BUILTIN_SETS:
            raise PromptError(f"unknown built-in prompt set {spec!r} (known: builtin:{', builtin:'.join(BUILTIN_SETS)})")
        text = resources.files("specmon.bench").joinpath(BUILTIN_SETS[name]).read_text(encoding="utf-8")
        return parse_prompts(text, spec)
    path = Path(spec).expanduser()
    try:
        text = read_text(path, MAX_PROMPTS_BYTES, what="prompts file")
    except InputError as exc:
        raise PromptError(f"cannot read prompts from {exc}") from None
    except UnicodeDecodeError as exc:
        raise PromptError(f"cannot read prompts from {path}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise PromptError(f"cannot read prompts from {path}: {exc.strerror or exc}") from exc
    return parse_prompts(text, str(path))


def prompt_set_hash(prompts: list[Prompt]) -> str:
    """A short hash of the prompts (texts or ids) in order, stored with results so runs can be checked comparable."""
    digest = hashlib.sha256()
    for prompt in prompts:
        digest.update(prompt.text.encode("utf-8") if prompt.input_ids is None else _ids_bytes(prompt.input_ids))
        digest.update(b"\0")
    return digest.hexdigest()[:16]
