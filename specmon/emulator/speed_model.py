"""How fast the emulated server decodes and how many draft tokens it accepts, and what text it writes.

Step time: a verify step over d tokens costs `BASE_STEP_S + PER_TOKEN_S * d`, plus `DRAFT_STEP_S` per draft
step, and grows modestly with the batch; each request beyond the first adds `VERIFY_LOAD_S * d` (the verify's
work grows with batch x draft tokens), so speculation pays at low load and loses past a crossover batch that comes
sooner the more draft tokens it verifies. Without speculation d = 1 (about 90 tok/s for one stream); at batch 1
the figures are as they were before the load term.
Acceptance: along the draft chain, position i (1-based) is accepted with probability `p * DEPTH_DECAY**(i-1)`
given that the previous one was, up to min(steps, draft_tokens - 1) positions; every step also yields the
target's bonus token. With p = 0.75 an EAGLE3 preset with 4-8 draft tokens accepts about 2.5-2.9 tokens per
step, and 16 draft tokens gain little acceptance for a costlier verify, so they are slower.
Traffic classes (`request_class`): a prompt holding a fenced code block accepts more (p + CODE_ACCEPT_BONUS), a
prompt of LONG_PROMPT_TOKENS or more less (p * LONG_PROMPT_FACTOR); any other prompt has no class and keeps p.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

BASE_STEP_S = 0.0108
PER_TOKEN_S = 0.0003
DRAFT_STEP_S = 0.0006
DEPTH_DECAY = 0.9
BATCH_SLOWDOWN = 0.04  # per extra running request
VERIFY_LOAD_S = 0.0025  # per extra running request and verified token
EOS_TOKEN_ID = 128009
CODE_ACCEPT_BONUS = 0.15
LONG_PROMPT_TOKENS = 4096
LONG_PROMPT_FACTOR = 0.85
MAX_ACCEPT_PROB = 0.95

VOCAB = (
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on",
    "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "they", "you",
    "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when",
    "will", "would", "who", "so", "no", "model", "token", "draft", "verify", "graph", "memory", "cache",
    "batch", "speed", "server", "request", "stream", "decode", "prefill", "layer", "head", "weight",
    "tensor", "kernel", "GPU", "latency", "throughput", "accept", "length", "step", "tree", "branch",
    "path", "score", "sample", "greedy", "search", "window", "context", "prompt", "answer", "question",
    "reason", "detail", "example", "result", "value", "number", "system", "process", "signal", "river",
    "mountain", "city", "harbor", "forest", "garden", "lantern", "bridge", "market", "library", "village",
    "station", "island", "quiet", "bright", "early", "late", "simple", "careful", "rapid", "steady",
    "gentle", "clear", "certain", "modern", "ancient", "distant", "explains", "describes", "suggests",
    "measures", "compares", "improves", "reduces", "follows", "returns", "builds", "keeps", "moves",
)


def _seed(*parts: object) -> int:
    digest = hashlib.blake2b("\x1f".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


@dataclass(frozen=True)
class SpecShape:
    """The effective speculative settings of a launch (steps = 0 means no speculation)."""

    steps: int = 0
    topk: int = 1
    draft_tokens: int = 1

    @property
    def enabled(self) -> bool:
        return self.steps > 0

    @property
    def depth(self) -> int:
        return max(0, min(self.steps, self.draft_tokens - 1)) if self.enabled else 0


class SpeedModel:
    """Step times and per-step acceptance for one launch."""

    def __init__(self, shape: SpecShape, accept_prob: float, time_scale: float = 1.0) -> None:
        self.shape = shape
        self.accept_prob = accept_prob
        self.time_scale = time_scale

    def step_seconds(self, batch_size: int = 1) -> float:
        """Wall time of one decode (or draft + verify) step for a batch, after the speed factor."""
        shape = self.shape
        verify_tokens = shape.draft_tokens if shape.enabled else 1
        seconds = BASE_STEP_S + PER_TOKEN_S * verify_tokens + DRAFT_STEP_S * (shape.steps if shape.enabled else 0)
        seconds *= 1 + BATCH_SLOWDOWN * max(0, batch_size - 1)
        seconds += VERIFY_LOAD_S * verify_tokens * max(0, batch_size - 1)
        return seconds / self.time_scale

    def position_prob(self, position: int, accept_prob: float | None = None, decay: float | None = None) -> float:
        return ((self.accept_prob if accept_prob is None else accept_prob)
                * (DEPTH_DECAY if decay is None else decay) ** (position - 1))

    def expected_accept_length(self, accept_prob: float | None = None) -> float:
        """Expected tokens per verify step (accepted drafts + the bonus token)."""
        total, chain = 1.0, 1.0
        for position in range(1, self.shape.depth + 1):
            chain *= self.position_prob(position, accept_prob)
            total += chain
        return total

    def draw_accepted(self, rng: random.Random, accept_prob: float | None = None, decay: float | None = None) -> int:
        """Accepted draft tokens of one verify step (0..depth)."""
        accepted = 0
        for position in range(1, self.shape.depth + 1):
            if rng.random() >= self.position_prob(position, accept_prob, decay):
                break
            accepted += 1
        return accepted

    def expected_tokens_per_s(self, batch_size: int = 1) -> float:
        per_step = self.expected_accept_length() if self.shape.enabled else 1.0
        return per_step / self.step_seconds(batch_size)


class TextModel:
    """The emulated model's output: a fixed function of the prompt (and of the seed when sampling).

    Speculation never changes it: tokens depend only on the prompt and their position.
    """

    def __init__(self, prompt: str, temperature: float = 0.0, sample_seed: int | None = None) -> None:
        seed = _seed("text", prompt) if temperature <= 0 or sample_seed is None else _seed("text", prompt, sample_seed)
        self._rng = random.Random(seed)
        self._ids: list[int] = []
        self.eos_position = 48 + random.Random(_seed("eos", prompt)).randrange(400)

    def token_id(self, index: int) -> int:
        while len(self._ids) <= index:
            self._ids.append(self._rng.randrange(len(VOCAB)))
        return 1000 + self._ids[index]

    @staticmethod
    def piece(token_id: int, index: int) -> str:
        word = VOCAB[(token_id - 1000) % len(VOCAB)]
        if index == 0:
            return " " + word.capitalize()
        if index % 13 == 12:
            return " " + word + "."
        if index % 7 == 6:
            return " " + word + ","
        return " " + word


def acceptance_rng(prompt: str, seed: int = 0) -> random.Random:
    """The acceptance draws of a request: seeded by its prompt, so repeated runs repeat."""
    return random.Random(_seed("accept", prompt, seed))


def count_prompt_tokens(text: str) -> int:
    return max(1, round(len(text) / 4))


def request_class(prompt: str, prompt_tokens: int) -> str | None:
    """The emulated traffic class of a prompt: "code", "long", or None (the default acceptance)."""
    if "```" in prompt:
        return "code"
    if prompt_tokens >= LONG_PROMPT_TOKENS:
        return "long"
    return None


def class_accept_prob(accept_prob: float, traffic_class: str | None) -> float:
    """The acceptance probability of a class (the launch's own for no class)."""
    if traffic_class == "code":
        return min(MAX_ACCEPT_PROB, accept_prob + CODE_ACCEPT_BONUS)
    if traffic_class == "long":
        return accept_prob * LONG_PROMPT_FACTOR
    return accept_prob
