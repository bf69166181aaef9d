"""τ of SGLang's request records: token-weighted overall and per class, each with a 95% CI, and the outliers.

Per request τ = completion_tokens / spec_verify_ct (SGLang's own `spec_accept_length`). The token-weighted τ of
a set of requests is Σ completion_tokens / Σ spec_verify_ct, the τ its tokens got. Its CI: the bootstrap of
specmon.bench.stats over the requests (resampled as pairs) while a class has at most BOOTSTRAP_MAX requests;
above, the normal approximation of a ratio estimator (the delta method, from running sums: memory stays
constant for a million records), which a bootstrap of that many requests agrees with.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from specmon.bench.stats import MIN_CI_SAMPLES, ci95
from specmon.traffic.records import RequestRecord, label

BOOTSTRAP_MAX = 300
PROMPT_BUCKETS = (256, 1024, 4096, 16384)
OUTPUT_BUCKETS = (64, 256, 1024)
NOTHING_FROM_DRAFT_TAU = 1.1
"""τ at most this over a long output: the draft got (almost) nothing accepted."""
NOTHING_FROM_DRAFT_MIN_TOKENS = 64
AT_MAXIMUM_SHARE = 0.5
"""A request whose steps accepted the chain's maximum this often or more (over AT_MAXIMUM_MIN_STEPS steps)."""
AT_MAXIMUM_MIN_STEPS = 16
MAX_OUTLIERS = 20
TAU_BIN = 0.25
TAU_BINS = 32
"""The distribution of per-request τ: tokens per bin of TAU_BIN from 1.0; the last bin holds τ ≥ 1 + 31 x 0.25 = 8.75
(a chain of 8 drafts accepts at most 9 tokens a step)."""
MAX_CLASSES = 200
"""Distinct values of one `--by` key kept apart; the rest are pooled as OTHER."""
OTHER = "(other values)"
MISSING = "(none)"
DOTTED_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}(?:\.[A-Za-z0-9_-]{1,64}){0,7}\Z")
"""A key of request_parameters, dotted for nested keys (`--by`, a category rule's `key`)."""
Z95 = 1.959963984540054


def bucket(value: int | None, edges: tuple[int, ...]) -> str:
    if value is None:
        return MISSING
    return _bucket_names(edges)[bisect.bisect_right(edges, value)]


def _bucket_names(edges: tuple[int, ...]) -> tuple[str, ...]:
    lows = (0, *edges)
    return tuple(f"{low}-{edge - 1}" for low, edge in zip(lows, edges, strict=False)) + (f">={edges[-1]}",)


PROMPT_NAMES = _bucket_names(PROMPT_BUCKETS)
OUTPUT_NAMES = _bucket_names(OUTPUT_BUCKETS)


@dataclass(slots=True)
class Tally:
    """Running sums of one set of requests (constant memory), and its first BOOTSTRAP_MAX pairs."""

    requests: int = 0
    tokens: int = 0
    verify: int = 0
    sum_cc: float = 0.0
    sum_vv: float = 0.0
    sum_cv: float = 0.0
    pairs: list[tuple[int, int]] = field(default_factory=list)

    def add(self, completion: int, verify: int) -> None:
        self.requests += 1
        self.tokens += completion
        self.verify += verify
        self.sum_cc += completion * completion
        self.sum_vv += verify * verify
        self.sum_cv += completion * verify
        if len(self.pairs) <= BOOTSTRAP_MAX:
            self.pairs.append((completion, verify))

    def merge(self, other: Tally) -> None:
        """Add `other`'s requests (its pairs too, while they may still be bootstrapped)."""
        self.requests += other.requests
        self.tokens += other.tokens
        self.verify += other.verify
        self.sum_cc += other.sum_cc
        self.sum_vv += other.sum_vv
        self.sum_cv += other.sum_cv
        if len(self.pairs) <= BOOTSTRAP_MAX:
            self.pairs.extend(other.pairs[: BOOTSTRAP_MAX + 1 - len(self.pairs)])

    @property
    def accept_length(self) -> float | None:
        return self.tokens / self.verify if self.verify else None

    def ci(self, bootstrap: bool = True) -> list[float | None] | None:
        """The 95% CI of the token-weighted τ: bootstrapped while few requests (unless not `bootstrap`: a view
        redrawn every 2 s, where a bootstrap each time cost 5% of a core), else the normal approximation."""
        if self.requests < MIN_CI_SAMPLES or not self.verify:
            return None
        if bootstrap and self.requests <= BOOTSTRAP_MAX:
            return ci95(sorted(self.pairs), _ratio)  # sorted: the same requests, the same CI, in any order
        ratio = self.tokens / self.verify
        n = self.requests
        residual = (self.sum_cc - 2 * ratio * self.sum_cv + ratio * ratio * self.sum_vv) / (n - 1)
        half = Z95 * math.sqrt(max(0.0, residual) / n) / (self.verify / n)
        return [ratio - half, ratio + half]


