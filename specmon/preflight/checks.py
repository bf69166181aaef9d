"""The preset's launch flags against one SGLang version: unknown, removed or mistyped flags, the speculative
rules that version enforces, and the algorithm against the draft's architecture."""

from __future__ import annotations

from typing import Any

from specmon.launch.presets import Preset
from specmon.preflight.report import PreflightReport
from specmon.sglang.bounds import BOUNDS, bound_problem, tree_candidates
from specmon.sglang.flags import FlagTable, load_shipped, shipped_versions

CHAIN_KINDS = ("eagle_head", "eagle3_head", "mtp", "model")
"""Draft kinds whose algorithm takes steps, topk and draft tokens all or none (SGLang's eagle-family hook)."""
_STEPS, _TOPK, _DRAFT = "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"
_WHY_EAGLE3 = ("SGLang gives a non-EAGLE3 draft the target's embedding and head and the target stops capturing "
               "the hidden states EAGLE-3 needs")


def _other_versions(option: str, version: str) -> list[str]:
    return [v for v in shipped_versions() if v != version and load_shipped(v).get(option) is not None]


def check_flags(preset: Preset, table: FlagTable, report: PreflightReport, emulator: bool) -> None:
    """Unknown flags (with 'did you mean'), flags of other versions, deprecated flags, and values."""
    version = report.sglang.version or table.version
    for key, value in preset.args.items():
        option = f"--{key}"
        if value is False:
            continue
        if emulator and key.startswith("emulator-"):
            from specmon.emulator.launch_args import emulator_flag_problem

            problem = emulator_flag_problem(option, value)
            if problem:
                report.add("error", "bad-value", f"the emulator refuses it: {problem}", None, option)
            continue
        flag = table.get(option)
        if flag is None:
            suggestion = table.suggest(option)
            elsewhere = _other_versions(option, table.version)
            message = f"SGLang {version} has no {option}: the launch fails at once with 'unrecognized arguments'"
            if elsewhere:
                message += f" ({option} exists in SGLang {', '.join(elsewhere)}: removed or renamed)"
            hint = f"did you mean {suggestion}?" if suggestion else None
            report.add("error", "unknown-flag", message, hint, option)
            continue
        if flag.deprecated:
            helptext = (flag.help or "").strip().split("\n")[0][:160]
            report.add("warning", "deprecated-flag", f"{option} is deprecated in SGLang {version}",
                       helptext or None, option)
        values: list[Any] = value if isinstance(value, list) else [value]
        if value is True:
            if flag.takes_value:
                report.add("error", "flag-needs-value", f"{option} needs a value; the preset gives none", None,
                           option)
            continue
        if not flag.takes_value:
            report.add("error", "flag-takes-no-value", f"{option} is a switch; give true or false, not {value!r}",
                       None, option)
            continue
        for item in values:
            problem = flag.check_value(str(item))
            if problem:
                report.add("error", "bad-value", f"SGLang {version} refuses it: {problem}", None, option)
                continue
            problem = bound_problem(flag.option, str(item), float_flag=flag.type == "float")
            if problem:
                bound = BOUNDS.get(flag.option)
                report.add("error", "value-out-of-bounds", f"{problem} (SGLang {version}'s parser takes it: the "
                           "launch fails later, or runs with nonsense)", f"give a value in {bound}" if bound else
                           "give a finite number", option)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def check_speculative(preset: Preset, facts, report: PreflightReport, target_arch: str | None) -> str | None:
    """The speculative rules of that SGLang; fills `report.effective`. Returns the algorithm (upper-cased)."""
    spec = preset.speculative
    if spec.algorithm is None or not isinstance(spec.algorithm, str):
        return None
    table, rules = facts.table, facts.rules.speculative
    version = report.sglang.version or table.version
    flag = table.get("--speculative-algorithm")
    free_form = flag is not None and not flag.choices  # 0.5.16+: upper-cased, checked after parsing
    algorithm = spec.algorithm.upper() if free_form else spec.algorithm
    known = table.speculative_algorithms
    if free_form and known and algorithm not in known:
        report.add("error", "unknown-algorithm", f"SGLang {version} knows no speculative algorithm "
                   f"{spec.algorithm!r} (it knows {', '.join(known)}): ValueError at startup", None,
                   "--speculative-algorithm")
    steps, topk, draft = _int(spec.num_steps), _int(spec.eagle_topk), _int(spec.num_draft_tokens)
    effective: dict[str, Any] = {"speculative-algorithm": "EAGLE" if algorithm == "NEXTN" else algorithm}
    kind = facts.rules.draft_kind(algorithm)
    if kind is not None:
        effective["draft-kind"] = kind
    if kind == "none":
        draft_path = preset.args.get("speculative-draft-model-path")
        if isinstance(draft_path, str) and draft_path:
            report.add("warning", "draft-path-unused", f"{algorithm} drafts from the text itself and loads no draft "
                       f"model: SGLang {version} ignores --speculative-draft-model-path {draft_path}",
                       "leave --speculative-draft-model-path out", "--speculative-draft-model-path")
    elif kind == "own":
        _check_draft_path(preset, rules, report, algorithm, target_arch, kind)
    if kind in CHAIN_KINDS:
        given = {_STEPS: steps, _TOPK: topk, _DRAFT: draft}
        missing = [flag for flag, value in given.items() if value is None]
        if draft is None and steps is not None and topk == 1 and rules.get("topk1_sets_draft_tokens", True):
            report.add("warning", "spec-draft-tokens-implied", f"no {_DRAFT}: with {_TOPK} 1 SGLang {version} "
                       f"sets it to {_STEPS} + 1 = {steps + 1}", None, _DRAFT)
            draft, missing = steps + 1, []
        if missing and len(missing) < 3:
            present = [flag for flag, value in given.items() if value is not None]
            where = rules.get("all_or_none")
            if steps is None and where:
                why = f"SGLang {version} raises a bare AssertionError ({where}) before loading"
            elif steps is None:
                why = "SGLang fails with an AssertionError"
            else:
                why = "SGLang fails (TypeError) or crashes later in the worker"
            report.add("error", "spec-args-incomplete",
                       f"{' and '.join(present)} without {' and '.join(missing)}: {why}",
                       f"give all three of {_STEPS}, {_TOPK} and {_DRAFT}, or none (SGLang then picks them)",
                       missing[0])
        if steps is not None and topk is not None and draft is not None and min(steps, topk, draft) >= 1:
            runs = draft
            if topk == 1 and draft != steps + 1 and rules.get("topk1_sets_draft_tokens", True):
                runs = steps + 1
                report.add("warning", "spec-draft-tokens-rewritten",
                           f"with {_TOPK} 1 SGLang {version} runs {_STEPS} + 1 = {runs} draft tokens, not {draft}",
                           f"for {draft} draft tokens with topk 1 set {_STEPS} {draft - 1}" if draft >= 2 else
                           f"with topk 1 at least 2 draft tokens run ({_STEPS} 1)", _DRAFT)
            elif topk > 1:
                _check_tree(steps, topk, draft, rules, version, report)
            effective.update({"speculative-num-steps": steps, "speculative-eagle-topk": topk,
                              "speculative-num-draft-tokens": runs})
        elif not missing or len(missing) == 3:
            effective.update({"speculative-num-steps": "auto", "speculative-eagle-topk": "auto",
                              "speculative-num-draft-tokens": "auto"})
        _check_draft_path(preset, rules, report, algorithm, target_arch, kind)
    report.effective.update(effective)
    return algorithm


