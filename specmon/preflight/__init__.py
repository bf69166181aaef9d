"""The preflight: a bad launch fails in seconds, not after a 15-minute load.

    report = run_preflight(preset)            # -> PreflightReport (.ok, .problems, .to_json(), .format_text())
    require_preflight(preset)                 # raises PreflightError when any problem is an error

It finds the SGLang the preset's launcher runs (without importing it), checks the flags and speculative rules
of that version, the draft checkpoint against its loader, and the machine (paths, port, GPUs, topology).
Core: no Textual.
"""

from __future__ import annotations

import time
from collections.abc import Collection

from specmon.gpu.model import GpuSnapshot
from specmon.launch.presets import Preset
from specmon.preflight.report import PreflightReport, Problem, SGLangInfo

__all__ = ["PreflightError", "PreflightReport", "Problem", "SGLangInfo", "require_preflight", "run_preflight"]


class PreflightError(RuntimeError):
    """The preflight found errors: the launch would fail. `report` holds them all."""

    def __init__(self, report: PreflightReport):
        self.report = report
        first = report.errors[0]
        more = f" (and {len(report.errors) - 1} more)" if len(report.errors) > 1 else ""
        hint = f"{first.hint} — " if first.hint else ""  # what to do first: the message may be long
        super().__init__(f"preflight of {report.preset}: {hint}{first.message}{more} "
                         f"(see `specmon check {report.preset}`; skip with --no-preflight)")


def _read_gpus() -> GpuSnapshot:
    from specmon.gpu.nvml import NvmlSource

    source = NvmlSource(pcie="off")
    try:
        return source.read()
    finally:
        source.close()


def _fraction(value: object) -> float | None:
    """--mem-fraction-static as a number the GPU memory check can use: None when absent, not a number or outside
    (0, 1] (`check_flags` says so)."""
    from specmon.sglang.bounds import FRACTION

    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if FRACTION.contains(number) else None


def run_preflight(preset: Preset, *, port: int | None = None, gpus: GpuSnapshot | None = None,
                  check_machine: bool = True, replacing: Collection[int] = ()) -> PreflightReport:
    """Check `preset` before launching it. `port` overrides the preset's; `gpus` is an NVML reading (read
    now when None); `check_machine=False` skips paths, port and GPUs; `replacing` are the pids of a server
    the launch replaces (a switch checks before it stops it): their port and GPU memory count as free.
    Never raises for what it checks."""
    from specmon.preflight.checks import check_algorithm_vs_draft, check_flags, check_speculative
    from specmon.preflight.draft import NO_MODEL_TYPE, CheckpointError, examine_draft, read_config
    from specmon.preflight.locate import find_sglang
    from specmon.preflight.machine import (
        check_gpus,
        check_paths,
        check_port,
        checkpoint_bytes,
        local_path,
    )

    started = time.perf_counter()
    facts = find_sglang(preset)
    report = PreflightReport(preset.name, facts.info)
    if facts.missing:
        report.add("error", "sglang-missing", facts.missing, "install sglang for that interpreter, or fix "
                   "[server] launcher")
    check_flags(preset, facts.table, report, facts.emulator)
    target_dir = None if facts.emulator else local_path(preset.args.get("model-path"))
    target_arch = None
    if target_dir is not None and target_dir.is_dir():
        try:
            target_config = read_config(target_dir)
            archs = target_config.get("architectures")
            target_arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
            if "model_type" not in target_config:
                report.add("error", "target-no-model-type", f"{target_dir}/config.json has no model_type: "
                           f"{NO_MODEL_TYPE}", "add the model_type of the model it was saved as", "--model-path")
        except CheckpointError as error:
            report.add("error", "target-config", str(error), None, "--model-path")
    algorithm = check_speculative(preset, facts, report, target_arch)
    weights = checkpoint_bytes(target_dir) if target_dir is not None and target_dir.is_dir() else 0
    draft_dir = None if facts.emulator else local_path(preset.args.get("speculative-draft-model-path"))
    kind = facts.rules.draft_kind(algorithm) if algorithm is not None else None
    if algorithm is not None and kind != "none" and draft_dir is not None and draft_dir.is_dir():
        draft = examine_draft(draft_dir, facts.rules, target_dir, kind)
        report.problems.extend(p for p in draft.problems if p.code != "target-config")
        weights += draft.total_bytes
        check_algorithm_vs_draft(algorithm, draft.architectures, report)
        report.notes.append(f"draft {draft_dir}: {', '.join(draft.architectures) or '?'} as {algorithm} loads it "
                            f"({draft.kind or '?'}), {len(draft.names)} keys")
        report.notes.extend(draft.notes)
    if facts.emulator:
        report.notes.append("emulator preset: checkpoint, port and GPU checks skipped")
    elif check_machine:
        check_paths(preset, report)
        check_port(preset, port, report, replacing)
        fraction = _fraction(preset.args.get("mem-fraction-static", facts.table.defaults.get("mem_fraction_static")))
        check_gpus(preset, gpus if gpus is not None else _read_gpus(), facts.rules, fraction, weights, report,
                   replacing)
    report.elapsed_s = time.perf_counter() - started
    return report


def require_preflight(preset: Preset, *, port: int | None = None, gpus: GpuSnapshot | None = None,
                      replacing: Collection[int] = ()) -> PreflightReport:
    """`run_preflight`, raising PreflightError when it found an error."""
    report = run_preflight(preset, port=port, gpus=gpus, replacing=replacing)
    if not report.ok:
        raise PreflightError(report)
    return report


def launch_check(preset: Preset, port: int | None, replacing: frozenset[int]) -> PreflightReport:
    """`require_preflight` as `ServerSupervisor` runs it before each launch: its report, or the launch's own
    `PreflightFailed` (holding the report) when it found an error."""
    from specmon.launch.supervisor import PreflightFailed

    try:
        return require_preflight(preset, port=port, replacing=replacing)
    except PreflightError as error:
        raise PreflightFailed(str(error), error.report) from None
