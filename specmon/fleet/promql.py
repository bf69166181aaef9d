"""The fleet's PromQL, in one place: one expression per column for every server at once, and the Prometheus
rules file (recording rules named `level:metric:operations`, alerting rules) rendered from the same expressions.

Inline (no recording rules installed), a refresh does not evaluate each column's expression as it stands: it
asks for the few passes the columns are made of (`FleetQueries.parts`: each metric read once, the scheduler
gauges in one pass by name, aggregated before anything is joined) and `specmon.fleet.figures` computes the
columns from them exactly as the expressions would. Columns whose recording rule Prometheus evaluates are read
by record name instead.

Per server (the `--server-label`, default `instance`): scheduler series (gauges, `realtime_tokens_total`) are
repeated by every TP (and PP/EP) rank and every node of a multi-node server, so they are deduplicated with
`max by (server, dp_rank)` and then summed over the data-parallel ranks (a plain `sum` double-counts);
tokenizer series (token counters, latency histograms) exist once per tokenizer (node 0 only) and are summed.
Rate windows are at least 4 × the scrape interval (`window_for`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import yaml

from specmon.fleet.matchers import MatcherError, canonical, promql_string, regex_literal
from specmon.fleet.matchers import valid_label_name as valid_label_name
from specmon.fleet.promapi import format_duration
from specmon.live import rules
from specmon.plausible import MAX_DRAFT, MAX_LATENCY_MS, MAX_REQUESTS, MAX_TOK_S, MAX_TOKENS
from specmon.sglang.metric_names import (
    GENERATION_TOKENS_TOTAL,
    MAX_TOTAL_NUM_TOKENS,
    NUM_QUEUE_REQS,
    NUM_REQUESTS_TOTAL,
    NUM_RUNNING_REQS,
    NUM_USED_TOKENS,
    PREFIX,
    REALTIME_TOKENS_TOTAL,
    SPEC_ACCEPT_LENGTH,
    SPEC_NUM_DRAFT_TOKENS,
    SPEC_NUM_STEPS,
    SPEC_VERIFY_CALLS_TOTAL,
    TIME_TO_FIRST_TOKEN_SECONDS,
    TOKEN_USAGE,
)

MIN_WINDOW_SCRAPES = 4
"""A rate window shorter than 4 scrape intervals may hold fewer than two samples (then the rate is empty)."""
HISTORY_S = 900.0
"""The tok/s sparkline's span: 15 minutes."""
HISTORY_STEPS = 12
"""The tok/s sparkline's points over HISTORY_S (one per character of its 12): each the decode rate over its own
step (75 s), read as such, not drawn from finer points."""
RESTART_LOOKBACK = "15m"
LAST_SEEN_LOOKBACK = "1h"
TTFT_QUANTILE = 0.99
TTFT_BOUNDS = ("ttft_first_bound", "ttft_last_bound")
"""Each server's first and highest finite TTFT bucket bound: what the TTFT columns are computed with inline
(beside histogram_quantile's p99), asked by the reader once per server (`FleetQueries.ttft_bucket_bounds`)."""
SERVERS_LE = "servers"
"""The `le` of `FleetQueries.ttft_shared_bounds`' count of servers."""
COLUMN_LABEL = "specmon_column"
"""The label that tells the parts apart in the requests that ask them all (`FleetQueries.combined`)."""
GAUGES_PART = "gauges"
"""The part holding the scheduler gauges a column needs, one series per (metric, server, DP rank, engine type)."""
LAUNCH_PART = "launch_gauges"
"""The part holding the scheduler gauges of LAUNCH_GAUGES, as GAUGES_PART holds the others."""
LAUNCH_GAUGES = (MAX_TOTAL_NUM_TOKENS, SPEC_NUM_DRAFT_TOKENS, SPEC_NUM_STEPS)
"""The scheduler gauges a server's launch fixes (its KV pool, its speculative settings): not asked with every
refresh (`FleetReader` reads them again when the targets up or the restarts change, and every few minutes)."""
HOST_NAME_LABELS = ("Hostname", "hostname")
"""dcgm-exporter's host label: `Hostname` up to 4.8, `hostname` since NVIDIA/dcgm-exporter#655."""
NOW_PART = "now"
"""The part that answers the time Prometheus evaluated a refresh at (`vector(time())`)."""
SCRAPE_COUNT_S = 600.0
"""The span whose `up` samples tell the scrape interval when Prometheus does not say it (`scrape_counts`)."""
MAX_WINDOW_S = 7 * 86400.0
"""The longest rate window (`--window`) taken: a week."""


