"""Handlers: `specmon check PRESET`, `specmon doctor DRAFT`, `specmon fix-draft-keys SRC DST`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specmon.text import printable, strict_json

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


def _preset(name: str, dirs: list[str]):
    from specmon.launch.presets import load_presets

    preset_set = load_presets(dirs)
    preset = preset_set.get(name)
    if preset is None:
        print(f"specmon: {preset_set.missing(name)}", file=sys.stderr)
    return preset


def run_check_preset(args: argparse.Namespace) -> int:
    """`specmon check PRESET`: the preflight of a preset, no server needed."""
    from specmon.preflight import run_preflight

    preset = _preset(args.preset_name, args.presets)
    if preset is None:
        return EXIT_USAGE
    report = run_preflight(preset, port=getattr(args, "port", None))
    print(strict_json(report.to_json(), indent=2) if args.json else printable(report.format_text(), newlines=True))
    return EXIT_OK if report.ok else EXIT_PROBLEMS


def run_doctor(args: argparse.Namespace) -> int:
    """`specmon doctor DRAFT [--target PATH] [--preset NAME]`: the draft checkpoint doctor."""
    from specmon.preflight.draft import examine_draft
    from specmon.preflight.locate import find_sglang
    from specmon.sglang.rules import load_shipped_rules

    target = args.target
    kind = None
    if args.preset:
        preset = _preset(args.preset, args.presets)
        if preset is None:
            return EXIT_USAGE
        facts = find_sglang(preset)
        rules, version, source = facts.rules, facts.info.version or facts.rules.version, facts.info.source
        target = target or (preset.args.get("model-path") if isinstance(preset.args.get("model-path"), str) else None)
        algorithm = preset.speculative.algorithm
        kind = rules.draft_kind(algorithm.upper()) if isinstance(algorithm, str) else None
    else:
        rules = load_shipped_rules(args.sglang_version) if args.sglang_version else None
        if rules is None:
            from specmon.sglang.flags import newest_shipped

            rules = load_shipped_rules(newest_shipped())
        version, source = args.sglang_version or rules.version, rules.source
    report = examine_draft(args.draft, rules, target, kind)
    errors = [p for p in report.problems if p.severity == "error"]
    if args.json:
        outcome = report.outcome
        print(strict_json({
            "ok": not errors, "draft": str(report.path), "sglang": {"version": version, "source": source,
                                                                    "rules": rules.version},
            "architectures": report.architectures, "kind": report.kind, "keys": len(report.names),
            "dropped": list(outcome.dropped) if outcome else [], "unloaded": list(outcome.unloaded) if outcome else [],
            "problems": [p.to_json() for p in report.problems], "notes": report.notes}, indent=2))
    else:  # names, paths and architectures come from the checkpoint: escapes shown, never sent to the terminal
        lines = [f"draft {report.path}: {', '.join(report.architectures) or '?'} ({report.kind or '?'} draft), "
                 f"{len(report.names)} keys, checked against SGLang {version} ({source}"
                 f"{'' if rules.version == version else ', rules of ' + rules.version})"]
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
    """`specmon fix-draft-keys SRC DST [--to midlayer|layers.0]`."""
    from specmon.preflight.draft import examine_draft
    from specmon.preflight.fixkeys import fix_draft_keys
    from specmon.preflight.safetensors import CheckpointError
    from specmon.sglang.flags import newest_shipped
    from specmon.sglang.rules import load_shipped_rules

    try:
        changed = fix_draft_keys(args.src, args.dst, args.to)
    except (CheckpointError, FileExistsError, OSError) as error:
        print(f"specmon fix-draft-keys: {printable(error)}", file=sys.stderr)
        return EXIT_PROBLEMS
    for old, new in changed.items():
        print(printable(f"{old} -> {new}"))
    print(f"{len(changed)} keys renamed into {args.dst}")
    status = EXIT_OK
    # midlayer loads on every version; layers.0 only where the loader builds `layers` (0.5.16+).
    versions = ["0.5.9", newest_shipped()] if args.to == "midlayer" else [newest_shipped()]
    for version in versions:
        report = examine_draft(Path(args.dst), load_shipped_rules(version))
        errors = [p for p in report.problems if p.severity == "error"]
        print(printable(f"doctor (SGLang {version} rules): " + ("OK" if not errors else "; ".join(p.message for p in errors))))
        status = status if not errors else EXIT_PROBLEMS
    return status
