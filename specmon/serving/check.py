"""`specmon check`: health, effective speculative settings and one short generation of a running server.

HTTP 200 on /health proves nothing about speculation, so this also generates ~64 tokens at temperature 0
and reports the acceptance length; about 1.0 with speculation on means the draft is doing nothing.
"""

from __future__ import annotations

import asyncio
import math
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from specmon.acceptance import MIN_USEFUL_ACCEPT_LENGTH
from specmon.serving.client import (
    AuthenticationFailed,
    GenerateResult,
    HealthStatus,
    ServerUnreachable,
    SGLangClient,
    SGLangError,
)
from specmon.serving.metrics import MetricsSnapshot, delta
from specmon.serving.spec import SettingDifference, SpecSettings, spec_settings
from specmon.text import printable

CheckLevel = Literal["ok", "info", "warn", "fail"]

PROMPT = "Explain in a few sentences how a lighthouse keeper spent a long winter night."
MAX_NEW_TOKENS = 64
EXIT_OK, EXIT_FAILED, EXIT_UNREACHABLE = 0, 1, 2
# server_info, /metrics twice and one generation, all together: a server that drips bytes cannot hold check.
CALL_TIMEOUT_S = 120.0
HEALTH_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 10.0
"""Each whole answer but the health check's and the generation's (server_info, metrics)."""
GENERATE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class CheckItem:
    """One line of the check: what was checked, how it went, and the detail."""

    name: str
    level: CheckLevel
    detail: str


@dataclass
class CheckReport:
    """Everything `specmon check` found out about one server."""

    url: str
    items: list[CheckItem] = field(default_factory=list)
    health: HealthStatus | None = None
    spec: SpecSettings | None = None
    generation: GenerateResult | None = None
    metrics_accept_length: float | None = None
    unreachable: bool = False

    def add(self, name: str, level: CheckLevel, detail: str) -> None:
        self.items.append(CheckItem(name, level, detail))

    @property
    def exit_code(self) -> int:
        if self.unreachable:
            return EXIT_UNREACHABLE
        if any(item.level in ("warn", "fail") for item in self.items):
            return EXIT_FAILED
        return EXIT_OK

    def summary(self) -> tuple[str, bool]:
        """One line for the app, and whether all is well: the generation's figures, or the first problem."""
        problem = next((i for i in self.items if i.level in ("warn", "fail")), None)
        if problem is not None:
            return f"sanity check: {problem.name}: {problem.detail}", False
        result = self.generation
        if result is None:
            return "sanity check: no generation ran", False
        parts = [f"sanity check: {result.completion_tokens} tokens"]
        if result.tokens_per_s is not None:
            parts.append(f"{result.tokens_per_s:.1f} tok/s")
        if result.accept_length is not None:
            parts.append(f"accept length {result.accept_length:.2f}")
        return " · ".join(parts), True

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "ok": self.exit_code == EXIT_OK,
            "exit_code": self.exit_code,
            "checks": [{"name": i.name, "level": i.level, "detail": i.detail} for i in self.items],
            "health": None
            if self.health is None
            else {
                "state": self.health.state,
                "status_code": self.health.status_code,
                "error": self.health.error,
                "latency_s": self.health.latency_s,
            },
            "spec": None if self.spec is None else self.spec.to_json(),
            "generation": None if self.generation is None else self.generation.to_json(),
            "metrics_accept_length": self.metrics_accept_length,
        }


MAX_LAUNCH_COMMAND = 64 * 1024


def not_as_asked(spec: SpecSettings, server_info: Mapping[str, Any],
                 asked: Mapping[str, Any] | None) -> tuple[str | None, list[SettingDifference]]:
    """The speculative settings the server runs otherwise than asked, and who asked: "the preset" (its args,
    when known), else "its launch command" (/server_info's `launch_command`, 0.5.23+); (None, []) when nobody's
    ask is known or speculation is off."""
    if not spec.enabled:
        return None, []
    if asked is not None:
        return "the preset", spec.requested_vs_effective(asked)
    launch = server_info.get("launch_command")
    if not isinstance(launch, str) or not launch or len(launch) > MAX_LAUNCH_COMMAND:
        return None, []
    try:
        words = shlex.split(launch)
    except ValueError:
        return None, []
    return "its launch command", spec.requested_vs_effective(words)


