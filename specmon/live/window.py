"""One run's /metrics scrapes, kept bounded, and the figures over a window taken from their deltas."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from specmon.live.quantiles import Percentiles, bucket_delta, percentiles_ms
from specmon.serving.prom import HISTOGRAMS, Scrape
from specmon.sglang.metric_names import (
    CACHED_TOKENS_TOTAL,
    GENERATION_TOKENS_TOTAL,
    NUM_REQUESTS_TOTAL,
    PROMPT_TOKENS_TOTAL,
    REALTIME_TOKENS_TOTAL,
    SPEC_ACCEPT_LENGTH,
    SPEC_ACCEPT_RATE,
    SPEC_VERIFY_CALLS_TOTAL,
)

GEN = GENERATION_TOKENS_TOTAL
VERIFY = SPEC_VERIFY_CALLS_TOTAL
PROMPT = PROMPT_TOKENS_TOTAL
CACHED = CACHED_TOKENS_TOTAL
REQUESTS = NUM_REQUESTS_TOTAL
DECODE_TOKENS = f"{REALTIME_TOKENS_TOTAL}{{mode=decode}}"
RESET_COUNTERS = (GEN, VERIFY, PROMPT, REQUESTS, DECODE_TOKENS)
TTFT, ITL, E2E = HISTOGRAMS

RECENT_KEEP = 90
COARSE_EVERY_S = 10.0
COARSE_KEEP = 100
"""Every scrape for the last ~90 (1 Hz), then one per 10 s for ~1000 s: a 15-minute window fits, bounded."""


@dataclass(frozen=True)
class WindowFigures:
    """What happened over one window of a run, from counter and bucket deltas (None: cannot say)."""

    window_s: float
    elapsed_s: float
    taken_from: float
    """When the window's first scrape was taken (Unix time); its last is `taken_from + elapsed_s`."""
    decode_tok_s: float | None
    decode_at_finish: bool
    """Whether `decode_tok_s` counts a request's tokens when it ends (`generation_tokens_total`, before SGLang
    0.5.9), not as they are generated (`realtime_tokens_total`)."""
    generated: float | None
    accept_length: float | None
    accept_gauge: float | None
    """SGLang's own acceptance length over the window: the mean of its `spec_accept_length` gauge (each a
    decode-log window of 40 steps) at the scrapes where tokens were generated since the scrape before."""
    accept_rate: float | None
    """The same mean of its `spec_accept_rate` gauge (no counter says the rate: SGLang keeps it per window)."""
    cache_hit_rate: float | None
    requests: float | None
    ttft: Percentiles
    itl: Percentiles
    e2e: Percentiles


def counters_went_down(before: Scrape, after: Scrape) -> bool:
    """A counter that decreased means the server restarted (counters start again from zero)."""
    for name in RESET_COUNTERS:
        b, a = before.counters.get(name), after.counters.get(name)
        if b is not None and a is not None and a < b:
            return True
    for name in HISTOGRAMS:
        b_hist, a_hist = before.histograms.get(name), after.histograms.get(name)
        if b_hist and a_hist and a_hist[-1][1] < b_hist[-1][1]:
            return True
    return False


def _generated(before: Scrape, after: Scrape) -> bool:
    """Whether tokens were generated between two scrapes (realtime decode tokens, else finished requests')."""
    for name in (DECODE_TOKENS, GEN):
        b, a = before.counters.get(name), after.counters.get(name)
        if b is not None and a is not None:
            return a > b
    return False


class ScrapeWindow:
    """The scrapes of one run (never mixed across restarts): every one recently, one per 10 s before."""

    def __init__(self) -> None:
        self.recent: deque[Scrape] = deque(maxlen=RECENT_KEEP)
        self.coarse: deque[Scrape] = deque(maxlen=COARSE_KEEP)

    @property
    def latest(self) -> Scrape | None:
        return self.recent[-1] if self.recent else None

    def add(self, scrape: Scrape) -> None:
        self.recent.append(scrape)
        if not self.coarse or scrape.taken_at - self.coarse[-1].taken_at >= COARSE_EVERY_S:
            self.coarse.append(scrape)

    def base(self, window_s: float) -> Scrape | None:
        """The oldest kept scrape inside the window (the run's first when the run is younger)."""
        latest = self.latest
        if latest is None:
            return None
        start = latest.taken_at - window_s
        for ring in (self.coarse, self.recent) if window_s > RECENT_KEEP * 0.6 else (self.recent,):
            for scrape in ring:
                if scrape.taken_at >= start - 0.5:
                    return scrape if scrape is not latest else None
        return None

    def figures(self, window_s: float) -> WindowFigures | None:
        latest = self.latest
        base = self.base(window_s)
        if latest is None or base is None:
            return None
        elapsed = latest.taken_at - base.taken_at
        if elapsed <= 0:
            return None

        def d(name: str) -> float | None:
            a, b = latest.counters.get(name), base.counters.get(name)
            return None if a is None or b is None else max(0.0, a - b)

        gen, verify = d(GEN), d(VERIFY)
        decode = d(DECODE_TOKENS)
        accept_gauge, accept_rate = self._gauge_means(base, (SPEC_ACCEPT_LENGTH, SPEC_ACCEPT_RATE))
        produced = decode if decode is not None else gen
        prompt, cached = d(PROMPT), d(CACHED)
        return WindowFigures(
            window_s=window_s,
            elapsed_s=elapsed,
            taken_from=base.taken_at,
            decode_tok_s=None if produced is None else produced / elapsed,
            decode_at_finish=decode is None,
            generated=gen,
            accept_length=gen / verify if gen and verify else None,
            accept_gauge=accept_gauge,
            accept_rate=accept_rate,
            cache_hit_rate=cached / prompt if cached is not None and prompt else None,
            requests=d(REQUESTS),
            ttft=self._percentiles(TTFT, base, latest),
            itl=self._percentiles(ITL, base, latest),
            e2e=self._percentiles(E2E, base, latest),
        )

    def _gauge_means(self, base: Scrape, names: tuple[str, ...]) -> list[float | None]:
        """Each gauge's mean over the scrapes after `base` that saw tokens generated since the one before (a gauge
        SGLang sets per decode-log window keeps its last value while idle: those readings say nothing new)."""
        ring = self.recent if self.recent and self.recent[0].taken_at <= base.taken_at else self.coarse
        sums, counts = [0.0] * len(names), [0] * len(names)
        before: Scrape | None = None
        for scrape in ring:
            if scrape.taken_at < base.taken_at:
                continue
            if before is not None and _generated(before, scrape):
                for i, name in enumerate(names):
                    value = scrape.gauges.get(name)
                    if value is not None:
                        sums[i] += value
                        counts[i] += 1
            before = scrape
        return [total / n if n else None for total, n in zip(sums, counts, strict=True)]

    @staticmethod
    def _percentiles(name: str, base: Scrape, latest: Scrape) -> Percentiles:
        after = latest.histograms.get(name)
        if after is None:
            return Percentiles()
        return percentiles_ms(bucket_delta(base.histograms.get(name), after))
