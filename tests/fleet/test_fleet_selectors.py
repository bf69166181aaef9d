"""The command-line values that become PromQL: `--selector`, `--gpu-selector` (a strict parser of the matcher
grammar, checked against Prometheus' own: everything it accepts, promtool accepts), `--server-label` and
`--host-label` (a whole label name: `$` also matches before a final newline, so every validating regex in
specmon anchors with `\\Z` or fullmatch), and the text specmon quotes into PromQL itself (server names in
regular expressions and strings), asked of a real Prometheus."""

from __future__ import annotations

import ast
import contextlib
import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specmon.cli import main
from specmon.fleet.matchers import MatcherError, canonical, parse_matchers, promql_string, regex_literal
from specmon.fleet.promql import FleetQueries
from tests.support.prometheus import promtool_binary

ROOT = Path(__file__).parents[2]


def promtool_refuses(expressions: list[str], tmp_path: Path) -> dict[int, str]:
    """Which of `expressions` promtool refuses (as recording rules, one file), by index, with its reason."""
    refused: dict[int, str] = {}

    def check(indices: list[int]) -> None:
        rules = [{"record": f"r{i}", "expr": expressions[i]} for i in indices]
        path = tmp_path / "rules.yml"
        path.write_text(yaml.safe_dump({"groups": [{"name": "g", "rules": rules}]}, allow_unicode=True))
        done = subprocess.run([promtool_binary(), "check", "rules", str(path)], capture_output=True, text=True,
                              timeout=120)
        if done.returncode == 0:
            return
        if len(indices) == 1:
            refused[indices[0]] = done.stderr.strip()[-300:]
            return
        check(indices[: len(indices) // 2])
        check(indices[len(indices) // 2:])

    if expressions:
        check(list(range(len(expressions))))
    return refused


# ----- the selector parser

@pytest.mark.parametrize(("text", "written"), [
    ('job="sglang"', 'job="sglang"'),
    ('job="sglang",', 'job="sglang"'),
    (' job = "a" ,\tenv!~"prod.*" ', 'job="a",env!~"prod.*"'),
    ("job='a\\'b'", 'job="a\'b"'),
    ("job=`a\\b`", 'job="a\\\\b"'),
    ('job="\\u00e9\\x41\\101\\t"', 'job="éAA\\u0009"'),
    ('job="a}b{c#d"', 'job="a}b{c#d"'),
    ("", ""),
])
def test_matchers_are_read_and_written_back_in_one_form(text, written):
    assert canonical(text) == written


@pytest.mark.parametrize(("text", "said"), [
    ('job="a"} or vector(1) {', "expected ','"),
    ('job="a" # comment', "expected ','"),
    ('job="a\\"', "without its closing quote"),
    ('job="a\\/"', "unknown escape"),
    ("job=\"a\\'\"", "unknown escape"),
    ('job="\\xff"', "above 0x7f"),
    ('job="\\ud800"', "not a Unicode character"),
    ('job="a\nb"', "control character"),
    ('job="a"\n', "expected ','"),
    ('job="a",,env="b"', "expected a label name"),
    ('1job="a"', "expected a label name"),
    ('job=="a"', "expected a quoted value"),
    ('__name__="up"', "__name__"),
    ('job=~"("', "regular expression"),
    ('job=~"a{1001}"', "over 1000"),
    ('job=~"(a{100}){11}"', "over 1000"),
    ('job=~"a**"', "repetition"),
    ('job=~"a*+"', "repetition"),
    ('job=~"\\\\1"', "escape"),
    ('job=~"\\\\Z"', "escape"),
    ('job=~"(?=a)"', "(?:"),
    ('job=~"[[:alpha:]]"', "inside a class"),
    ("job=\"\udcff\"", "not valid Unicode"),
    ('job="a"' + ',x="y"' * 1000, "longer than"),
])
def test_what_the_parser_cannot_read_is_refused_with_the_reason(text, said):
    with pytest.raises(MatcherError, match=re.escape(said)):
        parse_matchers(text)


def _random_selector(rng: random.Random) -> str:
    names = ["job", "instance", "_", "a1_B", "__name__", "1a", "le", "and", "on", "x-y", "é", ""]
    ops = ["=", "!=", "=~", "!~", "==", "~", "=!"]
    pieces = list("abcXYZ019 .*+?()[]{}|^$\\\"'`,#-_:/\t\né\ufffd\u2028") + [
        "\\n", "\\t", "\\\\", '\\"', "\\'", "\\x41", "\\xff", "\\101", "\\377", "\\u00e9", "\\ud800", "\\U0010ffff",
        "\\U00110000", "\\d", "\\s", "\\w", "\\.", "\\1", "\\Z", "\\z", "\\b", "(?:", "(?i)", "(?=", "{2}", "{1001}",
        "{2,1}", "{,3}", "[a-z]", "[^a]", "[]a]", "[[:alpha:]]", "*?", "**", "+?", "??", "(", ")", "){10}", "){100}",
        "{100}", "{10,}", "){3,40}"]

    def value() -> str:
        quote = rng.choice(['"', '"', '"', "'", "`"])
        body = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
        return quote + body + (quote if rng.random() < 0.9 else "")

    matchers = [rng.choice(names) + rng.choice(["", " ", "\t"]) + rng.choice(ops) + rng.choice(["", " "]) + value()
                for _ in range(rng.randint(0, 3))]
    text = rng.choice([",", ", ", ",", " ,", ",,", " "]).join(matchers)
    return text + (rng.choice([",", " # c", "}", "{", "\n"]) if rng.random() < 0.1 else "")


def _random_regex(rng: random.Random, depth: int = 0) -> str:
    """A regular expression made of RE2's and Python's pieces, most of them valid, some near-misses."""
    atoms = ["a", "Z", "9", ".", "\\d", "\\w", "\\S", "\\.", "\\-", "\\/", "[a-z]", "[^0-9_]", "[\\d.]", "é", " ",
             "\\1", "\\b", "\\pL", "\\z", "[[:digit:]]", "(?i)", "(?P<n>a)", "{", "}", "\\", "[z-a]", "^", "$"]
    quantifiers = ["", "", "", "*", "+", "?", "*?", "+?", "??", "{2}", "{1,3}", "{0,}", "{12}", "{40,60}", "{999}",
                   "{1001}", "*+", "?*", "{,4}"]
    parts = []
    for _ in range(rng.randint(1, 4)):
        if depth < 3 and rng.random() < 0.3:
            atom = rng.choice(["(", "(?:"]) + _random_regex(rng, depth + 1) + ")"
        else:
            atom = rng.choice(atoms[:14] if rng.random() < 0.85 else atoms)
        parts.append(atom + rng.choice(quantifiers))
    return rng.choice(["", "", "|"]).join(parts) if rng.random() < 0.8 else "|".join(parts)


def test_everything_the_parser_accepts_promtool_accepts(tmp_path):
    """Thousands of selectors made from PromQL's pieces and near-misses (escapes Go has and has not, RE2's
    syntax and Python's, nested repeat counts, braces, comments, quotes of each kind): each one the parser
    accepts, written back as specmon writes it, promtool accepts in every place the fleet puts a selector."""
    rng = random.Random(20240615)
    texts = [_random_selector(rng) for _ in range(4000)]
    for _ in range(3000):
        pattern = _random_regex(rng)
        texts.append(f"job{rng.choice(['=~', '!~'])}" + (f"`{pattern}`" if rng.random() < 0.3 else
                                                         promql_string(pattern)))
    accepted = []
    for text in texts:
        with contextlib.suppress(MatcherError):
            accepted.append((text, canonical(text)))
    # the test means something: many accepted, among them many regular expressions, and many refused
    assert len(accepted) > 1500 and len(texts) - len(accepted) > 2000
    assert sum("=~" in written or "!~" in written for _, written in accepted) > 800
    expressions = [f"up{{{written}}}" for _, written in accepted]
    expressions += [FleetQueries(gpu_selector=written).dcgm_framebuffer() for _, written in accepted[:300]]
    refused = promtool_refuses(expressions, tmp_path)
    assert not refused, [(accepted[i % len(accepted)], why) for i, why in list(refused.items())[:5]]


# ----- the command line

@pytest.mark.parametrize("action", ["rules", "dashboard"])
@pytest.mark.parametrize("flags", [
    ["--server-label", "instance\n"], ["--host-label", "node\n"], ["--server-label", "a-b"],
    ["--selector", 'job="a\\"'], ["--selector", 'job="sglang" # the prod ones'], ["--gpu-selector", 'job="dcgm"}'],
    ["--selector", "job=~\"(?<=a)\""],
])
def test_rules_and_dashboard_refuse_values_that_build_broken_promql(capsys, action, flags):
    assert main(["fleet", action, *flags]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err and flags[0] in captured.err


@pytest.mark.parametrize("flags", [
    [], ["--selector", "job=~'sglang|vllm' , env!=\"dev\",", "--server-label", "server", "--host-label", "node"],
    ["--selector", 'job="a b \\"c\\" \\\\ é", cluster=~"eu-.*"', "--gpu-selector", "job=`dcgm`,gpu!=\"7\""],
    ["--server-label", "_", "--window", "0.5"], ["--server-label", "le"], ["--server-label", "dp_rank"],
    ["--window", "604800"],
])
def test_rules_accepted_from_the_command_line_are_rules_promtool_accepts(tmp_path, flags):
    rules = subprocess.run([sys.executable, "-m", "specmon", "fleet", "rules", *flags], capture_output=True,
                           text=True, timeout=60)
    assert rules.returncode == 0, rules.stderr
    path = tmp_path / "rules.yml"
    path.write_text(rules.stdout)
    done = subprocess.run([promtool_binary(), "check", "rules", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr + done.stdout
    dashboard = subprocess.run([sys.executable, "-m", "specmon", "fleet", "dashboard", *flags], capture_output=True,
                               text=True, timeout=60)
    assert dashboard.returncode == 0, dashboard.stderr
    targets = [target["expr"] for panel in json.loads(dashboard.stdout)["panels"]
               for target in panel.get("targets", ())]
    assert targets and not promtool_refuses(targets, tmp_path)


# ----- text specmon quotes into PromQL

NAMES = ["a b", 'q"uote', "back\\slash", "dot.star*+?()[]{}|^$", "é☃", "tab\there", "new\nline", "\ufffd",
         "del\x7fete", "\\x41"]


def test_any_text_is_a_valid_promql_string_and_regular_expression_of_itself(tmp_path):
    expressions = [f'up{{instance={promql_string(name)}, job=~{promql_string(regex_literal(name))}}}'
                   for name in NAMES]
    expressions.append(f"up{{instance=~{promql_string('|'.join(regex_literal(name) for name in NAMES))}}}")
    assert not promtool_refuses(expressions, tmp_path)


# ----- `$` before a final newline (the class, everywhere in specmon)

def test_validators_refuse_a_value_with_a_final_newline():
    from specmon.emulator.metrics import extra_labels_problem
    from specmon.fleet.matchers import valid_label_name
    from specmon.hinting_parser import _NEGATIVE_NUMBER
    from specmon.launch.schema import InvalidKey, check_schema
    from specmon.preflight.locate import _PYTHON_NAME

    assert valid_label_name("instance") and not valid_label_name("instance\n")
    assert _NEGATIVE_NUMBER.match("-5") and not _NEGATIVE_NUMBER.match("-5\n")
    assert _PYTHON_NAME.match("python3.11") and not _PYTHON_NAME.match("python3\n")
    assert extra_labels_problem({"node\n": "a"}) and not extra_labels_problem({"node": "a"})
    for doc in ({"name": "eagle3\n"}, {"server": {"env": {"CUDA_VISIBLE_DEVICES\n": "0"}}},
                {"server": {"args": {"tp-size\n": 2}}}):
        with pytest.raises(InvalidKey):
            check_schema(doc)


SEARCHES = {
    # patterns that search text already split into lines (a log line, a message, a class name, a TOML line):
    # `$` is the end of that text, no final newline is in it
    ("specmon/logs/causes.py", r"^\s*what\(\)"), ("specmon/logs/causes.py", r"^Fatal Python error"),
    ("specmon/logs/causes.py", r"((?:[A-Za-z_]\w*\.)*"), ("specmon/logs/patterns.py", r"((?:[A-Za-z_]\w*\.)*"),
    ("specmon/logs/patterns.py", r"(?:usage: )?"), ("specmon/logs/patterns.py", r"^(?:\S+: )?(?:line"),
    ("specmon/logs/patterns.py", r"CUDA (?:error"), ("specmon/sglang/captures.py", r"For(CausalLM"),
    ("specmon/launch/presets.py", r"\s*\(at (?:line"), ("specmon/launch/schema.py", r"^\[\[?([^\]]*)"),
    # a flag name that may hold a secret: matching "password\n" too only hides more
    ("specmon/redact.py", r"(?:^|-)(?:api-?key"),
}
_END_ANCHOR = re.compile(r"(?<!\\)\$(?=\Z|\||\))")


def test_no_regex_in_specmon_anchors_a_check_with_a_dollar():
    """Every regex literal that ends (or ends an alternative) with `$` is one of the known searches above: a new
    check must anchor with `\\Z` or use fullmatch, or say here why `$` is right."""
    found = set()
    for folder in ("specmon", "tui", "widgets"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                        and node.args and isinstance(node.args[0], ast.Constant)
                        and isinstance(node.args[0].value, str) and _END_ANCHOR.search(node.args[0].value)):
                    pattern = node.args[0].value
                    where = str(path.relative_to(ROOT))
                    if not any(where == known and pattern.startswith(start) for known, start in SEARCHES):
                        found.add((where, node.lineno, pattern))
    assert found == set()