def why_adjusted(difference: SettingDifference, spec: SpecSettings) -> str:
    """Why SGLang runs a setting otherwise than asked, where its rules say (topk 1: num_steps + 1 draft tokens)."""
    if (difference.name == "speculative_num_draft_tokens" and spec.eagle_topk == 1 and spec.num_steps is not None
            and difference.effective == spec.num_steps + 1):
        return f"with topk 1 SGLang runs num_steps + 1 = {difference.effective} draft tokens"
    return "SGLang adjusted it at launch"


def _settings_line(spec: SpecSettings) -> str:
    return (
        f"{spec.algorithm}, draft {spec.draft_model_path or '(in the target checkpoint)'}, "
        f"steps {spec.num_steps}, topk {spec.eagle_topk}, draft tokens {spec.num_draft_tokens}"
    )


def _check_settings(report: CheckReport, info: dict[str, Any], asked: dict[str, Any] | None = None) -> None:
    spec = spec_settings(info)
    report.spec = spec
    report.add(
        "server",
        "ok",
        f"SGLang {spec.version or '?'}, model {spec.model_path or '?'}, "
        f"max_total_num_tokens {spec.max_total_num_tokens if spec.max_total_num_tokens is not None else '?'}",
    )
    for absurd in spec.absurd:
        report.add("server_info", "fail", absurd)
    if not spec.enabled:
        report.add("speculation", "info", "off (no --speculative-algorithm)")
        return
    report.add("speculation", "ok", _settings_line(spec))
    who, differences = not_as_asked(spec, info, asked)
    if who == "the preset":
        for difference in differences:
            report.add("preset", "warn", f"{difference}: the server does not run what the preset asks")
    elif who is not None:
        for difference in differences:
            report.add("rewritten", "info", f"{difference} (SGLang adjusted the launch flag)")
    elif spec.topk1_rewrite_possible:
        report.add(
            "topk 1",
            "info",
            f"SGLang runs num_draft_tokens = num_steps + 1 = {spec.num_draft_tokens} with topk 1, "
            "whatever --speculative-num-draft-tokens asked",
        )


def _acceptance_hint(version: str | None) -> str:
    hint = "the draft is (almost) never right: a wrong draft for this target, or a draft whose weights did not load"
    if version and _is_silent_skip_version(version):
        hint += (
            f"; SGLang {version} silently skips EAGLE3 draft keys named layers.0.* (it expects midlayer.*), "
            "so check the draft checkpoint's key names"
        )
    return hint


def _is_silent_skip_version(version: str) -> bool:
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    return match is not None and (0, 4, 10) <= tuple(map(int, match.groups())) <= (0, 5, 9)


def _check_generation(report: CheckReport, result: GenerateResult) -> None:
    report.generation = result
    tok_s = result.tokens_per_s
    report.add(
        "generation",
        "ok" if result.completion_tokens > 0 else "fail",
        f"{result.completion_tokens} tokens in {result.meta_info.get('e2e_latency') or result.elapsed_s:.2f} s"
        + (f", {tok_s:.1f} tok/s" if tok_s else ""),
    )
    spec = report.spec
    if spec is None or not spec.enabled:
        return
    accept = result.accept_length
    if accept is not None and not (math.isfinite(accept) and accept >= 1.0):
        report.add("acceptance", "fail", f"{accept:.2f} tokens per verify step is impossible (at least 1 per step)")
    elif accept is None:
        report.add("acceptance", "warn", "speculation is on but the answer has no spec_verify_ct (no verify step ran)")
    elif accept < MIN_USEFUL_ACCEPT_LENGTH:
        report.add("acceptance", "warn", f"{accept:.2f} tokens per verify step: {_acceptance_hint(spec.version)}")
    else:
        report.add(
            "acceptance", "ok", f"{accept:.2f} tokens per verify step ({result.completion_tokens}/{result.spec_verify_ct})"
        )


