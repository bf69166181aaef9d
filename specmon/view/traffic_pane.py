"""What the Live pane's Traffic tab shows: production traffic over the last minutes, from SGLang's own request
records (a `traffic.summary` result), as plain text rows built off the UI thread. The widget only lays them out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specmon.traffic.categories import NO_TEXT
from specmon.traffic.cli import tau_text
from specmon.traffic.summary import CATEGORY

AXIS_TITLES = {"prompt_tokens": "prompt tokens", "completion_tokens": "output tokens", CATEGORY: "prompt category"}
MAX_OUTLIERS_SHOWN = 3
MAX_NOTES = 3
OFF_TEXT = ("No request records to read. SGLang writes them with --export-metrics-to-file "
            "--export-metrics-to-file-dir DIR (or --log-requests); name them with --traffic PATH.")


@dataclass(frozen=True)
class ClassRow:
    """One class of requests: its label, requests, share of the tokens and τ with its 95% CI, as text."""

    value: str
    requests: str
    share: str
    tau: str


@dataclass(frozen=True)
class TrafficPaneModel:
    """The Traffic tab: a state ("off": no records known, "waiting": none read yet, "reading"), a headline, the
    token-weighted distribution of per-request τ, the classes of each axis, the outliers and the notes."""

    state: str
    headline: str
    distribution: tuple[int, ...] = ()
    bin_width: float = 0.25
    axes: tuple[tuple[str, tuple[ClassRow, ...]], ...] = ()
    outliers: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def _minutes(window_s: float) -> str:
    return f"{window_s / 60:.0f} min" if window_s >= 60 else f"{window_s:.0f} s"


def _tokens(n: int) -> str:
    return f"{n / 1e6:.1f} M" if n >= 10**6 else f"{n / 1e3:.1f} k" if n >= 10**4 else f"{n:,}"


def traffic_pane(result: dict[str, Any] | None, *, window_s: float, paths: list[str], problems: dict[str, str],
                 skipped: dict[str, int], by: str | None = None) -> TrafficPaneModel:
    """The model of a summary's `result()` over the last `window_s` (None: no path to read), with the reading's
    problems (path: why) and skipped records (reason: count)."""
    notes = [f"{path[-40:]}: {why}" for path, why in list(problems.items())[:MAX_NOTES]]
    if skipped:
        reason, count = max(skipped.items(), key=lambda item: item[1])
        total = sum(skipped.values())
        notes.append(f"skipped {total:,} records ({count:,}: {reason[:50]})")
    if result is None:
        return TrafficPaneModel("off", OFF_TEXT, notes=tuple(notes))
    if not result["requests"]:
        where = ", ".join(p[-30:] for p in paths[:2])
        return TrafficPaneModel("waiting", f"No request finished in the last {_minutes(window_s)} ({where})",
                                notes=tuple(notes))
    accept = result["accept_length"]
    headline = (f"τ {tau_text(accept['token_weighted'], accept['ci'])} token-weighted · "
                f"{result['requests']:,} req · {_tokens(result['tokens'])} tok · last {_minutes(window_s)}")
    axes: dict[str, list[ClassRow]] = {}
    for row in result["classes"]:
        share = f"{100 * row['share']:.0f}%" if row["share"] is not None else "–"
        axes.setdefault(row["by"], []).append(ClassRow(row["value"], f"{row['requests']:,}", share,
                                                       tau_text(row["accept_length"], row["ci"])))
    order = [a for a in ("prompt_tokens", "completion_tokens") if a in axes] + [a for a in axes if a == by]
    order += [CATEGORY] if CATEGORY in axes else []
    no_text = next((row for row in result["classes"] if row["by"] == CATEGORY and row["value"] == NO_TEXT), None)
    if no_text is not None:
        notes.append(f"{no_text['requests']:,} records hold no prompt text for your categories: the export file "
                     "keeps it unless --log-requests is at level 0 or 1")
    outliers = []
    for row in result["outliers"][:MAX_OUTLIERS_SHOWN]:
        kind = "nothing from the draft" if row["kind"] == "nothing_from_draft" else "at the chain's maximum"
        outliers.append(f"{row['rid'][:28]:<28} {kind:<22} {row['completion_tokens']:>7,} tok τ "
                        f"{row['accept_length']:.2f}")
    counts = result["outlier_counts"]
    more = sum(counts.values()) - len(outliers)
    if more > 0:
        outliers.append(f"… and {more:,} more")
    distribution = tuple(result["tau_distribution"]["tokens"])
    return TrafficPaneModel("reading", headline, distribution, result["tau_distribution"]["bin"],
                            tuple((AXIS_TITLES.get(a, a), tuple(axes[a])) for a in order), tuple(outliers),
                            tuple(notes))
