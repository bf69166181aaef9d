"""The fleet's PromQL, in one place: one expression per column for every server at once, and the Prometheus
rules file (recording rules named `level:metric:operations`, alerting rules) rendered from the same expressions.

Per server (the `--server-label`, default `instance`): scheduler series (gauges, `realtime_tokens_total`) are
repeated by every TP (and PP/EP) rank and every node of a multi-node server, so they are deduplicated with
`max by (server, dp_rank)` and then summed over the data-parallel ranks (a plain `sum` double-counts);
tokenizer series (token counters, latency histograms) exist once per tokenizer (node 0 only) and are summed.
Rate windows are at least 4 × the scrape interval (`window_for`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import yaml

from specmon.fleet.promapi import format_duration
from specmon.live import rules

MIN_WINDOW_SCRAPES = 4
"""A rate window shorter than 4 scrape intervals may hold fewer than two samples (then the rate is empty)."""
HISTORY_S = 900.0
"""The tok/s sparkline's span: 15 minutes."""
RESTART_LOOKBACK = "15m"
LAST_SEEN_LOOKBACK = "1h"
COLUMN_LABEL = "specmon_column"
"""The label that tells the columns apart in the one request that asks them all (`FleetQueries.combined`)."""
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def window_for(asked_s: float, scrape_s: float) -> float:
    """The rate window: the one asked for, raised to 4 × the scrape interval."""
    return max(float(asked_s), MIN_WINDOW_SCRAPES * float(scrape_s))


def valid_label_name(name: str) -> bool:
    return bool(_LABEL_NAME.match(name))


def valid_selector(selector: str) -> bool:
    """A selector's matchers (`job="sglang",env=~"prod.*"`), without braces; quotes balanced, no braces."""
    if "{" in selector or "}" in selector or "\n" in selector:
        return False
    return selector.count('"') % 2 == 0


@dataclass(frozen=True)
class Column:
    """One figure for every server: its expression, its recording rule's name, and the range its values may
    take (a value outside is absurd: skipped and said)."""

    key: str
    record: str
    expr: str
    low: float = 0.0
    high: float = math.inf
    per_host: bool = False
    inline_only: bool = False
    """Evaluated by `fleet` only, not a recording rule (a figure only the inline view needs)."""

    def check(self, value: float) -> str | None:
        """Why `value` cannot be used (None when it can)."""
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "infinite"
        if value < self.low:
            return "negative" if value < 0 else f"below {self.low:g}"
        if value > self.high:
            return f"absurd (over {self.high:g})"
        return None


