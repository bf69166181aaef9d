"""SGLang's Prometheus metric families for one version, read from its source by `ast`, or shipped per version.

`read_metrics(package_dir)` returns a JSON-ready dict; `scripts/sglang_metrics.py` writes it to
`data/metrics-VERSION.json` for the versions specmon ships tables of:

    {"version": "0.5.16", "generated_from": "...",
     "families": [{"name": "sglang:spec_num_draft_tokens", "type": "gauge", "help": "...",
                   "role": "scheduler",          # whose labels it carries: scheduler, tokenizer, http, process, ...
                   "collector_labels": true,     # the role's label set (model_name, engine_type, ranks, extra)
                   "extra_labels": [],           # labels added to that set (`mode`, `stage`, `cache_source`, ...)
                   "multiprocess_mode": "mostrecent", "buckets": null, "defined_at": "srt/...py:446"}, ...]}

`load_shipped_metrics(version)` falls back to the nearest older shipped table. Nothing is imported from sglang.
"""

from __future__ import annotations

import ast
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmon.sglang.flags import DATA_DIR, version_key
from specmon.sglang.source import SGLangSourceError, read_version

__all__ = ["MetricFamily", "MetricTable", "load_shipped_metrics", "read_metrics", "shipped_metric_versions"]

# Where SGLang defines its metrics: the collectors (0.5.16+: observability/, before: metrics/), the HTTP
# middleware and the CPU monitor.
_FILES = (
    "srt/observability/metrics_collector.py",
    "srt/metrics/collector.py",
    "srt/utils/common.py",
    "srt/utils.py",
    "srt/observability/http_request_metrics.py",
    "srt/observability/cpu_monitor.py",
    "srt/metrics/cpu_monitor.py",
)
_TYPES = {"Gauge": "gauge", "Counter": "counter", "Histogram": "histogram", "Summary": "summary",
          "GaugeHistogram": "gauge"}
_ROLES = {
    "SchedulerMetricsCollector": "scheduler",
    "TokenizerMetricsCollector": "tokenizer",
    "add_prometheus_track_response_middleware": "http",
    "start_cpu_monitor_thread": "process",
}
_GAUGE_HISTOGRAM_LABELS = ("gt", "le")  # SGLang's own GaugeHistogram: a gauge per (gt, le] bucket
_COLLECTOR_LABEL_NAMES = ("labels", "labelnames", "extra_label_names")


@dataclass(frozen=True)
class MetricFamily:
    """One metric family SGLang defines: its exposition name (counters end in `_total`), type and labels."""

    name: str
    type: str
    help: str
    role: str
    collector_labels: bool
    extra_labels: tuple[str, ...]
    multiprocess_mode: str | None
    buckets: tuple[float, ...] | None
    defined_at: str


@dataclass(frozen=True)
class MetricTable:
    """The metric families of one SGLang version, by name."""

    version: str
    families: dict[str, MetricFamily]
    note: str = ""

    def get(self, name: str) -> MetricFamily:
        try:
            return self.families[name]
        except KeyError:
            raise KeyError(f"SGLang {self.version} defines no metric {name}") from None


def _constant(node: ast.AST | None) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _text(node: ast.AST | None) -> str | None:
    """A string constant, an implicit or `+` concatenation of them, or None."""
    value = _constant(node)
    if isinstance(value, str):
        return value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        if left is not None and right is not None:
            return left + right
    return None


def _floats(value: Any) -> tuple[float, ...] | None:
    if isinstance(value, list | tuple) and value and all(isinstance(v, int | float) for v in value):
        return tuple(float(v) for v in value)
    return None


