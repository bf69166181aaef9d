"""`specmon traffic PATH... [--since 1h] [--by KEY] [--json]`: the handler and its text output (80 columns)."""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
import time
from typing import Any, TextIO

from specmon.exits import UsageError
from specmon.text import printable, strict_json
from specmon.traffic.categories import NO_TEXT, NO_TEXT_HINT
from specmon.traffic.reader import PathRefused, ReadTally, read_records
from specmon.traffic.summary import CATEGORY, DOTTED_KEY, TrafficSummary

EXIT_NO_RECORD = 1
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])\Z")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_SINCE_S = 366 * 86400


def since_seconds(text: str) -> float:
    """`30m`, `1h`, `2d`: seconds; UsageError otherwise."""
    match = _DURATION.match(text.strip())
    if not match or not 0 < float(match.group(1)) * _SECONDS[match.group(2)] <= MAX_SINCE_S:
        raise UsageError(f"--since {printable(text[:40])}: give a duration up to 366d, e.g. 30m, 1h or 2d")
    return float(match.group(1)) * _SECONDS[match.group(2)]


def check_by(by: str | None) -> str | None:
    """`--by KEY` as given; UsageError unless a key of request_parameters (dotted for nested keys)."""
    if by is not None and not DOTTED_KEY.match(by):
        raise UsageError(f"--by {printable(by[:40])}: a key of request_parameters, dotted for nested keys "
                         "(e.g. lora_path or custom_labels.team)")
    return by


def with_tally(result: dict[str, Any], tally: ReadTally) -> dict[str, Any]:
    """A summary's result with what the reading skipped, left out and could not read."""
    result["skipped"] = {"count": sum(tally.skipped.values()), "reasons": dict(tally.skipped.most_common())}
    result["left_out"] = dict(tally.left_out)
    result["files"] = tally.files
    result["unreadable_files"] = tally.unreadable[:50]
    return result


def run_traffic(args: argparse.Namespace) -> int:
    """0 with at least one usable record, 1 with none, 2 for bad usage or a PATH that cannot be read."""
    since_ts = time.time() - since_seconds(args.since) if args.since else None
    check_by(args.by)
    tally = ReadTally()
    categories = getattr(args, "prompt_categories", None)
    summary = TrafficSummary(by=args.by, buckets=args.by is None,
                             categorise=categories.of_record if categories is not None else None)
    try:
        summary.feed(read_records(args.paths, tally, since_ts,
                                  want_params=args.by is not None or categories is not None))
    except PathRefused as refused:
        print(f"specmon traffic: {refused}", file=sys.stderr)
        if args.json:
            print(strict_json({"error": str(refused)}, indent=2))
        return 2
    result = with_tally(summary.result(), tally)
    result["categories"] = categories.to_json() if categories is not None else None
    if args.json:
        print(strict_json(result, indent=2))
    else:
        print_text(result, sys.stdout)
    if not result["requests"]:
        print("specmon traffic: no usable request record (SGLang writes them with --export-metrics-to-file "
              "--export-metrics-to-file-dir DIR, or --log-requests)", file=sys.stderr)
        return EXIT_NO_RECORD
    return 0


def tau_text(value: float | None, ci: list[float] | None) -> str:
    if value is None:
        return "–"
    return f"{value:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else f"{value:.2f} (n<5: no CI)"


def print_text(result: dict[str, Any], out: TextIO) -> None:
    """The summary as text, every line within 80 columns."""
    accept = result["accept_length"]
    out.write(f"{result['requests']:,} requests, {result['tokens']:,} output tokens, {result['files']} files\n")
    out.write(f"τ (token-weighted): {tau_text(accept['token_weighted'], accept['ci'])}\n")
    skipped = result["skipped"]
    if skipped["count"]:
        out.write(f"skipped {skipped['count']:,} records:\n")
        for reason, count in skipped["reasons"].items():
            out.write(f"  {count:>9,}  {reason[:66]}\n")
    for why, count in result["left_out"].items():
        out.write(f"left out {count:,} {why}\n")
    for problem in result["unreadable_files"]:
        out.write(f"unreadable: {problem[:66]}\n")
    if result.get("categories"):
        out.write(f"categories: your rules ({printable(result['categories']['file'])[-50:]})\n")
    by = None
    for row in result["classes"]:
        if row["by"] != by:
            by = row["by"]
            out.write(f"\nby {by[:40]:<40} {'requests':>9} {'share':>6}  τ [95% CI]\n")
        share = f"{100 * row['share']:.0f}%" if row["share"] is not None else "–"
        out.write(f"  {row['value'][:38]:<38} {row['requests']:>10,} {share:>6}  "
                  f"{tau_text(row['accept_length'], row['ci'])}\n")
    no_text = next((row for row in result["classes"] if row["by"] == CATEGORY and row["value"] == NO_TEXT), None)
    if no_text is not None:
        out.write("\n" + textwrap.fill(f"{no_text['requests']:,} records hold no prompt text for your rules: "
                                       f"{NO_TEXT_HINT}.", 80) + "\n")
    if result["outliers"]:
        out.write("\noutliers (longest first)\n")
        for row in result["outliers"]:
            kind = "nothing from the draft" if row["kind"] == "nothing_from_draft" else "at the chain's maximum"
            out.write(f"  {row['rid'][:36]:<36} {kind:<22} {row['completion_tokens']:>7,} tok "
                      f"τ {row['accept_length']:.2f}\n")
    counts = result["outlier_counts"]
    if any(counts.values()):
        out.write(f"({counts['nothing_from_draft']:,} nothing from the draft, {counts['at_chain_maximum']:,} at "
                  "the chain's maximum)\n")