def _check_tree(steps: int, topk: int, draft: int, rules, version: str, report: PreflightReport) -> None:
    """The draft tree of `steps` x `topk` must offer the `draft - 1` candidates SGLang's torch.topk picks."""
    where = rules.get("draft_tree_topk")
    candidates = tree_candidates(steps, topk)
    if not where:
        report.notes.append(f"draft tree {steps} x {topk}: SGLang {version}'s source shows no tree topk; the "
                            f"{_DRAFT} limit ({candidates} + 1) was not checked")
        return
    if draft - 1 <= candidates:
        report.notes.append(f"draft tree {steps} x {topk}: {candidates} candidates for the {draft - 1} draft tokens "
                            f"verified besides the root (SGLang {version}, {where})")
        return
    report.add("error", "spec-draft-tokens-too-many",
               f"{_DRAFT} {draft} needs {draft - 1} candidates from the draft tree, but {steps} steps x topk {topk} "
               f"give {candidates} ({topk} + {steps - 1} x {topk}x{topk}): SGLang {version}'s torch.topk ({where}) "
               "raises 'selected index k out of range' once the draft runs",
               f"lower {_DRAFT} to at most {candidates + 1}, or raise {_STEPS} or {_TOPK}", _DRAFT)


def _check_draft_path(preset: Preset, rules, report: PreflightReport, algorithm: str, arch: str | None,
                      kind: str) -> None:
    draft = preset.args.get("speculative-draft-model-path")
    mtp = rules.get("draft_defaults_to_target") or []
    if isinstance(draft, str) and draft:
        return
    if kind in ("model", "own"):
        what = "a draft model of its own" if kind == "model" else f"a {algorithm} draft checkpoint"
        report.add("error", "draft-path-missing", f"{algorithm} loads {what}: give --speculative-draft-model-path "
                   f"(SGLang {report.sglang.version} fails without it)", None, "--speculative-draft-model-path")
        return
    if arch is not None and arch in mtp:
        return
    if arch is None:
        report.add("warning", "draft-path-missing", "no --speculative-draft-model-path, and the target's "
                   "architecture is unknown: only MTP targets (e.g. DeepSeek-V3) need none",
                   None, "--speculative-draft-model-path")
        return
    report.add("error", "draft-path-missing", f"{algorithm} needs --speculative-draft-model-path for a {arch} "
               f"target (SGLang {report.sglang.version} fills it in only for {', '.join(mtp[:4])}...); "
               "it fails later, deep in model config loading", None, "--speculative-draft-model-path")


