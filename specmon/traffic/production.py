"""Production's prompts as a benchmark, and whether a benchmark represents production.

`sample_prompts` draws benchmark prompts from SGLang's request records where they hold the prompt's text, or its
token ids (`input_ids`: a client that tokenises itself, or SGLang's router; sent back as `input_ids`): per
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
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from specmon.bench.model import BenchResult, ProductionCheck, ServerFacts, Speculative
from specmon.bench.prompts import Prompt, PromptError, ids_hash, load_prompts, text_hash, token_ids
from specmon.bench.report import UNREPRESENTATIVE
from specmon.serving.client import OWN_RID_PREFIX
from specmon.text import printable
from specmon.traffic.categories import NO_TEXT, NO_TEXT_HINT, Categories, prompt_class, record_text
from specmon.traffic.reader import ReadTally, read_records
from specmon.traffic.records import LaunchedShape, RequestRecord, weights_name
from specmon.traffic.summary import Tally

TRAFFIC_PREFIX = "traffic:"
"""A run's stored `prompts` when they were sampled from production: `traffic:PATH`."""
MAX_SAMPLE = 10_000
MAX_SAMPLE_BYTES = 512 * 1024 * 1024
"""The prompts the per-class reservoirs may hold at once (up to 3 × n prompts): text by its characters, token ids
by ID_BYTES each."""
ID_BYTES = 8
"""What one token id costs a reservoir (a tuple's slot; the ints of the ids of a prompt are mostly shared)."""


class NoPromptText(Exception):
    """The records hold no prompt a benchmark can send; the message says why in one line."""


@dataclass
class ProductionSample:
    """Prompts drawn from production and what the drawing met."""

    prompts: list[Prompt] = field(default_factory=list)
    records: int = 0
    classes: Counter = field(default_factory=Counter)  # records with text or token ids, per class
    without_text: Counter = field(default_factory=Counter)  # records without a usable text or ids, per reason
    tally: ReadTally = field(default_factory=ReadTally)
    categories: Categories = field(default_factory=Categories.heuristic)

    def describe(self) -> str:
        shares = ", ".join(f"{c} {100 * n / max(1, sum(self.classes.values())):.0f} %"
                           for c, n in self.classes.most_common())
        return (f"{len(self.prompts)} prompts sampled from {sum(self.classes.values()):,} of {self.records:,} "
                f"production records ({shares}; categories: {self.categories.describe()})"
                + "".join(f"; {n:,} skipped: {why}" for why, n in self.without_text.most_common(4)))


def record_prompt(record: RequestRecord) -> tuple[str | tuple[int, ...] | None, str | None]:
    """(the prompt's text or token ids, None) or (None, why neither) for one record; token ids are checked as a
    prompt file's are (prompts.token_ids)."""
    text, why = record_text(record)
    if text is not None or (ids := (record.params or {}).get("input_ids")) is None:
        return text, why
    if isinstance(ids, list) and ids and isinstance(ids[0], list):
        return None, "a batch of prompts in one request"
    try:
        return token_ids(ids), None
    except ValueError as exc:
        return None, str(exc)


def _allocate(counts: Counter, n: int) -> dict[str, int]:
    """`n` split over the classes in proportion to `counts` (largest remainder)."""
    total = sum(counts.values())
    exact = {c: n * k / total for c, k in counts.items()}
    out = {c: int(v) for c, v in exact.items()}
    for c in sorted(exact, key=lambda c: out[c] - exact[c])[: n - sum(out.values())]:
        out[c] += 1
    return out