def window_for(asked_s: float, scrape_s: float) -> float:
    """The rate window: the one asked for, raised to 4 × the scrape interval."""
    return max(float(asked_s), MIN_WINDOW_SCRAPES * float(scrape_s))


def selector_problem(selector: str) -> str | None:
    """Why `selector` is not a list of label matchers specmon can put in its PromQL (None when it is)."""
    try:
        canonical(selector)
    except MatcherError as exc:
        return str(exc)
    return None


def canonical_selector(selector: str) -> str:
    """`selector`'s matchers written in one form (as given when they cannot be read: `selector_problem`)."""
    try:
        return canonical(selector)
    except MatcherError:
        return selector


@dataclass(frozen=True)
class Column:
    """One figure for every server: its expression, its recording rule's name, and the range its values may
    take (a value outside is absurd: skipped and said)."""

    key: str
    record: str
    expr: str
    low: float = 0.0
    high: float = math.inf
    whole: bool = False
    """A count: a fractional value is absurd too."""
    per_host: bool = False
    inline_only: bool = False
    """Evaluated by `fleet` only, not a recording rule (a figure only the inline view needs)."""
    reads: tuple[str, ...] = ()
    """The parts it is computed from inline (`specmon.fleet.figures`): part keys, or the scheduler gauges it
    needs by metric name (read in the one GAUGES_PART); empty: its own expression is its part."""
    above_0_only: bool = False
    """Its part asks only the values above 0 (a count most servers have none of: a server without one shows 0)."""

    def check(self, value: float) -> str | None:
        """Why `value` cannot be used (None when it can)."""
        if self.low <= value <= self.high and -math.inf < value < math.inf and (not self.whole or value == int(value)):
            return None  # the usual case, in one test (every figure of every server goes through here)
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "infinite"
        if value < self.low:
            return "negative" if value < 0 else f"below {self.low:g}"
        if value > self.high:
            return f"absurd (over {self.high:g})"
        if self.whole and value != int(value):
            return "not a whole number"
        return None


@dataclass(frozen=True)
class Part:
    """One operand of a refresh's requests: an expression, its answers tagged with `key` (a part that reads
    several metrics in one pass keeps each series' metric name). `weight`: about how many series it reads per
    server, to share the parts out evenly between the requests."""

    key: str
    expr: str
    weight: int = 1

    def tagged(self) -> str:
        return f'label_replace({self.expr}, "{COLUMN_LABEL}", "{self.key}", "", "")'