@dataclass(frozen=True)
class FleetQueries:
    """Every expression the fleet evaluates, built from the user's selector and labels."""

    selector: str = 'job="sglang"'
    server_label: str = "instance"
    host_label: str | None = None
    gpu_selector: str = 'job="dcgm"'
    window_s: float = 60.0
    recorded: frozenset[str] = frozenset()
    """Columns whose recording rule Prometheus already evaluates (the same expression): read by record name."""

    def _sel(self, *extra: str) -> str:
        return "{" + ",".join(part for part in (self.selector, *extra) if part) + "}"

    def _gsel(self, metric: str) -> str:
        return metric + "{" + self.gpu_selector + "}"

    @property
    def window(self) -> str:
        return format_duration(self.window_s)

    @property
    def stall_window(self) -> str:
        return format_duration(max(self.window_s, rules.STALL_S))

    @property
    def host_group(self) -> str:
        """The labels a DCGM series is grouped by: `Hostname` and the host label (`instance` by default)."""
        return f"Hostname, {self.host_label or 'instance'}"

    @property
    def host_level(self) -> str:
        return f"Hostname_{self.host_label or 'instance'}"

    def up(self, *extra: str) -> str:
        return f"up{self._sel(*extra)}"

    def dedup(self, metric: str, *extra: str, by: str = "") -> str:
        """A scheduler series per server: TP/PP/EP ranks and nodes counted once, DP ranks summed."""
        s = self.server_label
        return f"sum by ({s}{by}) (max by ({s}, dp_rank{by}) ({metric}{self._sel(*extra)}))"

    def decode_rate(self, window: str) -> str:
        s = self.server_label
        decode = self._sel('mode="decode"')
        realtime = f"sum by ({s}) (max by ({s}, dp_rank) (rate(sglang:realtime_tokens_total{decode}[{window}])))"
        return f"{realtime} or {self.generation_rate(window)}"

    def generation_rate(self, window: str | None = None) -> str:
        return (f"sum by ({self.server_label}) "
                f"(rate(sglang:generation_tokens_total{self._sel()}[{window or self.window}]))")

    def verify_rate(self) -> str:
        return f"sum by ({self.server_label}) (rate(sglang:spec_verify_calls_total{self._sel()}[{self.window}]))"

    def columns(self) -> tuple[Column, ...]:
        s, w = self.server_label, self.window
        level_dp = f"{s}_dp_rank_engine_type"
        kv_used = self.dedup("sglang:num_used_tokens")
        kv_total = self.dedup("sglang:max_total_num_tokens")
        columns = (
            Column("decode_tok_s", f"{s}:sglang_decode_tokens:rate{w}", self.decode_rate(w), high=1e8),
            Column("generation_tok_s", f"{s}:sglang_generation_tokens:rate{w}", self.generation_rate(), high=1e8),
            Column("accept_length", f"{s}:sglang_accept_length:ratio_rate{w}",
                   f"{self.generation_rate()} / ({self.verify_rate()} > 0)", 0.5, 64),
            Column("accept_gauge", f"{s}:sglang_spec_accept_length:avg",
                   f"avg by ({s}) (max by ({s}, dp_rank) (sglang:spec_accept_length{self._sel()}))", 0, 64),
            Column("running_per_dp", f"{level_dp}:sglang_num_running_reqs:max",
                   f"max by ({s}, dp_rank, engine_type) (sglang:num_running_reqs{self._sel()})", high=1e7),
            Column("queued", f"{s}:sglang_num_queue_reqs:sum", self.dedup("sglang:num_queue_reqs"), high=1e8),
            Column("kv_used_ratio", f"{s}:sglang_kv_used:ratio",
                   f"({kv_used} / ({kv_total} > 0)) or "
                   f"avg by ({s}) (max by ({s}, dp_rank) (sglang:token_usage{self._sel()}))", high=1.5),
            Column("ttft_p99_s", f"{s}:sglang_time_to_first_token_seconds:p99_rate{w}",
                   f"histogram_quantile(0.99, sum by ({s}, le) "
                   f"(rate(sglang:time_to_first_token_seconds_bucket{self._sel()}[{w}])))", high=86400),
            Column("draft_tokens", f"{s}:sglang_spec_num_draft_tokens:max",
                   f"max by ({s}) (sglang:spec_num_draft_tokens{self._sel()})", high=1024),
            Column("num_steps", f"{s}:sglang_spec_num_steps:max",
                   f"max by ({s}) (sglang:spec_num_steps{self._sel()})", high=1024),
            Column("restarts", f"{s}:sglang_restarts:resets{RESTART_LOOKBACK}",
                   f"max by ({s}) (resets(sglang:num_requests_total{self._sel()}[{RESTART_LOOKBACK}]))", high=1e6),
            Column("stall_decode_tok_s", f"{s}:sglang_decode_tokens:rate{self.stall_window}",
                   self.decode_rate(self.stall_window), high=1e8),
            Column("stall_samples", "", f"max by ({s}) (count_over_time(sglang:num_running_reqs"
                   f"{self._sel()}[{self.stall_window}]))", high=1e6, inline_only=True),
            Column("gpu_memory_used_ratio", f"{self.host_level}:dcgm_fb_used:ratio",
                   f"sum by ({self.host_group}) ({self._gsel('DCGM_FI_DEV_FB_USED')}) / "
                   f"(sum by ({self.host_group}) ({self._gsel('DCGM_FI_DEV_FB_USED')}) + "
                   f"sum by ({self.host_group}) ({self._gsel('DCGM_FI_DEV_FB_FREE')}) > 0)", high=1.01,
                   per_host=True),
            Column("gpu_util_min", f"{self.host_level}:dcgm_gpu_util:min",
                   f"min by ({self.host_group}) ({self._gsel('DCGM_FI_DEV_GPU_UTIL')})", high=100.5, per_host=True),
        )
        if self.stall_window == w:  # the decode rate already spans the stall limit
            return tuple(column for column in columns if column.key != "stall_decode_tok_s")
        return columns

    def last_up(self, servers: list[str], resolution_s: float) -> str:
        """When each of `servers` (down now) was last up, to the scrape interval: asked once per server newly
        seen down (an hour's subquery at that resolution costs more than every column together)."""
        s = self.server_label
        names = "|".join(re.escape(name).replace("\\", "\\\\").replace('"', '\\"') for name in servers)
        selector = self._sel(f'{s}=~"{names}"')
        return (f"max by ({s}) (max_over_time(timestamp(up{selector} == 1)"
                f"[{LAST_SEEN_LOOKBACK}:{format_duration(resolution_s)}]))")

    def combined(self, groups: int = 1) -> list[str]:
        """Every column's expression (and `up`) in `groups` PromQL expressions, each column tagged with its key
        in COLUMN_LABEL: that many HTTP requests per refresh (Prometheus evaluates them in parallel), whatever
        the number of columns and servers."""
        parts = [("up", self.up())] + [(column.key, column.record if column.key in self.recorded else column.expr)
                                       for column in self.columns()]
        shares: list[list[tuple[str, str]]] = [[] for _ in range(max(1, min(groups, len(parts))))]
        for i, part in enumerate(parts):
            shares[i % len(shares)].append(part)
        return [" or ".join(f'label_replace({expr}, "{COLUMN_LABEL}", "{key}", "", "")' for key, expr in share)
                for share in shares]

    def history(self) -> str:
        """The tok/s sparkline: the decode rate as a range query over HISTORY_S."""
        return self.decode_rate(self.window)

    def history_step(self, scrape_s: float) -> float:
        return max(scrape_s, HISTORY_S / 60)

    def server_samples(self, server: str) -> str:
        """Every `sglang:*` sample of one server (its drill-down is fed from them)."""
        return '{__name__=~"sglang:.*",' + ",".join(
            part for part in (self.selector, f'{self.server_label}="{_escape(server)}"') if part) + "}"

    def gpu_series(self) -> str:
        """Every DCGM series the GPU selector matches (a drill-down keeps its host's: `tracker.on_host`)."""
        return '{__name__=~"DCGM_FI_DEV_.*"' + (f",{self.gpu_selector}" if self.gpu_selector else "") + "}"

    def alerts(self) -> list[dict]:
        """Alerting rules: the Live view's rules that Prometheus can evaluate alone (thresholds from live.rules)."""
        s, w = self.server_label, self.window
        running = self.dedup("sglang:num_running_reqs")
        queued = self.dedup("sglang:num_queue_reqs")
        accept = f"{self.generation_rate()} / ({self.verify_rate()} > 0)"
        kv = (f"{self.dedup('sglang:num_used_tokens')} / "
              f"({self.dedup('sglang:max_total_num_tokens')} > 0)")
        gen_in_window = f"{self.generation_rate()} * {self.window_s:g}"
        return [
            {"alert": "SpecmonServerDown", "expr": f"max by ({s}) (up{self._sel()}) == 0", "for": "1m",
             "labels": {"severity": "critical"},
             "annotations": {"summary": f"{{{{ $labels.{s} }}}}: every target of the server is down"}},
            {"alert": "SpecmonSpeculationNotAccepting",
             "expr": f"({accept}) < {rules.ACCEPT_NO_DRAFT:g} and on ({s}) "
                     f"({gen_in_window} >= {rules.MIN_TOKENS_FOR_ACCEPT})",
             "for": "2m", "labels": {"severity": "critical"},
             "annotations": {"summary": f"{{{{ $labels.{s} }}}}: acceptance {{{{ $value | printf \"%.2f\" }}}} "
                                        f"≈ 1 token per verify step over {w}: did the draft's weights load?"}},
            {"alert": "SpecmonDecodeStalled",
             "expr": f"({running}) > 0 and on ({s}) ({self.decode_rate(self.stall_window)}) == 0",
             "for": "1m", "labels": {"severity": "critical"},
             "annotations": {"summary": f"{{{{ $labels.{s} }}}}: requests running, no decode progress for "
                                        f"{self.stall_window}"}},
            {"alert": "SpecmonKVCacheFull",
             "expr": f"({kv}) >= {rules.KV_FULL:g} and on ({s}) ({queued}) > 0",
             "for": "1m", "labels": {"severity": "warning"},
             "annotations": {"summary": f"{{{{ $labels.{s} }}}}: KV cache {{{{ $value | humanizePercentage }}}} "
                                        f"full with requests queued"}},
        ]

    def rules_file(self) -> str:
        """The Prometheus rules file (YAML): the columns as recording rules, then the alerting rules."""
        recording = [{"record": column.record, "expr": column.expr} for column in self.columns()
                     if not column.inline_only]
        recording.append({"record": f"{self.server_label}:sglang_num_running_reqs:sum",
                          "expr": self.dedup("sglang:num_running_reqs")})
        document = {"groups": [
            {"name": "specmon-fleet-recording", "rules": recording},
            {"name": "specmon-fleet-alerts", "rules": self.alerts()},
        ]}
        header = ("# specmon fleet rules: the expressions `specmon fleet` evaluates inline, as recording and\n"
                  f"# alerting rules (selector {self.selector!r}, server label {self.server_label!r}, "
                  f"window {self.window}).\n")
        return header + yaml.safe_dump(document, sort_keys=False, width=1000, allow_unicode=True)


def recorded_columns(queries: FleetQueries, rules: dict[str, str]) -> frozenset[str]:
    """The columns whose recording rule (by name) has the very expression `fleet` would evaluate (spaces aside)."""

    def bare(expr: str) -> str:
        return "".join(expr.split())

    return frozenset(column.key for column in queries.columns()
                     if not column.inline_only and column.record in rules
                     and bare(rules[column.record]) == bare(column.expr))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