def sample_prompts(paths: list[str], n: int, seed: int = 0, max_new_tokens: int | None = None,
                   categories: Categories | None = None) -> ProductionSample:
    """`n` prompts (at most MAX_SAMPLE) from the records under `paths`, keeping the mix of `categories` (None: the
    heuristic's classes); each prompt's max_new_tokens is the completion tokens of its record (at most
    `max_new_tokens` when given). NoPromptText when no record holds a text or token ids; PathRefused (reader) when a
    PATH cannot be read."""
    n = max(1, min(n, MAX_SAMPLE))
    rng = random.Random(seed)
    sample = ProductionSample(categories=categories or Categories.heuristic())
    reservoirs: dict[str, list[tuple[str | tuple[int, ...], int, int | None]]] = {}
    held = 0  # characters of text, and ID_BYTES per token id, in the reservoirs
    for record in read_records(paths, sample.tally, want_params=True):
        if record.rid.startswith(OWN_RID_PREFIX):
            continue
        sample.records += 1
        prompt, why = record_prompt(record)
        if prompt is None:
            sample.without_text[why] += 1
            continue
        if isinstance(prompt, str):
            kind = sample.categories.of(prompt, record.params, record.prompt_tokens)
        else:  # ids tell no text rule, only the prompt's length
            tokens = record.prompt_tokens or len(prompt)
            kind = (prompt_class(None, tokens) if sample.categories.rules is None
                    else sample.categories.of(None, record.params, tokens))
        sample.classes[kind] += 1
        kept, seen = reservoirs.setdefault(kind, []), sample.classes[kind]
        item = (prompt, record.completion_tokens, record.prompt_tokens)
        if len(kept) < n:
            kept.append(item)
            held += _size(prompt)
        elif (slot := rng.randrange(seen)) < n:
            held += _size(prompt) - _size(kept[slot][0])
            kept[slot] = item
        if held > MAX_SAMPLE_BYTES:
            raise NoPromptText(f"a sample of {n:,} prompts would hold over {MAX_SAMPLE_BYTES >> 20} MiB of prompt "
                               "text or token ids: ask for fewer requests")
    if not sample.classes:
        where = ", ".join(printable(p) for p in paths)[:200]
        if not sample.records:
            raise NoPromptText(f"{where}: no usable request record to sample prompts from")
        whys = "; ".join(f"{k} ×{v:,}" for k, v in sample.without_text.most_common(3))
        raise NoPromptText(f"{where}: none of {sample.records:,} records holds the prompt's text or token ids ({whys}): "
                           f"{NO_TEXT_HINT}")
    for kind, count in _allocate(sample.classes, n).items():
        for index, (prompt, completion, _) in enumerate(rng.sample(reservoirs[kind], min(count, len(reservoirs[kind])))):
            limit = max(1, completion if max_new_tokens is None else min(completion, max_new_tokens))
            if isinstance(prompt, str):
                sample.prompts.append(Prompt(id=f"{kind}-{index:03d}-{text_hash(prompt)[:8]}", text=prompt,
                                             category=kind, max_new_tokens=limit))
            else:
                sample.prompts.append(Prompt(id=f"{kind}-{index:03d}-{ids_hash(prompt)[:8]}", text="", category=kind,
                                             max_new_tokens=limit, input_ids=prompt))
    rng.shuffle(sample.prompts)
    return sample


def _size(prompt: str | tuple[int, ...]) -> int:
    return len(prompt) if isinstance(prompt, str) else ID_BYTES * len(prompt)


def _shares(counts: Counter) -> dict[str, float]:
    total = sum(counts.values())
    return {c: round(n / total, 4) for c, n in counts.most_common() if n} if total else {}


def _ci(ci: Any) -> str:
    return f"[{ci[0]:.2f}, {ci[1]:.2f}]" if ci and None not in ci else "(no CI)"


def _run_prompts(result: BenchResult, prompts: list[Prompt] | None) -> dict[str, Prompt]:
    """The run's prompts by id: `prompts` when given, else its prompt set read again (not one sampled from
    production, which is not kept); a prompt counts only where its text's hash is the one the run stored."""
    if prompts is None and not result.settings.prompts.startswith(TRAFFIC_PREFIX):
        try:
            prompts = load_prompts(result.settings.prompts)
        except (PromptError, OSError):
            prompts = None
    return {p.id: p for p in prompts or ()}


def bench_categories(result: BenchResult, categories: Categories, prompts: list[Prompt] | None = None) -> Counter:
    """The measured requests of a run per category: the prompt's own `category` where it names one of
    `categories`' (a prompt sampled from production has its category), else `categories` applied to its text
    (NO_TEXT when the run's prompts and their texts are not known)."""
    known = _run_prompts(result, prompts)
    counts: Counter[str] = Counter()
    for request in result.measured:
        if not request.ok:
            continue
        prompt = known.get(request.prompt_id)
        if prompt is not None and request.prompt_hash and prompt.prompt_hash != request.prompt_hash:
            prompt = None
        own = prompt.category if prompt is not None else request.category
        if own in categories.names:
            counts[own] += 1
        else:
            text = (prompt.text or None) if prompt else request.prompt_text
            counts[categories.of(text, None, request.prompt_tokens)] += 1
    return counts


