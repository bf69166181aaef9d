"""Production's prompts as a benchmark, and whether a benchmark represents production.

`sample_prompts` draws benchmark prompts from SGLang's request records where they hold the prompt's text: per
class (`prompt_class`) a seeded reservoir, then as many prompts from each class as its share of the records, each
with the tokens its request got as its own max_new_tokens (so the sample keeps production's class mix and its
output-length distribution). `check_against_production` sets a finished benchmark's τ against the records'.

Where SGLang keeps the text (sgl-project/sglang, srt/utils/request_logger.py `_compute_metadata`, used by
observability/request_metrics_exporter.py): the export file holds `request_parameters.text` (or `input_ids`)
unless --log-requests is on at level 0 or 1 (their skip list then applies to the export too); the request log
holds it at --log-requests-level 3, cut to its first and last 1,024 characters at level 2.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from specmon.bench.model import BenchResult, ProductionCheck
from specmon.bench.prompts import Prompt, text_hash
from specmon.bench.report import UNREPRESENTATIVE
from specmon.serving.client import OWN_RID_PREFIX
from specmon.text import printable
from specmon.traffic.reader import ReadTally, read_records
from specmon.traffic.records import RequestRecord
from specmon.traffic.summary import PROMPT_BUCKETS, Tally

CODE = "code"
LONG = "long"
OTHER = "other"
CLASSES = (CODE, LONG, OTHER)
LONG_PROMPT_TOKENS = PROMPT_BUCKETS[2]
"""A prompt of this many tokens or more is "long" (the traffic summary's 4096+ buckets)."""
MAX_SAMPLE = 10_000
MAX_SAMPLE_BYTES = 512 * 1024 * 1024
"""The prompt text the per-class reservoirs may hold at once (up to 3 × n prompts)."""
LEVEL2_HALF = 1024
"""--log-requests-level 2 keeps a string's first and last 1,024 characters around "..." (SGLang's max_length 2048)."""
NO_TEXT_HINT = ("SGLang keeps it in the export file (--export-metrics-to-file) unless --log-requests is on at "
                "level 0 or 1, and in the request log at --log-requests-level 3")
_CODE_LINE = re.compile(r"^\s*(def |class |import |from \S+ import |#include|function |fn |func |public |"
                        r"const |let |var |SELECT |return\b).*|.*[;{}][ \t\r]*(?=\n|\Z)", re.MULTILINE)
MIN_CODE_LINES = 3


class NoPromptText(Exception):
    """The records hold no prompt a benchmark can send; the message says why in one line."""


def prompt_class(text: str | None, prompt_tokens: int | None) -> str:
    """A request's class: "code" (a fenced block, or 3+ lines that read as code), else "long" (4096+ prompt
    tokens), else "other". Without the text only "long" can be told; the rest is "other"."""
    if text and ("```" in text or len(_CODE_LINE.findall(text, 0, 65536)) >= MIN_CODE_LINES):
        return CODE
    if prompt_tokens is not None and prompt_tokens >= LONG_PROMPT_TOKENS:
        return LONG
    return OTHER


def _cut_by_level2(text: str) -> bool:
    return len(text) == 2 * LEVEL2_HALF + 3 and text[LEVEL2_HALF:LEVEL2_HALF + 3] == "..."


def record_text(record: RequestRecord) -> tuple[str | None, str | None]:
    """(the prompt's text, None) or (None, why not) for one record."""
    params = record.params or {}
    text = params.get("text")
    if isinstance(text, str) and text.strip():
        if _cut_by_level2(text):
            return None, "text cut by --log-requests-level 2"
        return text, None
    if isinstance(text, list):
        return None, "a batch of prompts in one request"
    if params.get("input_ids") is not None:
        return None, "token ids only (input_ids), no text"
    return None, "no prompt text"


@dataclass
class ProductionSample:
    """Prompts drawn from production and what the drawing met."""

    prompts: list[Prompt] = field(default_factory=list)
    records: int = 0
    classes: Counter = field(default_factory=Counter)  # records with text, per class
    without_text: Counter = field(default_factory=Counter)  # records without a usable text, per reason
    tally: ReadTally = field(default_factory=ReadTally)

    def describe(self) -> str:
        shares = ", ".join(f"{c} {100 * n / max(1, sum(self.classes.values())):.0f} %"
                           for c, n in self.classes.most_common())
        return (f"{len(self.prompts)} prompts sampled from {sum(self.classes.values()):,} of {self.records:,} "
                f"production records ({shares})")


def _allocate(counts: Counter, n: int) -> dict[str, int]:
    """`n` split over the classes in proportion to `counts` (largest remainder)."""
    total = sum(counts.values())
    exact = {c: n * k / total for c, k in counts.items()}
    out = {c: int(v) for c, v in exact.items()}
    for c in sorted(exact, key=lambda c: out[c] - exact[c])[: n - sum(out.values())]:
        out[c] += 1
    return out


def sample_prompts(paths: list[str], n: int, seed: int = 0, max_new_tokens: int | None = None) -> ProductionSample:
    """`n` prompts (at most MAX_SAMPLE) from the records under `paths`, keeping the class mix; each prompt's
    max_new_tokens is the completion tokens of its record (at most `max_new_tokens` when given). NoPromptText
    when no record holds a text; PathRefused (reader) when a PATH cannot be read."""
    n = max(1, min(n, MAX_SAMPLE))
    rng = random.Random(seed)
    sample = ProductionSample()
    reservoirs: dict[str, list[tuple[str, int, int | None]]] = {}
    held = 0  # characters of text in the reservoirs
    for record in read_records(paths, sample.tally, want_params=True):
        if record.rid.startswith(OWN_RID_PREFIX):
            continue
        sample.records += 1
        text, why = record_text(record)
        if text is None:
            sample.without_text[why] += 1
            continue
        kind = prompt_class(text, record.prompt_tokens)
        sample.classes[kind] += 1
        kept, seen = reservoirs.setdefault(kind, []), sample.classes[kind]
        item = (text, record.completion_tokens, record.prompt_tokens)
        if len(kept) < n:
            kept.append(item)
            held += len(text)
        elif (slot := rng.randrange(seen)) < n:
            held += len(text) - len(kept[slot][0])
            kept[slot] = item
        if held > MAX_SAMPLE_BYTES:
            raise NoPromptText(f"a sample of {n:,} prompts would hold over {MAX_SAMPLE_BYTES >> 20} MiB of prompt "
                               "text: ask for fewer requests")
    if not sample.classes:
        where = ", ".join(printable(p) for p in paths)[:200]
        if not sample.records:
            raise NoPromptText(f"{where}: no usable request record to sample prompts from")
        whys = "; ".join(f"{k} ×{v:,}" for k, v in sample.without_text.most_common(3))
        raise NoPromptText(f"{where}: none of {sample.records:,} records holds the prompt's text ({whys}): "
                           f"{NO_TEXT_HINT}")
    for kind, count in _allocate(sample.classes, n).items():
        for index, (text, completion, _) in enumerate(rng.sample(reservoirs[kind], min(count, len(reservoirs[kind])))):
            limit = max(1, completion if max_new_tokens is None else min(completion, max_new_tokens))
            sample.prompts.append(Prompt(id=f"{kind}-{index:03d}-{text_hash(text)[:8]}", text=text, category=kind,
                                         max_new_tokens=limit))
    rng.shuffle(sample.prompts)
    return sample


def _shares(classes: Counter) -> dict[str, float]:
    total = sum(classes.values())
    return {c: round(classes[c] / total, 4) for c in CLASSES if total and classes[c]} if total else {}


def _ci(ci: Any) -> str:
    return f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci and None not in ci else "(no CI)"


def check_against_production(result: BenchResult, paths: list[str], prompts: list[Prompt] | None = None,
                             ) -> ProductionCheck | None:
    """The run's τ against production's records under `paths`, with the class shares of each (the run's classes
    from `prompts`' texts, else from its stored texts, else "long" alone from its prompt tokens). None when the
    run or the records have no τ. The gap is "beyond the CIs" when the two 95% CIs do not overlap."""
    accept = result.summary.accept_length
    if accept.token_weighted is None:
        return None
    tally, classes = Tally(), Counter[str]()
    read = ReadTally()
    for record in read_records(paths, read, want_params=True):
        if record.rid.startswith(OWN_RID_PREFIX):
            continue  # a benchmark's own requests (this one's, or another's) are not production
        tally.add(record.completion_tokens, record.verify_ct)
        text, _ = record_text(record)
        if text is not None or record.prompt_tokens is not None:
            classes[prompt_class(text, record.prompt_tokens)] += 1
    if tally.accept_length is None:
        return None
    texts = {p.id: p.text for p in prompts or ()}
    bench_classes = Counter(
        prompt_class(texts.get(r.prompt_id, r.prompt_text), r.prompt_tokens) for r in result.measured if r.ok)
    production_ci = tally.ci()
    bench_ci = accept.ci95 if isinstance(accept.ci95, list) else None
    gap = (accept.token_weighted - tally.accept_length) / tally.accept_length
    beyond = False
    if bench_ci and production_ci and None not in bench_ci and None not in production_ci:
        (bench_low, bench_high), (low, high) = bench_ci[:2], production_ci[:2]
        beyond = bool(bench_low > high or bench_high < low)  # type: ignore[operator]
    bench_shares, production_shares = _shares(bench_classes), _shares(classes)
    text = (f"benchmark τ {accept.token_weighted:.2f} {_ci(bench_ci)} vs production {tally.accept_length:.2f} "
            f"{_ci(production_ci)} ({tally.requests:,} records)")
    if beyond:
        text += f": the benchmark {'overstates' if gap > 0 else 'understates'} acceptance by {abs(gap):.0%}"
    elif not (bench_ci and production_ci):
        text += ": too few requests for CIs, not judged"
    else:
        text += ": within the CIs"
    differing = max(CLASSES, key=lambda c: abs(bench_shares.get(c, 0) - production_shares.get(c, 0)))
    if production_shares and abs(bench_shares.get(differing, 0) - production_shares.get(differing, 0)) >= 0.05:
        text += (f"; its prompts are {bench_shares.get(differing, 0):.0%} {differing}, "
                 f"production's {production_shares.get(differing, 0):.0%}")
    return ProductionCheck(
        records=", ".join(paths)[:1000], requests=tally.requests, benchmark_tau=accept.token_weighted,
        benchmark_ci95=bench_ci, production_tau=tally.accept_length, production_ci95=production_ci,
        relative_gap=gap, benchmark_shares=bench_shares, production_shares=production_shares, beyond_ci=beyond,
        text=text,
    )


def judge_against(paths: list[str], prompts: list[Prompt] | None = None):
    """A BenchRun `before_save` hook: stores the check in the run's summary and flags a gap beyond the CIs."""

    def judge(result: BenchResult) -> None:
        check = check_against_production(result, paths, prompts)
        result.summary.production = check
        if check is not None and check.beyond_ci:
            result.summary.flag(UNREPRESENTATIVE, check.text)

    return judge
