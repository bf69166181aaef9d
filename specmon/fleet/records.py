"""What specmon's own records say about the fleet's servers: each server's last benchmarked preset (its
algorithm and draft tokens from the preset) and that run's acceptance, keyed by `host:port`; and what each of
specmon's presets launches (a target labelled `preset`, as `specmon ps --prometheus-sd` labels them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from specmon.fleet.tracker import Record
from specmon.live.paying import ServingConfig

if TYPE_CHECKING:
    from specmon.bench.model import BenchResult


def own_records(results_dir: str | None = None, preset_dirs: list[str] | None = None,
                warn: Callable[[str], None] | None = None) -> dict[str, Record]:
    """The newest finished benchmark per server address in specmon's result store (empty when none)."""
    from specmon.bench.report import finished_accept_length
    from specmon.bench.results import ResultStore
    from specmon.launch.presets import load_presets

    try:
        runs = ResultStore(results_dir).load_all(warn)
    except OSError:
        return {}
    presets = load_presets(preset_dirs or []).presets if runs else {}
    records: dict[str, Record] = {}
    for run in runs:  # oldest first: the newest run of a server wins
        if not isinstance(run.url, str) or run.status != "finished":
            continue
        address = run.url.split("://", 1)[-1].split("/", 1)[0]
        accept = finished_accept_length(run)
        preset = presets.get(run.preset) if run.preset else None
        spec = preset.speculative if preset is not None else None
        records[address] = Record(
            preset=run.preset,
            algorithm=spec.algorithm if spec is not None and spec.enabled else None,
            draft_tokens=spec.effective_draft_tokens if spec is not None and spec.enabled else None,
            accept_length=accept,
            config=_config(run),
        )
    return records


def _config(run: BenchResult) -> ServingConfig | None:
    """The model and speculative settings a run's server said it ran (None: no speculation, or one unknown)."""
    server, spec = run.server, run.server.speculative
    counts = (spec.num_steps, spec.eagle_topk, spec.num_draft_tokens)
    if not spec.algorithm or not all(isinstance(n, int) and not isinstance(n, bool) for n in counts):
        return None
    return ServingConfig(server.model_path, spec.algorithm, *counts)  # type: ignore[arg-type]


def own_presets(preset_dirs: list[str] | None = None) -> dict[str, Record]:
    """Each of specmon's presets (built in, the user's, `preset_dirs`) by name: its algorithm and draft tokens."""
    from specmon.launch.presets import load_presets

    out: dict[str, Record] = {}
    for name, preset in load_presets(preset_dirs or []).presets.items():
        spec = preset.speculative
        enabled = spec is not None and spec.enabled
        out[name] = Record(preset=name, algorithm=spec.algorithm if enabled else None,
                           draft_tokens=spec.effective_draft_tokens if enabled else None)
    return out