MAX_FRAMEBUFFER_MIB = 1e8
"""A host's framebuffer, used or free, summed over its GPUs: 100 TB."""
PART_CHECKS: dict[str, Column] = {check.key: check for check in (
    Column("realtime_tok_s", "", "", high=MAX_TOK_S),
    Column("generation_tok_s", "", "", high=MAX_TOK_S),
    Column("verify_per_s", "", "", high=MAX_TOK_S),
    Column("ttft_quantile", "", "", high=MAX_LATENCY_MS / 1000),
    Column(NUM_RUNNING_REQS, "", "", high=MAX_REQUESTS, whole=True),
    Column(NUM_QUEUE_REQS, "", "", high=MAX_REQUESTS, whole=True),
    Column(NUM_USED_TOKENS, "", "", high=MAX_TOKENS, whole=True),
    Column(MAX_TOTAL_NUM_TOKENS, "", "", high=MAX_TOKENS, whole=True),
    Column(TOKEN_USAGE, "", "", high=1.5),
    Column(SPEC_ACCEPT_LENGTH, "", "", high=64),
    Column(SPEC_NUM_DRAFT_TOKENS, "", "", high=MAX_DRAFT, whole=True),
    Column(SPEC_NUM_STEPS, "", "", high=MAX_DRAFT, whole=True),
    Column("DCGM_FI_DEV_FB_USED", "", "", high=MAX_FRAMEBUFFER_MIB),
    Column("DCGM_FI_DEV_FB_FREE", "", "", high=MAX_FRAMEBUFFER_MIB),
)}
"""What each part's values can be (by part key, or by metric name in the gauges and framebuffer parts): checked
before a column is computed from them, as a column's own values are (`Column.check`)."""


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
        """The labels a DCGM series is grouped by: `Hostname` (or `hostname`) and the host label (`instance` by
        default)."""
        return f"{', '.join(HOST_NAME_LABELS)}, {self.host_label or 'instance'}"

    @property
    def host_level(self) -> str:
        return f"Hostname_{self.host_label or 'instance'}"

    def up(self, *extra: str) -> str:
        return f"up{self._sel(*extra)}"

    def dedup(self, metric: str, *extra: str, by: str = "") -> str:
        """A scheduler series per server: TP/PP/EP ranks and nodes counted once, DP ranks summed."""
        s = self.server_label
        return f"sum by ({s}{by}) (max by ({s}, dp_rank{by}) ({metric}{self._sel(*extra)}))"

    def realtime_rate(self, window: str) -> str:
        """`realtime_tokens_total{mode="decode"}` (SGLang 0.5.9+): the live decode rate, TP ranks counted once."""
        s = self.server_label
        decode = self._sel('mode="decode"')
        return f"sum by ({s}) (max by ({s}, dp_rank) (rate({REALTIME_TOKENS_TOTAL}{decode}[{window}])))"

    def decode_rate(self, window: str) -> str:
        return f"{self.realtime_rate(window)} or {self.generation_rate(window)}"

    def generation_rate(self, window: str | None = None) -> str:
        return (f"sum by ({self.server_label}) "
                f"(rate({GENERATION_TOKENS_TOTAL}{self._sel()}[{window or self.window}]))")

    def verify_rate(self) -> str:
        return f"sum by ({self.server_label}) (rate({SPEC_VERIFY_CALLS_TOTAL}{self._sel()}[{self.window}]))"

    @property
    def ttft_buckets_record(self) -> str:
        return f"{self.server_label}_le:sglang_time_to_first_token_seconds_bucket:rate{self.window}"

    def ttft_buckets(self) -> str:
        """TTFT's bucket rates per server and bound (SGLang's tokenizer series: summed)."""
        return (f"sum by ({self.server_label}, le) "
                f"(rate({TIME_TO_FIRST_TOKEN_SECONDS}_bucket{self._sel()}[{self.window}]))")

    def ttft_quantile(self, buckets: str | None = None) -> str:
        """histogram_quantile's own p99 (interpolated in the first bucket, the highest bound for +Inf)."""
        return f"histogram_quantile({TTFT_QUANTILE:g}, {buckets or self.ttft_buckets()})"

    def ttft_bounds(self) -> tuple[str, str]:
        """Each server's first and highest finite TTFT bucket bound, from its bucket series now (no rate: cheap):
        histogram_quantile(1) of every bucket counting 1 is the first bound; with +Inf counting 2, the highest."""
        s, name = self.server_label, f"{TIME_TO_FIRST_TOKEN_SECONDS}_bucket"
        finite_le, inf_le = 'le!="+Inf"', 'le="+Inf"'
        every = f"group by ({s}, le) ({name}{self._sel()})"
        finite = f"group by ({s}, le) ({name}{self._sel(finite_le)})"
        inf = f"group by ({s}, le) ({name}{self._sel(inf_le)})"
        return f"histogram_quantile(1, {every})", f"histogram_quantile(1, {finite} or 2 * {inf})"

    def ttft_bucket_bounds(self, servers: list[str]) -> str:
        """The TTFT bucket bounds (`le`) of `servers` (all with an empty list), from their series now: asked once
        per server (they are its launch's configuration), not with every refresh."""
        s = self.server_label
        extra = (f"{s}=~{promql_string(_alternatives(servers))}",) if servers else ()
        return f"group by ({s}, le) ({TIME_TO_FIRST_TOKEN_SECONDS}_bucket{self._sel(*extra)})"

    def ttft_shared_bounds(self) -> str:
        """How many servers have each TTFT bucket bound (`le`) now, and (as `le="servers"`) how many have TTFT
        buckets at all: when every bound is every server's, this answer of a few samples gives every server's
        bounds (`ttft_bucket_bounds` answers a sample per server and bound)."""
        s = self.server_label
        per_server = f"group by ({s}, le) ({TIME_TO_FIRST_TOKEN_SECONDS}_bucket{self._sel()})"
        return (f'count by (le) ({per_server}) or '
                f'label_replace(count(group by ({s}) ({per_server})), "le", "{SERVERS_LE}", "", "")')

    def ttft_p99(self) -> dict[str, str]:
        """TTFT p99 per server by the quantile rule (`specmon.live.quantiles`): "ttft_p99_s" where
        histogram_quantile's answer lies between the first and the highest finite bound, else only the bound:
        "ttft_p99_below_s" (it fell in the first bucket) or "ttft_p99_above_s" (in the +Inf one). Written on the
        bucket rates' record (the rules file records it first)."""
        s = self.server_label
        p99 = self.ttft_quantile(self.ttft_buckets_record)
        first, last = self.ttft_bounds()
        return {"ttft_p99_s": f"{p99} unless on ({s}) ({p99} <= {first} or {p99} >= {last})",
                "ttft_p99_below_s": f"{first} and on ({s}) ({p99} <= {first})",
                "ttft_p99_above_s": f"{last} and on ({s}) ({p99} >= {last})"}

    def dcgm_framebuffer(self) -> str:
        """FB_USED and FB_FREE summed per host in one pass (the series keep their metric name)."""
        return (f'sum by (__name__, {self.host_group}) '
                f'({{__name__=~"DCGM_FI_DEV_FB_(USED|FREE)"{"," + self.gpu_selector if self.gpu_selector else ""}}})')

    def columns(self) -> tuple[Column, ...]:
        s, w = self.server_label, self.window
        level_dp = f"{s}_dp_rank_engine_type"
        kv_used = self.dedup(NUM_USED_TOKENS)
        kv_total = self.dedup(MAX_TOTAL_NUM_TOKENS)
        columns = (
            Column("decode_tok_s", f"{s}:sglang_decode_tokens:rate{w}", self.decode_rate(w), high=MAX_TOK_S,
                   reads=("realtime_tok_s", "generation_tok_s")),
            Column("generation_tok_s", f"{s}:sglang_generation_tokens:rate{w}", self.generation_rate(), high=MAX_TOK_S,
                   reads=("generation_tok_s",)),
            Column("accept_length", f"{s}:sglang_accept_length:ratio_rate{w}",
                   f"{self.generation_rate()} / ({self.verify_rate()} > 0)", 0.5, 64,
                   reads=("generation_tok_s", "verify_per_s")),
            Column("accept_gauge", f"{s}:sglang_spec_accept_length:avg",
                   f"avg by ({s}) (max by ({s}, dp_rank) ({SPEC_ACCEPT_LENGTH}{self._sel()})) > 0", 0, 64,
                   reads=(SPEC_ACCEPT_LENGTH,)),
            Column("running_per_dp", f"{level_dp}:sglang_num_running_reqs:max",
                   f"max by ({s}, dp_rank, engine_type) ({NUM_RUNNING_REQS}{self._sel()})", high=MAX_REQUESTS,
                   whole=True,
                   reads=(NUM_RUNNING_REQS,)),
            Column("queued", f"{s}:sglang_num_queue_reqs:sum", self.dedup(NUM_QUEUE_REQS),
                   high=MAX_REQUESTS, whole=True,
                   reads=(NUM_QUEUE_REQS,)),
            Column("kv_used_ratio", f"{s}:sglang_kv_used:ratio",
                   f"({kv_used} / ({kv_total} > 0)) or "
                   f"avg by ({s}) (max by ({s}, dp_rank) ({TOKEN_USAGE}{self._sel()}))", high=1.5,
                   reads=(NUM_USED_TOKENS, MAX_TOTAL_NUM_TOKENS, TOKEN_USAGE)),
            *(Column(key, f"{s}:sglang_time_to_first_token_seconds:{key.removeprefix('ttft_').removesuffix('_s')}"
                     f"_rate{w}", expr, high=MAX_LATENCY_MS / 1000, reads=("ttft_quantile",))
              for key, expr in self.ttft_p99().items()),
            Column("draft_tokens", f"{s}:sglang_spec_num_draft_tokens:max",
                   f"max by ({s}) ({SPEC_NUM_DRAFT_TOKENS}{self._sel()}) > 0", high=MAX_DRAFT,
                   whole=True,
                   reads=(SPEC_NUM_DRAFT_TOKENS,)),
            Column("num_steps", f"{s}:sglang_spec_num_steps:max",
                   f"max by ({s}) ({SPEC_NUM_STEPS}{self._sel()}) > 0", high=MAX_DRAFT, whole=True,
                   reads=(SPEC_NUM_STEPS,)),
            Column("restarts", f"{s}:sglang_restarts:resets{RESTART_LOOKBACK}",
                   f"max by ({s}) (resets({NUM_REQUESTS_TOTAL}{self._sel()}[{RESTART_LOOKBACK}]))", high=1e6,
                   whole=True, above_0_only=True),
            Column("stall_decode_tok_s", f"{s}:sglang_decode_tokens:rate{self.stall_window}",
                   self.decode_rate(self.stall_window), high=MAX_TOK_S),
            Column("stall_samples", "", self.stall_samples([]), high=1e6, whole=True, inline_only=True),
            Column("gpu_memory_used_ratio", f"{self.host_level}:dcgm_fb_used:ratio",
                   f"sum by ({self.host_group}) ({self._gsel('DCGM_FI_DEV_FB_USED')}) / "
                   f"(sum by ({self.host_group}) ({self._gsel('DCGM_FI_DEV_FB_USED')}) + "
                   f"sum by ({self.host_group}) ({self._gsel('DCGM_FI_DEV_FB_FREE')}) > 0)", high=1.0,
                   per_host=True, reads=("dcgm_framebuffer",)),
            Column("gpu_util_min", f"{self.host_level}:dcgm_gpu_util:min",
                   f"min by ({self.host_group}) ({self._gsel('DCGM_FI_DEV_GPU_UTIL')})", high=100.5, per_host=True),
        )
        if self.stall_window == w:  # the decode rate already spans the stall limit
            return tuple(column for column in columns if column.key != "stall_decode_tok_s")
        return columns

    def parts(self, launch: bool = True) -> list[Part]:
        """What a refresh asks for: `up`, each recorded column by its record name, and the passes the other
        columns are computed from (`specmon.fleet.figures`); LAUNCH_PART only with `launch`. `stall_samples`
        is not among them: it is asked only for servers that look stalled (`stall_samples(servers)`)."""
        s = self.server_label
        base = {"realtime_tok_s": Part("realtime_tok_s", self.realtime_rate(self.window), weight=2),
                "generation_tok_s": Part("generation_tok_s", self.generation_rate()),
                "verify_per_s": Part("verify_per_s", self.verify_rate()),
                "ttft_quantile": Part("ttft_quantile", self.ttft_quantile(), weight=20),
                "dcgm_framebuffer": Part("dcgm_framebuffer", self.dcgm_framebuffer(), weight=4)}
        parts = [Part("up", self.up()), Part(NOW_PART, "vector(time())")]
        wanted: list[str] = []
        gauges: list[str] = []
        for column in self.columns():
            if column.inline_only:
                continue
            if column.key in self.recorded or not column.reads:
                expr = column.record if column.key in self.recorded else column.expr
                parts.append(Part(column.key, f"({expr}) > 0" if column.above_0_only else expr,
                                  weight=1 if column.key in self.recorded else 2))
            for read in column.reads if column.key not in self.recorded else ():
                target = gauges if read.startswith(PREFIX) else wanted
                if read not in target:
                    target.append(read)
        parts += [base[key] for key in wanted]
        for key, names in ((GAUGES_PART, [name for name in gauges if name not in LAUNCH_GAUGES]),
                           (LAUNCH_PART, [name for name in gauges if name in LAUNCH_GAUGES and launch])):
            if names:
                alternatives = "|".join(regex_literal(name) for name in names)
                parts.append(Part(key, f'max by (__name__, {s}, dp_rank, engine_type) '
                                       f'({self._sel(f"__name__=~{promql_string(alternatives)}")})',
                                  weight=2 * len(names)))
        return parts

    def launch_part(self) -> Part | None:
        """The part of the launch's gauges (None: every column that reads them is recorded)."""
        return next((part for part in self.parts() if part.key == LAUNCH_PART), None)

    def scrape_counts(self) -> str:
        """How many `up` samples each job's targets have over SCRAPE_COUNT_S (the most of any target): the scrape
        interval, where Prometheus does not say it (Thanos Query, VictoriaMetrics, Mimir have no status/config)."""
        return f"max by (job) (count_over_time({self.up()}[{format_duration(SCRAPE_COUNT_S)}]))"

    def jobs(self) -> str:
        """Every job Prometheus scrapes (said when the selector matches no target)."""
        return "count by (job) (up)"

    def stall_samples(self, servers: list[str]) -> str:
        """How many samples of the stall window Prometheus holds for `servers` (all with an empty list): how far
        back "no decode progress" is known."""
        s = self.server_label
        extra = (f"{s}=~{promql_string(_alternatives(servers))}",) if servers else ()
        return (f"max by ({s}) (count_over_time({NUM_RUNNING_REQS}"
                f"{self._sel(*extra)}[{self.stall_window}]))")

    def last_up(self, instances: list[str], resolution_s: float) -> str:
        """When each of `instances` (targets down now) was last up, to the scrape interval: asked once per
        target newly seen down (an hour's subquery at that resolution costs more than every column together)."""
        selector = self._sel(f"instance=~{promql_string(_alternatives(instances))}")
        return (f"max by (instance) (max_over_time(timestamp(up{selector} == 1)"
                f"[{LAST_SEEN_LOOKBACK}:{format_duration(resolution_s)}]))")

    def server_names(self, up_now: list[str], down: list[str]) -> str:
        """The server label of targets whose `up` lacks it (SGLang's `--extra-metric-labels` put it on the
        metrics only): from the targets' `sglang:*` series now, or for a target down now, from the last hour of
        `max_total_num_tokens` (every scheduler rank reports it, on every node)."""
        by = "instance" if self.server_label == "instance" else f"instance, {self.server_label}"
        asks = []
        if up_now:
            selector = self._sel(f'__name__=~"{PREFIX}.+"', f"instance=~{promql_string(_alternatives(up_now))}")
            asks.append(f"group by ({by}) ({selector})")
        if down:
            asks.append(f"group by ({by}) (last_over_time({MAX_TOTAL_NUM_TOKENS}"
                        f"{self._sel(f'instance=~{promql_string(_alternatives(down))}')}[{LAST_SEEN_LOOKBACK}]))")
        return " or ".join(asks)

    def combined(self, groups: int = 1, launch: bool = True) -> list[str]:
        """Every part (LAUNCH_PART only with `launch`) tagged with its key in COLUMN_LABEL, shared out into
        `groups` PromQL expressions of about the same weight: that many HTTP requests per refresh (Prometheus
        evaluates them in parallel), whatever the number of columns and servers. Each is a balanced tree of
        `or`s: a chain would hand every part's series on through all the `or`s after it."""
        parts = sorted(self.parts(launch), key=lambda part: -part.weight)
        shares: list[list[Part]] = [[] for _ in range(max(1, min(groups, len(parts))))]
        for part in parts:
            min(shares, key=lambda share: sum(p.weight for p in share)).append(part)
        return [_balanced_or([part.tagged() for part in share]) for share in shares]

    def history(self, scrape_s: float) -> str:
        """The tok/s sparkline: the decode rate as a range query over HISTORY_S at `history_step`, each point the
        rate over its step (or the rate window, when longer); the decode column's record at each point when
        Prometheus records it (no rate evaluated for each step of every server)."""
        if "decode_tok_s" in self.recorded:
            return next(column.record for column in self.columns() if column.key == "decode_tok_s")
        return self.decode_rate(format_duration(max(self.history_step(scrape_s), self.window_s)))

    def history_step(self, scrape_s: float) -> float:
        """A sparkline point per HISTORY_S / HISTORY_STEPS, or per scrape when the scrapes are further apart."""
        return max(scrape_s, HISTORY_S / HISTORY_STEPS)

    def server_samples(self, server: str) -> str:
        """Every `sglang:*` sample of one server (its drill-down is fed from them)."""
        return f'{{__name__=~"{PREFIX}.*",' + ",".join(
            part for part in (self.selector, f'{self.server_label}={promql_string(server)}') if part) + "}"

    def running(self) -> str:
        """Every server's running requests (ranks counted once, DP ranks summed): the load they were observed at."""
        return self.dedup(NUM_RUNNING_REQS)

    def running_of(self, server: str) -> str:
        """One server's running requests (ranks counted once, DP ranks summed): its observed load over time."""
        return self.dedup(NUM_RUNNING_REQS, f"{self.server_label}={promql_string(server)}")

    def gpu_series(self) -> str:
        """Every DCGM series the GPU selector matches (a drill-down keeps its host's: `tracker.on_host`)."""
        return '{__name__=~"DCGM_FI_DEV_.*"' + (f",{self.gpu_selector}" if self.gpu_selector else "") + "}"

    def alerts(self) -> list[dict]:
        """Alerting rules: the Live view's rules that Prometheus can evaluate alone (thresholds from live.rules)."""
        s, w = self.server_label, self.window
        running = self.dedup(NUM_RUNNING_REQS)
        queued = self.dedup(NUM_QUEUE_REQS)
        accept = f"{self.generation_rate()} / ({self.verify_rate()} > 0)"
        kv = (f"{self.dedup(NUM_USED_TOKENS)} / "
              f"({self.dedup(MAX_TOTAL_NUM_TOKENS)} > 0)")
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
        recording = [{"record": self.ttft_buckets_record, "expr": self.ttft_buckets()}]
        recording += [{"record": column.record, "expr": column.expr} for column in self.columns()
                      if not column.inline_only]
        recording.append({"record": f"{self.server_label}:sglang_num_running_reqs:sum",
                          "expr": self.dedup(NUM_RUNNING_REQS)})
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


def _alternatives(names: list[str]) -> str:
    """A regular expression (RE2's) matching exactly `names`."""
    return "|".join(regex_literal(name) for name in names)


def _balanced_or(expressions: list[str]) -> str:
    if len(expressions) == 1:
        return expressions[0]
    middle = len(expressions) // 2
    return f"({_balanced_or(expressions[:middle])}) or ({_balanced_or(expressions[middle:])})"
