"""What a speculative server's acceptance length says: the thresholds, and the one rule by which the Live view,
the fleet, `specmon check`, benchmark reports and `log-summary` judge it."""

from __future__ import annotations

MIN_USEFUL_ACCEPT_LENGTH = 1.1
"""Below this mean acceptance length (tokens per verify step) the draft is (almost) never right: a draft whose
weights did not load, or the wrong draft, accepts about one token per step."""
ACCEPT_LOW_RATIO = 0.6
"""Acceptance below this fraction of the preset's last benchmark is far below it."""
MIN_TOKENS_FOR_ACCEPT = 200
"""Fewer generated tokens than this over the window say nothing about acceptance."""
WINDOW_S = 60.0
"""The window of recent serving the Live view shows its figures over, and `log-summary` its acceptance."""


def low_acceptance(accept: float | None, speculative: bool, generated: float | None,
                   baseline: float | None) -> str | None:
    """What is wrong with an acceptance length, or None: far below the preset's last benchmark (``baseline``),
    or ≈ 1 token per step (a draft that does nothing).

    ``generated``: tokens generated over the window (None: enough, as the log's figures are); fewer than
    MIN_TOKENS_FOR_ACCEPT say nothing."""
    if accept is None or not speculative:
        return None
    if generated is not None and generated < MIN_TOKENS_FOR_ACCEPT:
        return None
    if baseline and accept < ACCEPT_LOW_RATIO * baseline:
        return f"acceptance {accept:.2f}, far below the preset's last benchmark {baseline:.2f}"
    if accept < MIN_USEFUL_ACCEPT_LENGTH:
        return f"acceptance {accept:.2f} ≈ 1 token per step: did the draft's weights load?"
    return None