@dataclass
class ProductionRead:
    """What the comparison reads of production's records: τ, categories, and what ties them to the run's server."""

    tally: Tally = field(default_factory=Tally)
    categories: Counter = field(default_factory=Counter)
    own_requests: int = 0  # records of this run's own requests: the records are its server's
    most_accepted: int = 0  # the most drafts one step of a production request accepted (its histogram's length - 1)
    launches: Counter[LaunchedShape] = field(default_factory=Counter)  # the server logs' `server_args` lines


def read_production(paths: list[str], categories: Categories, run_id: str) -> ProductionRead:
    """Production's records under `paths` (every benchmark's own requests left out; this run's counted)."""
    read, tally = ProductionRead(), ReadTally()
    mine = f"{OWN_RID_PREFIX}{run_id}-"
    for record in read_records(paths, tally, want_params=True):
        if record.rid.startswith(OWN_RID_PREFIX):
            read.own_requests += record.rid.startswith(mine)
            continue  # a benchmark's own requests (this one's, or another's) are not production
        read.tally.add(record.completion_tokens, record.verify_ct)
        read.categories[categories.of_record(record)] += 1
        if record.histogram:
            read.most_accepted = max(read.most_accepted, len(record.histogram) - 1)
    read.launches = tally.launches
    return read


def _launched_as_benchmarked(launched: LaunchedShape, spec: Speculative) -> bool:
    """Whether a launch's configuration is the benchmarked server's, on every field both say (the benchmarked
    server speculated: its run has a τ; a launch without speculation is not it)."""
    if launched.algorithm is None:
        return False
    pairs = ((launched.algorithm, spec.algorithm.upper() if spec.algorithm else None),
             (launched.num_steps, spec.num_steps), (launched.eagle_topk, spec.eagle_topk),
             (launched.num_draft_tokens, spec.num_draft_tokens))
    return all(a == b for a, b in pairs if a is not None and b is not None)


def _other_weights(launched: LaunchedShape, server: ServerFacts) -> str | None:
    """Which weights a launch served that the benchmarked server did not, in words (None: the same, or unsaid),
    each compared by the last part of its path."""
    for role, theirs, ours in (("target", launched.model, server.model_path),
                               ("draft", launched.draft_model, server.speculative.draft_model_path)):
        if theirs is not None and (mine := weights_name(ours)) is not None and theirs != mine:
            return f"{role} weights {theirs}, the server benchmarked {mine}"
    return None


def same_configuration(result: BenchResult, production: ProductionRead) -> tuple[str, str]:
    """("same" | "differs" | "unknown", why): whether production's records come from the configuration the run
    measured. Records carry no server arguments; what ties them to it: a server log's `server_args` lines (each
    launch's configuration and weights), the run's own requests among them (its server wrote them), and a
    production step that accepted more drafts than the run's server drafts (its --speculative-num-steps, or
    --speculative-num-draft-tokens − 1 for a chain), which shows they differ."""
    spec = result.server.speculative
    benchmarked = LaunchedShape(spec.algorithm.upper() if spec.algorithm else "speculation", spec.num_steps,
                                spec.eagle_topk, spec.num_draft_tokens).describe()
    limits = [n for n in (spec.num_steps, (spec.num_draft_tokens or 0) - 1 if spec.eagle_topk == 1 else None)
              if n is not None and n > 0]
    if limits and production.most_accepted > min(limits):
        return "differs", (f"a production step accepted {production.most_accepted} drafts, the server benchmarked "
                           f"drafts at most {min(limits)}")
    launches = sum(production.launches.values())
    other = [shape for shape in production.launches if not _launched_as_benchmarked(shape, spec)]
    if other:
        return "differs", (f"{sum(production.launches[s] for s in other)} of the log's {launches} launches ran "
                           f"{other[0].describe()}, the server benchmarked {benchmarked}")
    weighed = {shape: why for shape in production.launches if (why := _other_weights(shape, result.server))}
    if weighed:
        return "differs", (f"{sum(production.launches[s] for s in weighed)} of the log's {launches} launches "
                           f"served {next(iter(weighed.values()))}")
    if production.own_requests:
        return "same", f"the records hold {production.own_requests:,} of this run's requests: its server wrote them"
    if production.launches:
        return "same", f"the log's server_args show the configuration benchmarked ({benchmarked})"
    return "unknown", ("the records hold none of this run's requests: not tied to the configuration benchmarked "
                       "(give the records its server writes, or its log)")