class _Definitions(ast.NodeVisitor):
    """The metric constructor calls of one module, each with the class or function that holds it."""

    def __init__(self, relative: str) -> None:
        self.relative = relative
        self.found: list[dict[str, Any]] = []
        self._owner: list[str] = []
        self._lists: list[dict[str, ast.AST]] = [{}]

    def _visit_owner(self, node: ast.ClassDef | ast.FunctionDef) -> None:
        self._owner.append(node.name)
        self._lists.append(dict(self._lists[-1]))
        self.generic_visit(node)
        self._lists.pop()
        self._owner.pop()

    visit_ClassDef = _visit_owner  # noqa: N815 (ast.NodeVisitor's naming)
    visit_FunctionDef = _visit_owner  # noqa: N815

    def visit_Assign(self, node: ast.Assign) -> None:  # noqa: N802
        for target in node.targets:
            if isinstance(target, ast.Name) and isinstance(node.value, ast.List | ast.Tuple):
                self._lists[-1][target.id] = node.value
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:  # noqa: N802
        constructor = node.func.id if isinstance(node.func, ast.Name) else None
        kind = _TYPES.get(constructor or "")
        if kind is not None:
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            positional = dict(zip(("name", "documentation", "labelnames"), node.args, strict=False))
            arguments = {**positional, **keywords}
            name = _text(arguments.get("name"))
            if name is not None:
                family = self._family(kind, name, arguments, node.lineno)
                if constructor == "GaugeHistogram":
                    family["extra_labels"] += list(_GAUGE_HISTOGRAM_LABELS)
                    family["buckets"] = self._buckets(arguments.get("bucket_bounds"))
                    family["multiprocess_mode"] = family["multiprocess_mode"] or "mostrecent"
                self.found.append(family)
        self.generic_visit(node)

    def _family(self, kind: str, name: str, arguments: Mapping[str, ast.AST], lineno: int) -> dict[str, Any]:
        role = next((_ROLES[o] for o in reversed(self._owner) if o in _ROLES), None)
        if role is None:
            role = next((o for o in reversed(self._owner) if o[:1].isupper()), self._owner[0] if self._owner else "module")
        labels = arguments.get("labelnames")
        nodes = list(ast.walk(labels)) if labels is not None else []
        collector_labels = any(
            isinstance(n, ast.Name) and n.id in _COLLECTOR_LABEL_NAMES
            or isinstance(n, ast.Attribute) and n.attr in _COLLECTOR_LABEL_NAMES
            for n in nodes
        )
        extra = [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        if kind == "counter" and not name.endswith("_total"):
            name += "_total"  # prometheus_client exposes a counter with `_total`
        return {
            "name": name,
            "type": kind,
            "help": _text(arguments.get("documentation")) or "",
            "role": role,
            "collector_labels": collector_labels,
            "extra_labels": extra,
            "multiprocess_mode": _constant(arguments.get("multiprocess_mode")),
            "buckets": self._buckets(arguments.get("buckets")),
            "defined_at": f"{self.relative}:{lineno}",
        }

    def _buckets(self, node: ast.AST | None) -> list[float] | None:
        if isinstance(node, ast.Name):
            node = self._lists[-1].get(node.id)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "generate_buckets":
            default = next((k.value for k in node.keywords if k.arg == "default_buckets"), None)
            return self._buckets(default if default is not None else node.args[1] if len(node.args) > 1 else None)
        if node is None:
            return None
        literal = _floats(_constant(node))
        if literal is not None:
            return list(literal)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "exponential_buckets":
            given = {k.arg: _constant(k.value) for k in node.keywords}
            given.update(dict(zip(("start", "width", "length"), (_constant(a) for a in node.args), strict=False)))
            start, width, length = given.get("start"), given.get("width"), given.get("length")
            if isinstance(start, int | float) and isinstance(width, int | float) and isinstance(length, int):
                return [start * width**i for i in range(min(length, 1000))]
        return None


def read_metrics(package_dir: str | Path, generated_from: str | None = None) -> dict[str, Any]:
    """Every metric family an sglang package's source defines (the first definition of each name)."""
    root = Path(package_dir)
    if not (root / "srt").is_dir():
        raise SGLangSourceError(f"{root}: not an sglang package directory (no srt/)")
    families: dict[str, dict[str, Any]] = {}
    for relative in _FILES:
        path = root / relative
        if not path.is_file():
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as error:
            raise SGLangSourceError(f"cannot read {relative}: {error}") from error
        visitor = _Definitions(relative)
        visitor.visit(tree)
        for family in visitor.found:
            families.setdefault(family["name"], family)
    if not families:
        raise SGLangSourceError(f"{root}: no Prometheus metric definitions found")
    return {
        "version": read_version(root),
        "generated_from": generated_from or f"sglang {root.name}/ source",
        "families": sorted(families.values(), key=lambda f: f["name"]),
    }


def _table(data: dict[str, Any], note: str = "") -> MetricTable:
    families = {}
    for raw in data["families"]:
        buckets = raw.get("buckets")
        families[raw["name"]] = MetricFamily(
            name=raw["name"],
            type=raw["type"],
            help=raw.get("help") or "",
            role=raw["role"],
            collector_labels=bool(raw.get("collector_labels")),
            extra_labels=tuple(raw.get("extra_labels") or ()),
            multiprocess_mode=raw.get("multiprocess_mode"),
            buckets=tuple(buckets) if buckets else None,
            defined_at=raw.get("defined_at") or "",
        )
    return MetricTable(data["version"], families, note)


def shipped_metric_versions() -> list[str]:
    """The versions specmon ships a metric table of, oldest first."""
    versions = [p.stem.removeprefix("metrics-") for p in DATA_DIR.glob("metrics-*.json")]
    return sorted(versions, key=version_key)


@functools.lru_cache(maxsize=8)
def load_shipped_metrics(version: str) -> MetricTable:
    """The shipped table of `version`, else of the nearest older shipped version (its `note` says so)."""
    versions = shipped_metric_versions()
    older = [v for v in versions if version_key(v) <= version_key(version)]
    if not older:
        raise SGLangSourceError(f"no shipped metric table for SGLang {version} or older (have {versions})")
    chosen = older[-1]
    data = json.loads((DATA_DIR / f"metrics-{chosen}.json").read_text(encoding="utf-8"))
    note = "" if chosen == version else f"SGLang {version}'s metrics taken from {chosen}'s table"
    return _table(data, note)