def check_algorithm_vs_draft(algorithm: str | None, architectures: list[str], report: PreflightReport) -> None:
    """An EAGLE-3 draft with EAGLE, or another draft with EAGLE3, is an error."""
    if algorithm is None or not architectures:
        return
    eagle3 = any("eagle3" in arch.lower() for arch in architectures)
    archs = ", ".join(architectures)
    if eagle3 and algorithm in ("EAGLE", "NEXTN"):
        report.add("error", "algorithm-draft-mismatch",
                   f"--speculative-algorithm {algorithm} with an EAGLE-3 draft ({archs}): it serves without a "
                   f"warning, but {_WHY_EAGLE3}, so the trained EAGLE-3 head is thrown away",
                   "use --speculative-algorithm EAGLE3", "--speculative-algorithm")
    elif algorithm == "STANDALONE" and any("eagle" in arch.lower() for arch in architectures):
        report.add("error", "algorithm-draft-mismatch",
                   f"--speculative-algorithm STANDALONE with an EAGLE head ({archs}): STANDALONE runs the draft as a "
                   "model of its own, and a head cannot run without the target's hidden states",
                   "use --speculative-algorithm EAGLE3 (or EAGLE) for a head", "--speculative-algorithm")
    elif not eagle3 and algorithm == "EAGLE3":
        report.add("error", "algorithm-draft-mismatch",
                   f"--speculative-algorithm EAGLE3 with a draft that is not EAGLE-3 ({archs}): EAGLE3 feeds the "
                   "draft the target's auxiliary hidden states, which this draft was not trained on",
                   "use --speculative-algorithm EAGLE for an EAGLE/EAGLE-2 draft", "--speculative-algorithm")
