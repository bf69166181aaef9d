"""A grid sweep's configurations: one base preset and the values asked per axis (`--steps 1,3,5 --topk 1,4
--draft-tokens 4,8,16 --concurrency 1,4,16,64`) expanded into the speculative configurations the installed SGLang
accepts. Each candidate goes through the preflight's own speculative check (`check_speculative`, that version's
rules read from its source): one SGLang would refuse is dropped with the preflight's reason; one SGLang would
rewrite (topk 1 runs steps + 1 draft tokens) is measured once, as SGLang runs it, the others that run the same are
dropped as duplicates. No I/O beyond what `find_sglang` reads."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specmon.sweep.plan import SweepError

if TYPE_CHECKING:
    from specmon.launch.presets import Preset

MAX_AXIS_VALUES = 16
MAX_DRAFT = 64
"""The largest steps, topk or draft-token count asked (SGLang's kernels and CUDA graphs are sized far below)."""
MAX_CONCURRENCY = 1024
MAX_CONFIGS = 256
AXES = {"steps": ("--steps", 1, MAX_DRAFT), "topk": ("--topk", 1, MAX_DRAFT),
        "draft_tokens": ("--draft-tokens", 1, MAX_DRAFT), "concurrency": ("--concurrency", 1, MAX_CONCURRENCY)}
_SPEC_CODES = ("spec-draft-tokens-too-many", "spec-args-incomplete", "unknown-algorithm")
"""The preflight's speculative errors that drop a configuration (the others concern the base preset as a whole)."""


def parse_axis(text: str, axis: str) -> list[int]:
    """`1,3,5` as [1, 3, 5] (sorted, without repeats); SweepError naming the flag for anything else."""
    flag, low, high = AXES[axis]
    if len(text) > 200:
        raise SweepError(f"{flag}: too long")
    values: list[int] = []
    for word in text.split(","):
        word = word.strip()
        if not word:
            continue
        if not word.isdigit() or len(word) > 9:
            raise SweepError(f"{flag} {text!r}: {word[:20]!r} is not a whole number")
        value = int(word)
        if not low <= value <= high:
            raise SweepError(f"{flag} {value}: outside {low}–{high}")
        values.append(value)
    if not values:
        raise SweepError(f"{flag} {text!r}: no values (an empty grid)")
    values = sorted(set(values))
    if len(values) > MAX_AXIS_VALUES:
        raise SweepError(f"{flag}: {len(values)} values, at most {MAX_AXIS_VALUES}")
    return values


@dataclass(frozen=True, order=True)
class GridConfig:
    """One speculative configuration as SGLang runs it (steps 0: no speculation)."""

    steps: int
    topk: int
    draft_tokens: int

    @property
    def chain(self) -> bool:
        return self.topk == 1

    @classmethod
    def from_json(cls, item: dict[str, Any]) -> GridConfig:
        """The configuration of a report's cell, band or crossover item (its steps, topk and draft_tokens)."""
        return cls(int(item["steps"]), int(item["topk"]), int(item["draft_tokens"]))

    def label(self) -> str:
        """Short, for tables: "s3 k1 d4"."""
        return "no speculation" if self.steps == 0 else f"s{self.steps} k{self.topk} d{self.draft_tokens}"

    def words(self) -> str:
        """Spelled out, for sentences: "steps 3 topk 1 draft 4"."""
        return ("no speculation" if self.steps == 0
                else f"steps {self.steps} topk {self.topk} draft {self.draft_tokens}")

    def to_json(self) -> dict[str, int]:
        return {"steps": self.steps, "topk": self.topk, "draft_tokens": self.draft_tokens}


BASELINE = GridConfig(0, 1, 1)


def preset_name(base: str, config: GridConfig) -> str:
    """The derived preset's name (`specmon ps` shows it): `BASE@s3k1d4`."""
    return f"{base}@s{config.steps}k{config.topk}d{config.draft_tokens}"


def grid_preset(base: Preset, config: GridConfig) -> Preset:
    """The base preset with this configuration's three speculative flags (its model and other flags kept)."""
    args = {**base.args, "speculative-num-steps": config.steps, "speculative-eagle-topk": config.topk,
            "speculative-num-draft-tokens": config.draft_tokens}
    return dataclasses.replace(base, name=preset_name(base.name, config), args=args)


def baseline_preset(base: Preset) -> Preset:
    """The base preset without speculation: every `speculative-*` flag left out."""
    args = {key: value for key, value in base.args.items() if not key.startswith("speculative-")}
    return dataclasses.replace(base, name=f"{base.name}@nospec", args=args)


def check_base(base: Preset) -> None:
    """A grid's base is a speculative preset with a model: SweepError otherwise."""
    model = base.args.get("model-path")
    if not isinstance(model, str) or not model.strip():
        raise SweepError(f"preset {base.name!r} names no model (model-path): a grid keeps the base's model")
    algorithm = base.speculative.algorithm
    if not isinstance(algorithm, str) or not algorithm:
        raise SweepError(f"preset {base.name!r} is not speculative (no speculative-algorithm): a grid varies a "
                         "speculative base's steps, topk and draft tokens")
    if algorithm.upper() == "NGRAM":
        raise SweepError(f"preset {base.name!r} drafts with NGRAM, which has no draft tree to vary")


@dataclass
class Expansion:
    """The configurations kept (in launch order: the longest chain first, so its trace can predict the shorter
    ones) and those dropped, each with why."""

    configs: list[GridConfig]
    dropped: list[dict[str, Any]]
    sglang: str
    """Which SGLang's rules decided ("SGLang 0.5.16, package source")."""


def expand(base: Preset, steps: list[int], topk: list[int], draft_tokens: list[int]) -> Expansion:
    """Every (steps, topk, draft tokens) asked, judged by the preflight's speculative check of the base's SGLang."""
    from specmon.preflight.checks import check_speculative
    from specmon.preflight.locate import find_sglang
    from specmon.preflight.report import PreflightReport

    check_base(base)
    if len(steps) * len(topk) * len(draft_tokens) > MAX_CONFIGS * 4:
        raise SweepError(f"{len(steps) * len(topk) * len(draft_tokens)} combinations: too many to judge")
    facts = find_sglang(base)
    kept: dict[GridConfig, tuple[int, int, int]] = {}
    dropped: list[dict[str, Any]] = []
    for s in steps:
        for k in topk:
            for d in draft_tokens:
                preset = grid_preset(base, GridConfig(s, k, d))
                report = PreflightReport(preset.name, facts.info)
                check_speculative(preset, facts, report, None)
                refused = [p for p in report.errors if p.code in _SPEC_CODES]
                asked = {"steps": s, "topk": k, "draft_tokens": d}
                if refused:
                    dropped.append(asked | {"reason": refused[0].message})
                    continue
                runs = report.effective.get("speculative-num-draft-tokens")
                config = GridConfig(s, k, runs if isinstance(runs, int) else d)
                if config in kept:
                    first = kept[config]
                    dropped.append(asked | {"reason": f"SGLang {facts.info.version or ''} runs it as "
                                            f"{config.label()}, the same as {GridConfig(*first).words()} "
                                            "(measured once)".replace("SGLang  ", "SGLang ")})
                    continue
                kept[config] = (s, k, d)
    if not kept:
        raise SweepError("an empty grid: SGLang accepts none of the asked combinations ("
                         + "; ".join(f"{GridConfig.from_json(r).words()}: {r['reason']}"
                                     for r in dropped[:3]) + ")")
    if len(kept) > MAX_CONFIGS:
        raise SweepError(f"{len(kept)} configurations: at most {MAX_CONFIGS} in one grid")
    order = sorted(kept, key=lambda c: (not c.chain, -c.draft_tokens, -c.steps, c.topk))
    return Expansion(order, dropped, f"SGLang {facts.info.version or 'unknown'} ({facts.info.source})")


def plan_grid(base: Preset, expansion: Expansion, concurrency: list[int], requests: int | None,
              axes: dict[str, list[int]], startup_estimate_s: float | None) -> Any:
    """The grid's SweepPlan: no speculation first and last, each configuration between, every step measured
    at each concurrency on its one server."""
    from specmon.sweep.plan import GridPlan, SweepCell, SweepPlan, SweepStep, new_sweep_id

    def step(config: GridConfig) -> SweepStep:
        baseline = config == BASELINE
        name = baseline_preset(base).name if baseline else preset_name(base.name, config)
        return SweepStep(name, baseline, None if baseline else config.draft_tokens,
                         grid_config=[config.steps, config.topk, config.draft_tokens],
                         cells=[SweepCell(c) for c in concurrency])

    grid = GridPlan(base.name, axes["steps"], axes["topk"], axes["draft_tokens"], concurrency,
                    expansion.dropped, expansion.sglang, startup_estimate_s)
    steps = [step(BASELINE), *(step(c) for c in expansion.configs), step(BASELINE)]
    return SweepPlan(run_id=new_sweep_id(), steps=steps, requests=requests, grid=grid)


def grid_presets(base: Preset, plan: Any) -> dict[str, Preset]:
    """Every preset a grid plan's steps name, rebuilt from its base (a resume needs nothing else)."""
    presets = {base.name: base}
    for step in plan.steps:
        values = step.grid_config or [0, 1, 1]
        config = GridConfig(*values)
        presets[step.preset] = baseline_preset(base) if step.baseline else grid_preset(base, config)
    return presets


def plan_text(plan: Any, skip_predicted_worse: bool = False) -> str:
    """What a grid sweep will do, said before anything starts (with --skip-predicted-worse: which chains may be
    predicted instead of launched, and that trees are measured)."""
    grid = plan.grid
    restarts = len(plan.steps)
    configs = restarts - 2
    cells = sum(len(s.cells) for s in plan.steps)
    estimate = (f"about {grid.startup_estimate_s * restarts / 60:.0f} min of server startups "
                f"({restarts} × {grid.startup_estimate_s:.0f} s, the base's last measured startup), plus measuring"
                if grid.startup_estimate_s else "startup time unknown (no measured startup of the base preset)")
    lines = [f"grid of {grid.base}: {configs} configurations (and no speculation first and last): {restarts} "
             f"restarts, {cells} benchmarks at concurrency {', '.join(map(str, grid.concurrency))}; {estimate}"]
    chains = [s for s in plan.steps[1:-1] if s.grid_config and s.grid_config[1] == 1]
    trees = len(plan.steps) - 2 - len(chains)
    if skip_predicted_worse and len(chains) > 1:
        lines.append(f"  the longest chain ({chains[0].preset}) is measured first: a shorter chain predicted "
                     "slower than no speculation beyond its CI at every concurrency is not launched")
    if trees:
        lines.append(f"  {trees} tree(s) (topk > 1): a chain's trace cannot predict a tree; measured")
    lines.append("  a configuration whose launch fails (or whose server dies) is skipped with its cause and the "
                 "sweep goes on; --resume launches it again, and measures the cells still pending")
    lines += [f"  {s.preset}" for s in plan.steps[1:-1]]
    lines += [f"  dropped {GridConfig.from_json(d).words()}: {d['reason']}"
              for d in grid.dropped]
    return "\n".join(lines)


RETRIED = ("launch failed", "the server died")
"""The grid cells a resume measures again besides those pending: a configuration whose launch failed, or whose
server died under it (the cause may have been the machine's at the time: memory held beside it, a lost GPU)."""


def reopen_for_resume(plan: Any) -> list[str]:
    """A grid plan's configurations a resume launches again (their unmeasured cells pending again): those whose
    launch failed or whose server died, and those with cells still pending; what it reopened, in words."""
    from specmon.sweep.plan import TO_DO

    reopened: list[str] = []
    if plan.grid is None:
        return reopened
    for step in plan.steps:
        retried = [c for c in step.cells if c.state == "failed" and (c.error or "").startswith(RETRIED)]
        if not retried and not any(c.state in TO_DO for c in step.cells):
            continue
        if step.state in TO_DO and not retried:
            continue  # the sweep runs it anyway
        for cell in retried:
            cell.state, cell.error = "pending", None
        step.state, step.error = "pending", None
        reopened.append(f"{step.preset} ({len([c for c in step.cells if c.state in TO_DO])} cell(s) to measure)")
    if reopened:
        plan.finished = False
    return reopened
