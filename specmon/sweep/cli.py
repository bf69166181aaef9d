"""`specmon sweep PRESET...`: an unattended sweep (resumable), or `--predict-only`: the longest chain alone and
the acceptance it predicts for shorter ones."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from specmon import exits
from specmon.sweep.plan import SweepError, SweepPlan, SweepStore, plan_sweep
from specmon.sweep.report import SweepReport
from specmon.text import aligned_rows, printable, strict_json
from specmon.units import format_seconds, number

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class NotSwept(Exception):
    """The server to replace may not be stopped (another user's, or the user said no): exit 1."""


def _note(message: str) -> None:
    print(f"specmon sweep: {printable(message, newlines=True)}", file=sys.stderr, flush=True)


def _startup_line(line: str) -> None:
    """A starting server's phase or capture progress, on stderr (with --json too: stdout keeps the JSON)."""
    print(f"    {printable(line)}", file=sys.stderr, flush=True)


def _presets(args: argparse.Namespace, names: list[str]) -> dict[str, Any]:
    from specmon.launch.presets import load_presets, require_preset
    from specmon.oncall.launcher import with_speed

    preset_set = load_presets(args.presets)
    return {name: with_speed(require_preset(preset_set, name), args.speed) for name in names}


def _store() -> SweepStore:
    from specmon.oncall.state import state_dir

    return SweepStore(state_dir() / "sweeps")


def _export(args: argparse.Namespace, report: SweepReport) -> None:
    """Each measured preset's figures (with its speedup over the baseline) to the textfile collector."""
    from specmon.bench.results import ResultStore
    from specmon.textfile import bench_samples, export, textfile_dir

    directory = textfile_dir(getattr(args, "textfile_dir", None))
    if directory is None:
        return
    samples = []
    for row in report.rows:
        if row.get("state") != "measured" or not row.get("run_id"):
            continue
        try:
            run = ResultStore().load(row["run_id"])
        except (OSError, ValueError):
            continue
        samples += bench_samples(run.url, run.preset, run.summary.to_json(), run.finished_at, row.get("speedup"))
    export(directory, _note, set_=samples)



def run_sweep(args: argparse.Namespace) -> int:
    """The `sweep` handler: 0 when every preset was measured, 1 when one failed or was skipped, 2 bad usage."""
    from specmon.bench.results import ResultStore
    from specmon.private_files import PrivatePathRefused
    from specmon.serving.client import resolve_api_key
    from specmon.sweep.runner import SweepOptions, SweepRunner

    resolve_api_key(None)  # the benchmarks' key: one that cannot be sent is refused before a server is touched
    store = _store()
    try:
        if args.resume is not None:
            plan = store.load(args.resume) if args.resume else store.latest_unfinished()
            if plan is None:
                raise SweepError(f"no unfinished sweep in {store.directory}")
            from specmon.sweep.grid import reopen_for_resume

            for reopened in reopen_for_resume(plan):
                _note(f"resume: launching again {reopened}")
            names = [s.preset for s in plan.steps]
        elif _asks_grid(args):
            plan, names = _grid_plan(args, store), []
        else:
            if not args.presets_to_run:
                raise SweepError("name the presets to sweep (or --resume)")
            names = list(dict.fromkeys(args.presets_to_run))
            plan = None
        if plan is not None and plan.grid is not None:
            from specmon.sweep.grid import grid_presets

            presets = grid_presets(_presets(args, [plan.grid.base])[plan.grid.base], plan)
        else:
            presets = _presets(args, names)
        if plan is None and args.predict_only:
            return _predict_only(args, presets, store)
        if plan is None:
            plan = plan_sweep(list(presets.values()), requests=args.requests)
        server = _server_to_replace(args, plan)
    except (SweepError, NotSwept) as exc:
        _note(str(exc))
        return EXIT_USAGE if isinstance(exc, SweepError) else EXIT_FAILED
    options = SweepOptions(
        preflight=not args.no_preflight, leave=args.leave, skip_predicted_worse=args.skip_predicted_worse,
        before_save=getattr(args, "before_save", None),
    )
    runner = SweepRunner(plan, presets, store, ResultStore(), options, on_event=None if args.json else _note,
                         on_startup=_startup_line, server=server)
    try:
        store.save(plan)  # before it is announced as resumable, and before any server is touched
    except OSError as exc:
        _note(f"cannot keep the sweep's state in {store.directory}: {exc.strerror or exc}")
        return EXIT_USAGE
    if plan.grid is not None:
        from specmon.sweep.grid import plan_text

        _note(plan_text(plan, args.skip_predicted_worse) + f"\n(resume: --resume {plan.run_id})")
    elif not args.json:
        _note(f"sweep {plan.run_id}: " + " → ".join(s.preset for s in plan.steps) + f" (resume: --resume {plan.run_id})")
    try:
        report = _run_until_done_or_ctrl_c(runner)
    except OSError as exc:  # its state could not be saved after a step: stopped there, servers as they are
        _note(f"stopped: the sweep's state could not be saved in {store.directory}: {exc.strerror or exc}; "
              f"the server is left as it is (resume: --resume {plan.run_id})")
        return EXIT_USAGE if isinstance(exc, PrivatePathRefused) else EXIT_FAILED
    _export(args, report)
    grid = None
    if plan.grid is not None:
        from specmon.sweep.grid_report import build_grid_report, format_grid

        grid = build_grid_report(plan, runner._load)  # noqa: SLF001
    if args.json:
        print(strict_json(report.to_json() | (grid or {}) | {"cancelled": runner.cancelled}, indent=2))
    elif grid is not None:
        print(format_grid(grid))
        print(f"left serving: {report.left_serving or 'nothing'}")
    else:
        print(format_report(report))
    if runner.cancelled:
        _note(f"cancelled; the servers are as the step under way left them; resume: specmon sweep --resume "
              f"{plan.run_id}")
        return exits.EXIT_SIGINT
    done = ("measured", "predicted") if plan.grid is not None else ("measured",)
    measured = all(row["state"] in done for row in report.rows)
    return EXIT_OK if measured and report.recommended is not None else EXIT_FAILED


def stored_grid_report(run_id: str) -> dict[str, Any]:
    """A stored grid sweep's report (`--json`'s grid part) from its plan and runs; SweepError when there is no such
    sweep or it is no grid."""
    from specmon.bench.results import ResultStore
    from specmon.sweep.grid_report import build_grid_report

    plan = _store().load(run_id)
    if plan.grid is None:
        raise SweepError(f"sweep {run_id} is not a grid sweep (--report reads a grid's cells)")
    results = ResultStore()

    def load(run: str | None) -> Any:
        try:
            return results.load(run) if run else None
        except (OSError, ValueError, KeyError):
            return None

    return build_grid_report(plan, load)


def _asks_grid(args: argparse.Namespace) -> bool:
    return any(getattr(args, axis, None) is not None for axis in ("steps", "topk", "draft_tokens", "concurrency"))


def _grid_plan(args: argparse.Namespace, store: SweepStore) -> SweepPlan:
    """`specmon sweep BASE --steps ... --topk ... --draft-tokens ... --concurrency ...`: the plan (SweepError for
    bad input, said in one line)."""
    from specmon.sweep.grid import AXES, check_base, expand, parse_axis, plan_grid

    if len(args.presets_to_run) != 1:
        raise SweepError("a grid sweep takes one base preset (a speculative one): specmon sweep BASE --steps "
                         "1,3,5 --topk 1,4 --draft-tokens 4,8,16 --concurrency 1,4,16,64")
    if args.predict_only:
        raise SweepError("--predict-only does not take a grid")
    base = _presets(args, args.presets_to_run)[args.presets_to_run[0]]
    check_base(base)
    spec = base.speculative
    defaults = {"steps": spec.num_steps, "topk": spec.eagle_topk, "draft_tokens": spec.num_draft_tokens,
                "concurrency": 1}
    axes = {}
    for axis in AXES:
        given = getattr(args, axis, None)
        if given is None:
            default = defaults[axis]
            if not isinstance(default, int) or isinstance(default, bool):
                raise SweepError(f"give {AXES[axis][0]}: the base preset {base.name!r} sets no value for it")
            given = str(default)
        axes[axis] = parse_axis(given, axis)
    expansion = expand(base, axes["steps"], axes["topk"], axes["draft_tokens"])
    return plan_grid(base, expansion, axes["concurrency"], args.requests, axes, _last_startup(store, base.name))


def _last_startup(store: SweepStore, base: str) -> float | None:
    """The base preset's last measured startup (its own, or a configuration's of it) in the stored sweeps."""
    if not store.directory.is_dir():
        return None
    for path in sorted(store.directory.glob("*.json"), reverse=True)[:50]:
        try:
            plan = store.load(path.stem)
        except SweepError:
            continue
        for step in reversed(plan.steps):
            if step.startup_s and (step.preset == base or step.preset.startswith(f"{base}@")):
                return step.startup_s
    return None


def _run_until_done_or_ctrl_c(runner: Any) -> SweepReport:
    """The sweep; the first Ctrl+C cancels it after the step under way (as the app's Cancel), a second ends
    specmon at once. Either way the servers are left as they are."""

    def cancel() -> None:  # in a signal handler: os.write, for a print may be under way on stderr
        os.write(sys.stderr.fileno(), b"specmon sweep: Ctrl+C: stopping after the step under way, leaving the "
                 b"servers as they are (Ctrl+C again: at once)\n")
        runner.cancel()

    with exits.first_interrupt_calls(cancel):
        return runner.run()


def _server_to_replace(args: argparse.Namespace, plan: SweepPlan) -> Any:
    """The server the sweep's first switch replaces: the one `--from` names, else (resuming) the one the sweep
    launched, else the one running server specmon launched (`pick_server`: one it did not launch is replaced only
    when named, and said left alone). Asks before it is stopped, unless --yes."""
    from specmon.oncall.discovery import NotPicked, find_servers, not_launched_note, pick_server

    inventory = find_servers(with_gpus=False)
    again = f"--resume {plan.run_id}" if args.resume is not None else " ".join(dict.fromkeys(args.presets_to_run))
    naming = f"specmon sweep {again} --from {{pid}}"
    key = args.server
    if key is None and plan.server_id and (own := inventory.find(plan.server_id)) and own.alive:
        key = own.id
    try:
        server = pick_server(inventory, key, "replace", naming)
    except NotPicked as exc:
        raise SweepError(str(exc)) from None
    if server is None and (left_alone := not_launched_note(inventory, naming)):
        _note(left_alone)
    if server is None or not server.alive:
        return server
    from specmon.oncall.cli import confirm

    if why := server.why_not_signalable():
        raise NotSwept(f"not swept: {why}")
    who = server.preset or f"pid {server.pid}"
    question = (f"Stop server {server.id} ({who}, pid {server.pid}, {server.url}) and sweep "
                f"{len({s.preset for s in plan.steps})} presets on its port? It may be serving traffic.")
    if not confirm(question, args.yes):
        raise NotSwept("not swept: not confirmed")
    return server


def _predict_only(args: argparse.Namespace, presets: dict[str, Any], store: SweepStore) -> int:
    """Measure the longest chain alone and print what it predicts for the shorter ones."""
    from specmon.bench.results import ResultStore
    from specmon.sweep.plan import SweepPlan, SweepStep, new_sweep_id
    from specmon.sweep.runner import SweepOptions, SweepRunner, drafting_of

    chains = [(d, p) for p in presets.values() if (d := drafting_of(p)) is not None and d.chain]
    if not chains:
        raise SweepError("--predict-only needs a chain-drafting preset (topk 1)")
    drafting, longest = max(chains, key=lambda pair: pair[0].draft_tokens)
    draft_tokens = drafting.draft_tokens
    plan = SweepPlan(new_sweep_id(), [SweepStep(longest.name, False, draft_tokens)], requests=args.requests)
    runner = SweepRunner(plan, presets, store, ResultStore(), SweepOptions(preflight=not args.no_preflight,
                         leave="none" if args.leave == "none" else "best"), on_event=None if args.json else _note,
                         on_startup=_startup_line, server=_server_to_replace(args, plan))
    _run_until_done_or_ctrl_c(runner)
    step = plan.steps[0]
    sets, cannot = runner._predictions()  # noqa: SLF001
    for line in cannot:
        _note(line)
    predicted = sets[0] if sets else None
    data = {
        "from_preset": longest.name,
        "state": step.state,
        "error": step.error,
        **(predicted.to_json() if predicted is not None else {
            "run_id": step.bench_run_id, "from_draft_tokens": draft_tokens, "requests_used": 0,
            "requests_skipped": 0, "predictions": [],
        }),
    }  # fmt: skip
    if predicted is not None and (skipped := predicted.skipped_text()):
        _note(skipped)
    if args.json:
        print(strict_json(data, indent=2))
        if predicted is not None:
            _note(predicted.note)
    elif predicted is not None:
        from specmon.bench.cli import format_prediction

        print(f"{longest.name}: {step.state}")
        print(format_prediction(predicted))
    else:
        print(f"{longest.name}: {step.state}{f' ({step.error})' if step.error else ''}: nothing to predict from")
    if runner.cancelled:
        _note(f"cancelled; the servers are as the step under way left them; resume: specmon sweep --resume "
              f"{plan.run_id}")
        return exits.EXIT_SIGINT
    return EXIT_OK if predicted is not None and predicted.predictions else EXIT_FAILED


def format_report(report: SweepReport) -> str:
    """The sweep's table, drift and recommendation as text."""
    lines = [f"sweep {report.run_id}"]
    header = ("preset", "draft", "state", "tok/s", "95% CI", "τ", "τ pred", "speedup", "startup", "measure")
    rows = [header]
    for row in report.rows:
        ci = row["ci95"]
        speed_ci = row["speedup_ci95"]
        rows.append(
            (
                row["preset"] + (" (baseline)" if row["baseline"] else ""),
                str(row["draft_tokens"] or "–") + (f" (tree, topk {row['eagle_topk']})"
                                                     if (row.get("eagle_topk") or 0) > 1 else ""),
                row["state"],
                number(row["decode_tok_s"]),
                f"{ci[0]:.1f}–{ci[1]:.1f}" if ci else "–",
                number(row["accept_length"], ".2f"),
                number(row.get("predicted_accept_length"), ".2f"),
                (number(row["speedup"], ".2f") + "×" + (f" ({speed_ci[0]:.2f}–{speed_ci[1]:.2f})" if speed_ci else ""))
                if row["speedup"] is not None else "–",
                format_seconds(row["startup_s"]) or "–",
                format_seconds(row["measure_s"]) or "–",
            )
        )  # fmt: skip
    lines += aligned_rows(rows, indent="  ")
    for row in report.rows:
        if row["error"]:
            lines.append(f"  {row['preset']}: {row['error']}")
        for flag, detail in (row.get("flags") or {}).items():
            lines.append(f"  {row['preset']}: FLAG {flag}: {detail}")
        if row.get("accept_profile"):
            shares = " ".join(f"{share:.2f}" for share in row["accept_profile"])
            lines.append(f"  {row['preset']}: steps accepting at least 1, 2, ... drafts: {shares}")
    if report.baseline_drift_pct is not None:
        flag = "  DRIFT: above 3%, the comparison is suspect" if report.drift_flagged else ""
        lines.append(f"baseline drift between its first and last run: {report.baseline_drift_pct:+.1f}%{flag}")
    against = list(dict.fromkeys(row["speedup_baseline_run_id"] for row in report.rows
                                 if row.get("speedup_baseline_run_id")))
    if against:
        lines.append("speedup against the baseline's run " + ", ".join(against) + " (the latest before each "
                     "preset's run, as `specmon results` computes it)")
    lines += [f"τ pred from {source}" for source in report.predicted_from]
    lines += [f"note: {note}" for note in report.notes]
    lines.append(f"recommended: {report.recommended or f'none ({report.no_recommendation})'}")
    lines.append(f"left serving: {report.left_serving or 'nothing'}")
    return "\n".join(lines)