def check_against_production(result: BenchResult, paths: list[str], prompts: list[Prompt] | None = None,
                             categories: Categories | None = None) -> ProductionCheck | None:
    """The run's τ against production's records under `paths`, with the share of each category on both sides, by
    the same `categories` (None: the heuristic), and whether the records come from the configuration benchmarked.
    None when the run or the records have no τ. The gap is "beyond the CIs" when the two 95% CIs do not overlap."""
    accept = result.summary.accept_length
    if accept.token_weighted is None:
        return None
    categories = categories or Categories.heuristic()
    production = read_production(paths, categories, result.run_id)
    tally = production.tally
    if tally.accept_length is None:
        return None
    production_ci = tally.ci()
    bench_ci = accept.ci95 if isinstance(accept.ci95, list) else None
    gap = (accept.token_weighted - tally.accept_length) / tally.accept_length
    beyond = False
    if bench_ci and production_ci and None not in bench_ci and None not in production_ci:
        (bench_low, bench_high), (low, high) = bench_ci[:2], production_ci[:2]
        beyond = bool(bench_low > high or bench_high < low)  # type: ignore[operator]
    bench_shares = _shares(bench_categories(result, categories, prompts))
    production_shares = _shares(production.categories)
    configuration, why = same_configuration(result, production)
    text = (f"benchmark τ {accept.token_weighted:.2f} {_ci(bench_ci)} vs production {tally.accept_length:.2f} "
            f"{_ci(production_ci)} ({tally.requests:,} records)")
    if beyond:
        text += f": the benchmark {'overstates' if gap > 0 else 'understates'} acceptance by {abs(gap):.0%}"
    elif not (bench_ci and production_ci):
        text += ": too few requests for CIs, not judged"
    else:
        text += ": within the CIs"
    text += _mix_text(bench_shares, production_shares, categories)
    if configuration == "differs":
        text += f"; production runs another configuration ({why}): the gap is not the prompts' alone"
    elif configuration == "unknown":
        text += "; the records cannot be tied to the configuration benchmarked (they hold none of its requests)"
    return ProductionCheck(
        records=", ".join(paths)[:1000], requests=tally.requests, benchmark_tau=accept.token_weighted,
        benchmark_ci95=bench_ci, production_tau=tally.accept_length, production_ci95=production_ci,
        relative_gap=gap, benchmark_shares=bench_shares, production_shares=production_shares, beyond_ci=beyond,
        text=text, categories=categories.describe(), configuration=configuration, configuration_note=why,
    )


def _mix_text(bench: dict[str, float], production: dict[str, float], categories: Categories) -> str:
    """"; its prompts are X % CATEGORY, production's Y %" for the category whose shares differ most (by 5 points
    or more), or what keeps the categories from being compared."""
    if bench.get(NO_TEXT, 0) >= 0.5:
        return "; its prompts' categories are not known (their texts are not kept)"
    if production.get(NO_TEXT, 0) >= 0.5:
        return f"; production's categories are not known: most records hold no prompt text ({NO_TEXT_HINT})"
    names = [c for c in dict.fromkeys([*categories.names, *bench, *production]) if c != NO_TEXT]
    differing = max(names, key=lambda c: abs(bench.get(c, 0) - production.get(c, 0)))
    if not production or abs(bench.get(differing, 0) - production.get(differing, 0)) < 0.05:
        return ""
    return f"; its prompts are {bench.get(differing, 0):.0%} {differing}, production's {production.get(differing, 0):.0%}"


def judge_against(paths: list[str], prompts: list[Prompt] | None = None, categories: Categories | None = None):
    """A BenchRun `before_save` hook: stores the check in the run's summary and flags a gap beyond the CIs."""

    def judge(result: BenchResult) -> None:
        check = check_against_production(result, paths, prompts if prompts else None, categories)
        result.summary.production = check
        if check is not None and check.beyond_ci:
            result.summary.flag(UNREPRESENTATIVE, check.text)

    return judge
