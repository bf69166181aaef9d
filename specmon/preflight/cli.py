"""Handlers: `specmon check PRESET`, `specmon doctor DRAFT`, `specmon fix-draft-keys SRC DST`."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from specmon.sglang.rules import SGLangRules
from specmon.text import printable, strict_json

EXIT_OK, EXIT_PROBLEMS = 0, 1


def _preset(name: str, dirs: list[str]):
    from specmon.launch.presets import load_presets, require_preset

    return require_preset(load_presets(dirs), name)


def run_check_preset(args: argparse.Namespace) -> int:
    """`specmon check PRESET`: the preflight of a preset, no server needed."""
    from specmon.preflight import run_preflight

    preset = _preset(args.preset_name, args.presets)
    report = run_preflight(preset, port=getattr(args, "port", None))
    print(strict_json(report.to_json(), indent=2) if args.json else printable(report.format_text(), newlines=True))
    return EXIT_OK if report.ok else EXIT_PROBLEMS


@dataclass
class _DraftSGLang:
    """The SGLang a draft is checked against, and what a preset adds (its target, the kind of draft)."""

    rules: SGLangRules
    version: str
    source: str
    installed: bool  # read from an installed package's source (not shipped data)
    note: str | None = None
    target: str | None = None
    kind: str | None = None


def _draft_sglang(args: argparse.Namespace) -> _DraftSGLang:
    """--preset: the SGLang its launcher runs (and its model path, its algorithm's draft kind); --sglang-version:
    that version's shipped rules; neither: the SGLang the default launcher's `python3` sees, else the newest
    shipped rules. UsageError for an unknown preset."""
    from specmon.launch.presets import Preset
    from specmon.preflight.locate import find_sglang
    from specmon.sglang.flags import SOURCE, newest_shipped
    from specmon.sglang.rules import load_shipped_rules

    if getattr(args, "preset", None):
        preset = _preset(args.preset, args.presets)
        facts = find_sglang(preset)
        model = preset.args.get("model-path")
        algorithm = preset.speculative.algorithm
        return _DraftSGLang(facts.rules, facts.info.version or facts.rules.version, facts.info.source,
                            facts.info.source == SOURCE, facts.info.note,
                            model if isinstance(model, str) else None,
                            facts.rules.draft_kind(algorithm.upper()) if isinstance(algorithm, str) else None)
    if getattr(args, "sglang_version", None):
        rules = load_shipped_rules(args.sglang_version)
        return _DraftSGLang(rules, args.sglang_version, rules.source, False, rules.note)
    facts = find_sglang(Preset(name="default launcher"))
    if facts.info.source == SOURCE:
        return _DraftSGLang(facts.rules, facts.info.version or facts.rules.version, facts.info.source, True,
                            f"the SGLang {facts.info.python} sees (the default launcher's interpreter)")
    rules = load_shipped_rules(newest_shipped())
    why = (facts.info.note or "").split(";")[0] or "python3 sees no sglang package"
    return _DraftSGLang(rules, rules.version, rules.source, False,
                        f"no installed SGLang found ({why}): checked against shipped rules; give --preset or "
                        "--sglang-version to choose")


def run_doctor(args: argparse.Namespace) -> int:
    """`specmon doctor DRAFT [--target PATH] [--preset NAME]`: the draft checkpoint doctor."""
    from specmon.preflight.draft import examine_draft

    found = _draft_sglang(args)
    rules, version, source = found.rules, found.version, found.source
    report = examine_draft(args.draft, rules, args.target or found.target, found.kind)
    errors = [p for p in report.problems if p.severity == "error"]
    if args.json:
        outcome = report.outcome
        print(strict_json({
            "ok": not errors, "draft": str(report.path), "sglang": {"version": version, "source": source,
                                                                    "rules": rules.version, "note": found.note},
            "architectures": report.architectures, "kind": report.kind, "keys": len(report.names),
            "dropped": list(outcome.dropped) if outcome else [], "unloaded": list(outcome.unloaded) if outcome else [],
            "problems": [p.to_json() for p in report.problems], "notes": report.notes}, indent=2))
    else:  # names, paths and architectures come from the checkpoint: escapes shown, never sent to the terminal
        lines = [f"draft {report.path}: {', '.join(report.architectures) or '?'} ({report.kind or '?'} draft), "
                 f"{len(report.names)} keys, checked against SGLang {version} ({source}"
                 f"{'' if rules.version == version else ', rules of ' + rules.version})"]
        if found.note:
            lines.append(f"note: {found.note}")
        for problem in report.problems:
            lines.append(f"{problem.severity.upper()} {problem.code}: {problem.message}")
            if problem.hint:
                lines.append(f"    hint: {problem.hint}")
        lines += [f"note: {note}" for note in report.notes]
        if not report.problems:
            lines.append("no problems found")
        print("\n".join(printable(line) for line in lines))
    return EXIT_PROBLEMS if errors else EXIT_OK


def run_fix_draft_keys(args: argparse.Namespace) -> int:
    """`specmon fix-draft-keys SRC DST [--to midlayer|layers.0] [--preset NAME | --sglang-version X]`: the copy,
    then the doctor on it against the SGLang that will load it (as `doctor` finds it), else the shipped rules."""
    from specmon.preflight.draft import examine_draft
    from specmon.preflight.fixkeys import fix_draft_keys
    from specmon.preflight.safetensors import CheckpointError
    from specmon.sglang.flags import newest_shipped
    from specmon.sglang.rules import load_shipped_rules

    found = _draft_sglang(args)
    try:
        changed = fix_draft_keys(args.src, args.dst, args.to)
    except (CheckpointError, FileExistsError, OSError) as error:
        print(f"specmon fix-draft-keys: {printable(error)}", file=sys.stderr)
        return EXIT_PROBLEMS
    from specmon.preflight.fixkeys import CONFIG_FILE, CONVERTED

    converted = changed.pop(CONFIG_FILE, None) == CONVERTED
    for old, new in changed.items():
        print(printable(f"{old} -> {new}"))
    print(f"{len(changed)} keys renamed into {printable(args.dst)}")
    if converted:
        print(f"config.json: the speculators library's, written as SGLang reads it into {printable(args.dst)}")
    if found.installed or getattr(args, "preset", None) or getattr(args, "sglang_version", None):
        checks = [(f"SGLang {found.version}, {found.source}", found.rules)]
    else:  # midlayer loads on every version; layers.0 only where the loader builds `layers` (0.5.16+).
        print(printable(f"note: {found.note}"))
        versions = ["0.5.9", newest_shipped()] if args.to == "midlayer" else [newest_shipped()]
        checks = [(f"SGLang {version} rules", load_shipped_rules(version)) for version in versions]
    status = EXIT_OK
    for label, rules in checks:
        report = examine_draft(Path(args.dst), rules, found.target, found.kind)
        errors = [p for p in report.problems if p.severity == "error"]
        print(printable(f"doctor ({label}): " + ("OK" if not errors else "; ".join(p.message for p in errors))))
        status = status if not errors else EXIT_PROBLEMS
    return status
