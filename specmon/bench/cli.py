"""`specmon bench` (benchmark the server at --url; a summary, or the whole result as JSON), `specmon results` and
`specmon predict`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from specmon import exits
from specmon.bench.compare import Comparison
from specmon.bench.model import BenchProgress, BenchResult
from specmon.bench.report import accept_bound, category_lines, describe_progress, symptoms
from specmon.bench.results import ResultStore, skipped_note
from specmon.bench.results_text import FORMATTERS, select_runs
from specmon.bench.run import BenchRun, RunSettings
from specmon.text import printable, strict_json
from specmon.units import number, number_range


def _settings(args: argparse.Namespace) -> tuple[RunSettings, str | None]:
    """The run's settings: the preset's [bench] table (when --preset names one), then the flags."""
    base = RunSettings()
    if args.preset:
        from specmon.launch.presets import load_presets, require_preset

        base = RunSettings.of(require_preset(load_presets(args.presets or ()), args.preset).bench)
    overrides = {
        "requests": args.requests,
        "max_new_tokens": args.max_new_tokens,
        "concurrency": args.concurrency,
        "warmup": args.warmup,
        "prompts": args.prompts,
    }
    values = base.to_json() | {k: v for k, v in overrides.items() if v is not None}
    if getattr(args, "natural_eos", False):
        values["ignore_eos"] = False
    for name in ("requests", "max_new_tokens", "concurrency"):
        if values[name] < 1:
            return base, f"--{name.replace('_', '-')} must be at least 1"
    if values["warmup"] < 0:
        return base, "--warmup must be 0 or more"
    for name in ("stall_timeout", "deadline"):
        value = getattr(args, name, None)
        if value is not None and not 0 < value < float("inf"):
            return base, f"--{name.replace('_', '-')} must be a positive number of seconds"
    return RunSettings(**values), None


def _asked(args: argparse.Namespace) -> dict[str, Any] | None:
    """The SGLang arguments of --preset (what the server was asked to run), None without one."""
    if not args.preset:
        return None
    from specmon.launch.presets import load_presets, require_preset

    return dict(require_preset(load_presets(args.presets or ()), args.preset).args)


def against_stored_baseline(result: BenchResult, store: ResultStore) -> Comparison | None:
    """`result` against its baseline run among the stored runs (`baseline_for`: the latest run without
    speculation of the same model and benchmark settings before it, on the same server when one is); None for
    a run without speculation, or without a baseline run."""
    from specmon.bench.compare import baseline_for, compare, is_speculative

    if not is_speculative(result):
        return None
    try:
        runs = store.load_all(lambda message: None)
    except OSError:
        return None
    baseline = baseline_for(result, [r for r in runs if r.run_id != result.run_id])
    return compare(result, baseline) if baseline is not None else None


def format_result(result: BenchResult, saved_to: str | None, save_error: str | None = None,
                  found: dict[str, str] | None = None, comparison: Comparison | None = None) -> str:
    """The human-readable summary of one run (with `comparison`: how far its outputs agree with the baseline's)."""
    s = result.summary
    lines = [f"specmon bench: {result.preset} at {result.url} (run {result.run_id}, {result.status})"]
    server, spec = result.server, result.server.speculative
    spec_text = (
        f"{spec.algorithm} steps {spec.num_steps} topk {spec.eagle_topk} draft tokens {spec.num_draft_tokens}"
        if spec.algorithm
        else "no speculative decoding"
    )
    lines.append(f"server: SGLang {server.version or '?'} · {server.model_path or '?'} · {spec_text}")
    warm = sum(1 for r in result.requests if r.warmup)
    lines.append(
        f"requests: {s.requests_ok} ok, {s.requests_failed} failed ({warm} warmup not counted)"
    )
    d = s.decode_tok_s
    if d is not None:
        lines.append(
            f"decode tok/s: median {d.median:.1f} [95% CI {number_range(*(d.ci95 or (None, None)))}] · "
            f"p10 {number(d.p10)} · p90 {number(d.p90)} · mean {number(d.mean)} · rel. MAD {number(d.rel_mad, '.1%')}"
        )
    a = s.accept_length
    if a.token_weighted is not None:
        bound = accept_bound(result)
        lines.append(
            f"acceptance length: {a.token_weighted:.3f} token-weighted (Σ completion_tokens / Σ spec_verify_ct) · "
            f"{number(a.median, '.3f')} median per request" + (f" · bound {bound}" if bound else "")
        )
    ttft, itl, gap = s.ttft_s, s.itl_ms, s.chunk_gap_ms
    if ttft is not None:
        lines.append(
            f"TTFT: median {ttft.median * 1000:.1f} ms, p90 {ttft.p90 * 1000:.1f} ms · ITL: median "
            f"{number(itl.median if itl else None, '.2f')} ms/token, p90 {number(itl.p90 if itl else None, '.2f')} · "
            f"chunk gap median {number(gap.median if gap else None, '.2f')} ms, "
            f"{number(s.tokens_per_chunk, '.2f')} tokens/chunk"
        )
    lines.extend(category_lines(s))
    if s.production and not s.production.beyond_ci:  # beyond: said by its FLAG line
        lines.append(s.production.text)
    checks = result.cross_checks
    parts = []
    if (checks.get("metrics") or {}).get("accept_length") is not None:
        parts.append(f"/metrics delta τ {checks['metrics']['accept_length']:.3f}")
    if checks.get("server_info_accept_length") is not None:
        parts.append(f"/server_info τ {checks['server_info_accept_length']:.3f}")
    if parts:
        lines.append("server's figures: " + " · ".join(parts))
    for gpu in result.gpus:
        lines.append(
            f"GPU {gpu['gpu_index']} during the run: SM clock median {number(gpu.get('sm_clock_median_mhz'), '.0f')} MHz "
            f"(min {number(gpu.get('sm_clock_min_mhz'), '.0f')}), max {number(gpu.get('temp_max_c'), '.0f')} °C, "
            f"slowdowns: {', '.join(gpu.get('slowdowns') or []) or 'none'}"
        )
    for error, count in s.errors.items():
        lines.append(f"error ×{count}: {error}")
    for note in result.notes:
        lines.append(f"note: {note}")
    agreement = comparison.describe_agreement() if comparison is not None else None
    if comparison is not None and agreement:
        lines.append(f"{agreement} (baseline run {comparison.baseline_run_id})")
    details = {**s.flag_details, **(found or {})}
    flags = [*s.flags, *(f for f in found or {} if f not in s.flags)]
    if flags:
        for flag in flags:
            lines.append(f"FLAG {flag}: {details.get(flag, '')}".rstrip(": "))
    else:
        lines.append("flags: none")
    if saved_to:
        lines.append(f"saved: {saved_to}")
    else:
        lines.append(f"NOT saved: {save_error or 'nothing was saved'}")
    return "\n".join(lines)


def run_bench(args: argparse.Namespace, sample: Any = None, before_save: Any = None) -> int:
    """`specmon bench` (specmon.traffic.bench hands it production's prompts as `sample(settings)`, a callable that
    returns (prompts, label) or raises PromptError, and its check against production as `before_save`)."""
    from specmon.bench.prompts import PromptError, load_prompts
    from specmon.http.headers import HeaderRefused
    from specmon.serving.client import resolve_api_key
    from specmon.text import strict_json

    try:
        api_key = resolve_api_key(
            args.api_key_file, warn=lambda line: print(f"specmon bench: warning: {printable(line)}", file=sys.stderr))
    except OSError as exc:
        print(f"specmon bench: cannot read the API key file {printable(args.api_key_file)}: {exc.strerror or exc}",
              file=sys.stderr)
        return 2
    except HeaderRefused as exc:
        print(f"specmon bench: {printable(str(exc))}", file=sys.stderr)
        return 2
    settings, error = _settings(args)
    if error:
        print(f"specmon bench: {error}", file=sys.stderr)
        return 2
    try:
        if sample is not None:
            prompts, label = sample(settings)
            settings = msgspec.structs.replace(settings, prompts=label, max_new_tokens=max(
                p.max_new_tokens or settings.max_new_tokens for p in prompts))
        else:
            prompts = load_prompts(settings.prompts)
    except PromptError as exc:
        print(f"specmon bench: {exc}", file=sys.stderr)
        return 2
    on_update = describe_to(sys.stderr) if sys.stderr.isatty() else None
    sampler = _gpu_sampler()
    bench = BenchRun(
        args.url, args.preset, settings, api_key=api_key, on_update=on_update, prompts=prompts, gpu_sampler=sampler,
        stall_timeout_s=args.stall_timeout, deadline_s=args.deadline, asked=_asked(args),
        keep_prompts=bool(getattr(args, "keep_prompts", False)), private_prompts=sample is not None,
        before_save=before_save,
    )
    interrupted = False
    try:
        result = bench.run_blocking()
    except KeyboardInterrupt:
        interrupted = True
        result = bench.result
    finally:
        if sampler is not None:
            sampler.stop()
    if bench.fatal is not None:
        if args.json:
            print(strict_json({"url": bench.url, "status": "failed", "error": bench.fatal, "saved_to": None}))
        print(f"specmon bench: {bench.fatal}", file=sys.stderr)
        return 2
    if result.status == "finished":
        from specmon.textfile import bench_samples, export, textfile_dir

        export(textfile_dir(args.textfile_dir), lambda m: print(f"specmon bench: {m}", file=sys.stderr),
               set_=bench_samples(result.url, result.preset, result.summary.to_json(), result.finished_at))
    saved = bench.save_error is None and bench.store.path_for(result.run_id).is_file()
    saved_to = str(bench.store.path_for(result.run_id)) if saved else None
    comparison = against_stored_baseline(result, bench.store)
    found = symptoms(result, comparison)
    if args.json:
        print(strict_json(result.to_json() | {"saved_to": saved_to, "save_error": bench.save_error,
                                              "symptoms": found,
                                              "baseline_run_id": comparison.baseline_run_id if comparison else None},
                          indent=2))
    else:
        print(printable(format_result(result, saved_to, bench.save_error, found, comparison), newlines=True))
    if interrupted:
        return exits.EXIT_SIGINT
    ok = result.status == "finished" and result.summary.requests_failed == 0 and saved and not found
    return 0 if ok else 1


def _gpu_sampler() -> Any:
    """A running GpuSampler on this machine's NVML (to flag throttling), or None where NVML is absent."""
    from specmon.gpu.sampler import GpuSampler, NvmlSource

    source = NvmlSource(pcie="off")
    if not source.read().available:
        source.close()
        return None
    sampler = GpuSampler(source, interval_s=0.5)
    sampler.start()
    return sampler


def describe_to(stream: Any) -> Any:
    """An on_update callback that redraws one progress line on `stream` (a terminal)."""
    last = {"line": ""}

    def show(progress: BenchProgress) -> None:
        line = describe_progress(progress)
        if line != last["line"]:
            last["line"] = line
            print(f"\r\x1b[2K{line}", end="\n" if progress.finished else "", file=stream, flush=True)

    return show


def run_results(args: argparse.Namespace) -> int:
    """Handler of `specmon results`."""
    store = ResultStore(args.dir)
    form = "json" if args.json else args.format

    def warn(message: str) -> None:
        print(f"specmon results: {message}", file=sys.stderr)

    runs, missing = select_runs(store.load_all(warn), list(args.runs))
    for run in runs:
        if note := skipped_note(run):
            warn(note)
    for run_id in missing:
        print(f"specmon results: no run {run_id!r} in {store.directory}", file=sys.stderr)
    if not runs:
        if form == "json":
            print("[]")
        elif not missing:
            print(f"No benchmark runs in {store.directory} yet (run `specmon bench --url URL`).", file=sys.stderr)
        return 1 if missing else 0
    baseline = getattr(args, "baseline", None)
    if baseline and not any(r.preset == baseline for r in runs):
        print(f"specmon results: no run of preset {baseline!r} to use as the baseline", file=sys.stderr)
        return 1
    text = FORMATTERS[form](runs, baseline)
    print(printable(text, newlines=True), end="" if text.endswith("\n") else "\n")
    return 1 if missing else 0


def _draft_token_counts(text: str | None) -> list[int] | None:
    """`--draft-tokens 10,5` as counts (ValueError on anything else)."""
    if text is None:
        return None
    counts = [int(part) for part in text.split(",") if part.strip()]
    if not counts or any(c < 2 for c in counts):
        raise ValueError("--draft-tokens takes counts of 2 or more, e.g. 10,5")
    return counts


def run_predict(args: argparse.Namespace) -> int:
    """Handler of `specmon predict RUN_ID`: 0 predicted, 1 the run cannot predict (no speculation, a tree, no
    usable request), 2 bad usage (no such run, a bad --draft-tokens)."""
    from specmon.bench.predict import CannotPredict, predict_run
    from specmon.bench.results import read_run_file

    def say(message: str) -> None:
        print(f"specmon predict: {message}", file=sys.stderr)

    try:
        lengths = _draft_token_counts(args.draft_tokens)
    except ValueError as exc:
        say(str(exc).replace("invalid literal for int() with base 10", "not a count"))
        return 2
    store = ResultStore(args.dir)
    matches = [run_id for run_id in store.run_ids() if run_id.startswith(args.run_id)]
    if len(matches) != 1:
        say(f"no run {args.run_id!r} in {store.directory}" if not matches
            else f"{args.run_id!r} names {len(matches)} runs: {', '.join(matches[:5])}")
        return 2
    try:
        run = read_run_file(store.path_for(matches[0]))
        predicted = predict_run(run, lengths)
    except (OSError, ValueError) as exc:  # CannotPredict included
        say(f"{matches[0]}: {exc.strerror if isinstance(exc, OSError) else exc}")
        return 1 if isinstance(exc, CannotPredict) else 2
    longer = sorted(m for m in lengths or () if m > predicted.from_draft_tokens)
    if longer:
        say(f"not predicted: {', '.join(map(str, longer))} (longer than the run's {predicted.from_draft_tokens})")
    if skipped := predicted.skipped_text():
        say(skipped)
    if args.json:
        print(strict_json(predicted.to_json(), indent=2))
        say(predicted.note)
    else:
        print(format_prediction(predicted))
    return 0 if predicted.predictions else 1


def format_prediction(predicted: Any) -> str:
    """A PredictionSet as text: where it comes from, the table, and the note on greedy outputs."""
    methods = predicted.methods
    how = ", ".join(f"{n} by {'their per-step trace' if m == 'trace' else 'the histogram formula'}"
                    for m, n in sorted(methods.items(), key=lambda kv: kv[0] != "trace"))
    lines = [
        f"predicted from run {predicted.run_id} ({predicted.from_draft_tokens} draft tokens): "
        f"{predicted.requests_used} requests used ({how or 'none'}), {len(predicted.skipped)} skipped",
        "  draft tokens  accept length  95% CI        decode tok/s",
    ]
    for p in predicted.predictions:
        ci = number_range(p.ci95[0], p.ci95[1], ".2f") if p.ci95 else "–"
        lines.append(f"  {p.draft_tokens:>12}  {p.accept_length:>13.3f}  {ci:<12}  {number(p.decode_tok_s)}")
    lines.append(f"note: {predicted.note}")
    return "\n".join(lines)