async def _read_metrics(client: SGLangClient, report: CheckReport) -> MetricsSnapshot | None:
    try:
        return await client.metrics()
    except AuthenticationFailed:
        raise
    except SGLangError as exc:
        report.add("metrics", "warn", f"not read: {exc}")
        return None


async def run_check(
    url: str,
    api_key: str | None = None,
    max_new_tokens: int = MAX_NEW_TOKENS,
    asked: dict[str, Any] | None = None,
) -> CheckReport:
    """Run every check against the server at `url` and return the report (never raises for server faults).

    `asked` is the SGLang arguments of the preset the server was launched with (a `Preset.args` dict): every
    speculative setting the server runs differently is reported next to the preset's value.
    """
    async with SGLangClient(url, api_key=api_key, timeout=READ_TIMEOUT_S) as client:
        report = CheckReport(url=client.base_url)
        health = await client.health(timeout=HEALTH_TIMEOUT_S)
        report.health = health
        if health.state == "unreachable":
            report.unreachable = True
            report.add("health", "fail", f"nothing answers at {client.base_url} (not started, or still loading)")
            return report
        if not health.ok:
            detail = "HTTP 503: still warming up" if health.state == "starting" else health.error or "?"
            report.add("health", "fail", detail)
            return report
        latency_s = health.latency_s  # an answer's is measured: None only without one
        detail = "HTTP 200" if latency_s is None else f"HTTP 200 in {latency_s * 1000:.0f} ms"
        if latency_s is not None and latency_s >= 0.5:  # seen on a real 0.5.16: about 1 s, the time of the generation it runs
            detail += " (SGLang's /health runs a one-token generation)"
        report.add("health", "ok", detail)
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                _check_settings(report, await client.server_info(), asked)
                before = await _read_metrics(client, report)
                _check_generation(report, await client.generate(
                    PROMPT, max_new_tokens, temperature=0.0, ignore_eos=True, timeout=GENERATE_TIMEOUT_S))
                after = await _read_metrics(client, report) if before is not None else None
        except AuthenticationFailed:
            report.add("api key", "fail", "the server rejected the API key (set SPECMON_API_KEY or --api-key-file)")
            return report
        except SGLangError as exc:
            report.unreachable = isinstance(exc, ServerUnreachable)
            report.add("request", "fail", str(exc))
            return report
        except TimeoutError:
            report.add("request", "fail", f"the server did not answer within {CALL_TIMEOUT_S:g} s")
            return report
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:  # a shape nobody foresaw
            report.add("request", "fail", f"the server's answer cannot be read: {type(exc).__name__}: {exc}"[:300])
            return report
        if before is not None and after is not None and report.spec and report.spec.enabled:
            tau = delta(before, after).accept_length
            report.metrics_accept_length = tau if tau is not None and math.isfinite(tau) and tau > 0 else None
            if report.metrics_accept_length is not None:
                report.add(
                    "metrics",
                    "info",
                    f"Δgeneration_tokens / Δspec_verify_calls = {report.metrics_accept_length:.2f} "
                    "(includes any other traffic)",
                )
        return report


_MARKS = {"ok": "[ ok ]", "info": "[info]", "warn": "[WARN]", "fail": "[FAIL]"}


def _verdict(report: CheckReport) -> str:
    """The last line: what the checks add up to, naming what failed (never a vague "something is wrong")."""
    if report.exit_code == EXIT_UNREACHABLE:
        return f"server unreachable at {report.url}: nothing was checked beyond that"
    bad = [i.name for i in report.items if i.level in ("warn", "fail")]
    if not bad:
        return "all good"
    return f"{len(bad)} check(s) need attention: {', '.join(dict.fromkeys(bad))} (see the marked lines above)"


def format_report(report: CheckReport) -> str:
    """The human-readable report."""
    width = max((len(i.name) for i in report.items), default=0)
    lines = [f"specmon check {report.url}"]
    lines += [f"  {_MARKS[i.level]} {i.name:<{width}}  {i.detail}" for i in report.items]
    lines.append(_verdict(report))
    return printable("\n".join(lines), newlines=True)