def _ratio(pairs) -> float:
    verify = sum(v for _, v in pairs)
    return sum(c for c, _ in pairs) / verify if verify else 0.0


def by_value(params: dict[str, Any] | None, key: str) -> str:
    """The value of a dotted key of request_parameters, as a label; MISSING when absent."""
    value: Any = params
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return MISSING
        value = value[part]
    return MISSING if value is None else label(value)


Cell = tuple[str | None, str | None, str | None, str | None]
"""A record's place: its prompt bucket, output bucket, `by` value and category (None: not classed so)."""
CATEGORY = "prompt category"
"""The class axis of prompt categories (a space: no `--by` key can be named so)."""


class TrafficSummary:
    """Feeds on records; `result()` is the JSON-ready summary. Classes: by the value of `by` when given, by prompt
    and output length buckets when `buckets` (by default: when no `by`), by prompt category when `categorise` (a
    record's category: `categories.Categories.of_record`). Summaries of disjoint records merge.

    Each record is added to one cell (its prompt bucket, output bucket, `by` value and category: one Tally, not one
    per class); the classes and the total are the cells summed when the result is asked for."""

    def __init__(self, by: str | None = None, buckets: bool | None = None,
                 categorise: Callable[[RequestRecord], str] | None = None) -> None:
        self.by = by
        self.buckets = by is None if buckets is None else buckets
        self.categorise = categorise
        self.cells: dict[Cell, Tally] = {}
        self._by_values: set[str] = set()
        self.tau_tokens = [0] * TAU_BINS
        self.nothing_from_draft: list[RequestRecord] = []
        self.nothing_count = 0
        self.max_depth = 0
        self.at_max: dict[int, list[RequestRecord]] = {}
        self.at_max_count: dict[int, int] = {}

    def _by_label(self, value: str) -> str:
        """The value itself while fewer than MAX_CLASSES values were seen, else OTHER."""
        if value not in self._by_values:
            if len(self._by_values) >= MAX_CLASSES:
                return OTHER
            self._by_values.add(value)
        return value

    def add(self, record: RequestRecord) -> None:
        c, v = record.completion_tokens, record.verify_ct
        self.tau_tokens[min(TAU_BINS - 1, int((c / v - 1.0) / TAU_BIN))] += c
        by = self._by_label(by_value(record.params, self.by)) if self.by else None
        category = self.categorise(record) if self.categorise is not None else None
        if self.buckets:
            prompt = record.prompt_tokens
            key: Cell = (MISSING if prompt is None else PROMPT_NAMES[bisect.bisect_right(PROMPT_BUCKETS, prompt)],
                         OUTPUT_NAMES[bisect.bisect_right(OUTPUT_BUCKETS, c)], by, category)
        else:
            key = (None, None, by, category)
        cell = self.cells.get(key)
        if cell is None:
            cell = self.cells[key] = Tally()
        cell.add(c, v)
        if c >= NOTHING_FROM_DRAFT_MIN_TOKENS and c / v <= NOTHING_FROM_DRAFT_TAU:
            self.nothing_count += 1
            _keep_longest(self.nothing_from_draft, record)
        histogram = record.histogram
        if histogram:
            depth = len(histogram) - 1
            if depth > self.max_depth:
                self.max_depth = depth
            if depth > 0 and v >= AT_MAXIMUM_MIN_STEPS and histogram[-1] >= AT_MAXIMUM_SHARE * v:
                self.at_max_count[depth] = self.at_max_count.get(depth, 0) + 1
                _keep_longest(self.at_max.setdefault(depth, []), record)

    def feed(self, records: Iterable[RequestRecord]) -> TrafficSummary:
        for record in records:
            self.add(record)
        return self

    def merge(self, other: TrafficSummary) -> TrafficSummary:
        """Add another summary's requests (other records than this one's, classed the same way)."""
        self.tau_tokens = [a + b for a, b in zip(self.tau_tokens, other.tau_tokens, strict=True)]
        for (prompt, output, by, category), tally in other.cells.items():
            key = (prompt, output, None if by is None else self._by_label(by), category)
            cell = self.cells.get(key)
            if cell is None:
                cell = self.cells[key] = Tally()
            cell.merge(tally)
        self.nothing_count += other.nothing_count
        for record in other.nothing_from_draft:
            _keep_longest(self.nothing_from_draft, record)
        self.max_depth = max(self.max_depth, other.max_depth)
        for depth, kept in other.at_max.items():
            self.at_max_count[depth] = self.at_max_count.get(depth, 0) + other.at_max_count.get(depth, 0)
            for record in kept:
                _keep_longest(self.at_max.setdefault(depth, []), record)
        return self

    def totals(self) -> tuple[Tally, dict[tuple[str, str], Tally]]:
        """The cells summed: every request, and each class (by, value)."""
        total = Tally()
        classes: dict[tuple[str, str], Tally] = {}
        for (prompt, output, by, category), cell in self.cells.items():
            total.merge(cell)
            for key in (("prompt_tokens", prompt), ("completion_tokens", output), (self.by, by), (CATEGORY, category)):
                if key[1] is not None:
                    classes.setdefault(key, Tally()).merge(cell)  # type: ignore[arg-type]
        return total, classes

    def result(self, bootstrap: bool = True) -> dict[str, Any]:
        """The summary as JSON-ready values (CIs bootstrapped for small sets unless not `bootstrap`)."""
        total, tallies = self.totals()
        classes: list[dict[str, Any]] = []
        for (by, value), tally in tallies.items():
            classes.append({
                "by": by, "value": value, "requests": tally.requests, "tokens": tally.tokens,
                "share": tally.tokens / total.tokens if total.tokens else None,
                "accept_length": tally.accept_length, "ci": tally.ci(bootstrap),
            })
        classes.sort(key=lambda c: (c["by"], _order(c["value"]), c["value"]))
        loops = self.at_max.get(self.max_depth, []) if self.max_depth else []
        by_length = lambda kept: sorted(kept, key=lambda r: -r.completion_tokens)  # noqa: E731
        outliers = [_outlier(r, "nothing_from_draft") for r in by_length(self.nothing_from_draft)]
        outliers += [_outlier(r, "at_chain_maximum") for r in by_length(loops)]
        return {
            "requests": total.requests,
            "tokens": total.tokens,
            "accept_length": {"token_weighted": total.accept_length, "ci": total.ci(bootstrap)},
            "tau_distribution": {"bin": TAU_BIN, "from": 1.0, "tokens": list(self.tau_tokens)},
            "classes": classes,
            "outliers": outliers,
            "outlier_counts": {"nothing_from_draft": self.nothing_count,
                               "at_chain_maximum": self.at_max_count.get(self.max_depth, 0) if self.max_depth else 0},
            "chain_maximum_seen": self.max_depth or None,
        }


def _order(value: str) -> int:
    digits = value.lstrip(">=").split("-")[0]
    return int(digits) if digits.isdigit() else -1 if value == MISSING else 1 << 40


def _keep_longest(kept: list[RequestRecord], record: RequestRecord) -> None:
    kept.append(record)
    if len(kept) > MAX_OUTLIERS:
        kept.sort(key=lambda r: -r.completion_tokens)
        del kept[MAX_OUTLIERS:]


def _outlier(record: RequestRecord, kind: str) -> dict[str, Any]:
    return {"rid": record.rid, "kind": kind, "completion_tokens": record.completion_tokens,
            "verify_ct": record.verify_ct, "accept_length": record.accept_length}
