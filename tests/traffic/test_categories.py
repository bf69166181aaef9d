"""Prompt categories by the user's rules: the file's rules in order (text, key equals, key match, default), records
without text said as "(no text)" with the flag that keeps it, every bad file refused in one line with exit 2 (a
pattern that can take super-linear time too), and the comparison with production by one categorisation on both
sides, which says whether the records come from the configuration benchmarked."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from specmon.bench.model import AcceptFigures, BenchResult, RequestResult, ServerFacts, Speculative, Summary
from specmon.bench.prompts import Prompt, text_hash
from specmon.bench.stats import ci95
from specmon.bench.summary import _token_weighted
from specmon.serving.client import OWN_RID_PREFIX
from specmon.traffic import categories
from specmon.traffic.categories import MAX_FILE_BYTES, MAX_RULES, NO_TEXT, CategoriesError, read
from specmon.traffic.production import check_against_production, sample_prompts

RULES = """\
default = "prose"

[[category]]
name = "code"
match = '```'

[[category]]
name = "support"
key = "custom_labels.team"
equals = "support"

[[category]]
name = "beta"
key = "custom_labels.route"
match = '^beta-'
"""
FENCED = "Fix this:\n```python\ndef f(x):\n    return x\n```\n"


def record(rid: str, completion: int, verify: int, *, histogram: list[int] | None = None, **params) -> str:
    meta = {"id": rid, "prompt_tokens": 100, "completion_tokens": completion, "spec_verify_ct": verify}
    if histogram is not None:
        meta["spec_accept_histogram"] = histogram
    return json.dumps({"request_parameters": json.dumps({"rid": rid, **params}), **meta}) + "\n"


def specmon(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specmon", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


@pytest.fixture
def rules(tmp_path):
    path = tmp_path / "categories.toml"
    path.write_text(RULES)
    return str(path)


@pytest.fixture
def export(tmp_path):
    """Production: code (τ 2.5), support prose (τ 2.0), beta-routed prose (τ 1.25), other prose (τ 1.6), and
    records without text (τ 2.0): the first rule needs the text, so their category is not known."""
    folder = tmp_path / "export"
    folder.mkdir()
    lines = []
    for i in range(10):
        lines.append(record(f"c{i}", 100, 40, text=f"{FENCED} {i}", custom_labels={"team": "support"}))
        lines.append(record(f"s{i}", 100, 50, text=f"Where is my order {i}?", custom_labels={"team": "support"}))
        lines.append(record(f"b{i}", 100, 80, text=f"Hello {i}", custom_labels={"route": f"beta-{i}"}))
        lines.append(record(f"p{i}", 160, 100, text=f"A poem about rain {i}"))
        lines.append(record(f"n{i}", 100, 50, input_ids=[1, 2, 3], custom_labels={"team": "support"}))
    (folder / "sglang-request-metrics-20261201_10.log").write_text("".join(lines))
    return str(folder)


def test_each_request_gets_the_first_rule_that_matches(export, rules):
    run = specmon("traffic", export, "--categories", rules, "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["categories"] == {"source": "your rules", "file": rules, "names": ["code", "support", "beta", "prose"]}
    rows = {c["value"]: c for c in result["classes"] if c["by"] == "prompt category"}
    assert {v: (r["requests"], r["accept_length"]) for v, r in rows.items()} == {
        "code": (10, 100 / 40), "support": (10, 100 / 50), "beta": (10, 100 / 80), "prose": (10, 160 / 100),
        NO_TEXT: (10, 100 / 50)}
    assert rows["prose"]["share"] == pytest.approx(1600 / 5600)

    text = specmon("traffic", export, "--categories", rules)
    assert text.returncode == 0 and "by prompt category" in text.stdout
    assert "10 records hold no prompt text for your rules" in text.stdout and "--log-requests-level 3" in text.stdout
    assert max(len(line) for line in text.stdout.splitlines()) <= 80
    without = json.loads(specmon("traffic", export, "--json", env={"XDG_CONFIG_HOME": "/nonexistent"}).stdout)
    assert without["categories"] is None and not [c for c in without["classes"] if c["by"] == "prompt category"]


def test_the_config_directory_holds_the_default_rules(export, rules, tmp_path):
    config = tmp_path / "config"
    (config / "specmon").mkdir(parents=True)
    (config / "specmon" / "categories.toml").write_text(RULES)
    result = json.loads(specmon("traffic", export, "--json", env={"XDG_CONFIG_HOME": str(config)}).stdout)
    assert result["categories"]["file"] == str(config / "specmon" / "categories.toml")
    (config / "specmon" / "categories.toml").write_text("[[category]]\nname = 'x'\n")  # a bad default: said too
    run = specmon("traffic", export, env={"XDG_CONFIG_HOME": str(config)})
    assert run.returncode == 2 and "categories.toml" in run.stderr and len(run.stderr.splitlines()) == 1


BAD = {
    "not TOML": ("[[category]\nname = 'x'", "not a TOML file"),
    "no rule": ("default = 'x'\n", "'category' is missing"),
    "empty": ("category = []\n", "'category' must be 1 to"),
    "unknown key": ("[[category]]\nname = 'x'\nmatch = 'a'\nregex = 'b'\n", "unknown key 'regex'"),
    "neither match nor key": ("[[category]]\nname = 'x'\n", "give match = 'REGEX'"),
    "equals without key": ("[[category]]\nname = 'x'\nequals = 'a'\n", "equals goes with key"),
    "key without test": ("[[category]]\nname = 'x'\nkey = 'a.b'\n", "takes one of equals or match"),
    "bad key": ("[[category]]\nname = 'x'\nkey = 'a..b'\nequals = 'c'\n", "a key of request_parameters"),
    "not a regex": ("[[category]]\nname = 'x'\nmatch = '(a'\n", "is not a regular expression"),
    "nested repetition": ("[[category]]\nname = 'x'\nmatch = '(a+)+b'\n", "a repetition inside a repetition"),
    "alternation repeated": ("[[category]]\nname = 'x'\nmatch = '(ab|a)*c'\n", "an alternation inside a repetition"),
    "backreference": ("[[category]]\nname = 'x'\nmatch = '(a)\\1'\n", "a backreference"),
    "quadratic": ("[[category]]\nname = 'x'\nmatch = 'a.*b'\n", "on a probe text"),
    "scans every line": ("[[category]]\nname = 'x'\nmatch = '(?m)^\\s*def\\b'\n", "^[ \\t]* does not"),
    "too many rules": ("".join(f"[[category]]\nname = 'r{i}'\nmatch = 'a{i}'\n" for i in range(MAX_RULES + 1)),
                       f"1 to {MAX_RULES} [[category]] rules"),
    "too big": ("# " + "x" * MAX_FILE_BYTES, "more than a categories file may have"),
    "hostile name": ("[[category]]\nname = \"\\u001b[31mred\"\nmatch = 'a'\n", "must be a name"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_a_bad_file_is_refused_in_one_line(tmp_path, export, name):
    text, said = BAD[name]
    path = tmp_path / "bad.toml"
    path.write_text(text)
    run = specmon("traffic", export, "--categories", str(path))
    assert run.returncode == 2 and not run.stdout
    (line,) = run.stderr.splitlines()
    assert said in line and str(path) in line and "Traceback" not in line and "\x1b" not in line


def test_a_missing_file_and_a_fifo_are_refused(tmp_path, export):
    run = specmon("traffic", export, "--categories", str(tmp_path / "none.toml"))
    assert run.returncode == 2 and "No such file" in run.stderr
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(CategoriesError, match="not a categories file"):
        read(str(tmp_path / "fifo"))


def test_a_text_rule_reads_only_the_start_of_a_long_prompt(rules):
    rules_read = read(rules)
    late = "x" * categories.MATCH_CHARS + "```"
    assert rules_read.of(late, None, None) == "prose" and rules_read.of(late[-100:], None, None) == "code"


def _run(requests: list[RequestResult], spec: Speculative | None = None, run_id: str = "run1") -> BenchResult:
    pairs = [(r.completion_tokens, r.spec_verify_ct) for r in requests]
    accept = AcceptFigures(token_weighted=_token_weighted(pairs), ci95=ci95(pairs, _token_weighted))
    return BenchResult(run_id=run_id, preset="p", url="u", started_at=0.0, requests=requests,
                       summary=Summary(accept_length=accept), server=ServerFacts(speculative=spec or Speculative()))


def test_both_sides_are_categorised_by_the_same_rules(export, rules):
    cats = read(rules)
    prompts = [Prompt(id=f"q{i}", text=f"Tell me about {i}", category="code" if i < 5 else "chat") for i in range(20)]
    requests = [RequestResult(index=i, prompt_id=p.id, ok=True, completion_tokens=100, spec_verify_ct=40,
                              prompt_tokens=50, category=p.category, prompt_hash=p.prompt_hash)
                for i, p in enumerate(prompts)]
    check = check_against_production(_run(requests), [export], prompts, cats)
    # the prompt's own category where it names one of the rules' ("code"); the rules on its text otherwise
    assert check.benchmark_shares == {"prose": 0.75, "code": 0.25}
    assert check.production_shares == {name: 0.2 for name in ("code", "support", "beta", "prose", NO_TEXT)}
    assert check.categories == f"your rules ({rules})"
    assert "its prompts are 75% prose, production's 20%" in check.text
    heuristic = check_against_production(_run(requests), [export], prompts)
    assert heuristic.categories == "heuristic" and heuristic.production_shares["code"] == 0.2
    assert heuristic.benchmark_shares == {"other": 0.75, "code": 0.25}  # "code" is one of the heuristic's too

    sample = sample_prompts([export], 10, categories=cats)
    # the records with token ids only are sampled too, in the category the rules give them: not known, as production's
    assert {p.category for p in sample.prompts} == {"code", "support", "beta", "prose", NO_TEXT}
    assert all(p.input_ids == (1, 2, 3) for p in sample.prompts if p.category == NO_TEXT)
    assert "categories: your rules" in sample.describe()


def test_the_check_says_whether_the_records_are_the_benchmarked_servers(tmp_path, export):
    prompt = Prompt(id="q", text="Tell me a story.")
    requests = [RequestResult(index=i, prompt_id="q", ok=True, completion_tokens=100, spec_verify_ct=40 + i % 3,
                              prompt_tokens=50, prompt_hash=prompt.prompt_hash) for i in range(20)]
    chain3 = Speculative(algorithm="EAGLE3", num_steps=3, eagle_topk=1, num_draft_tokens=4)
    unknown = check_against_production(_run(requests, chain3), [export], [prompt])
    assert unknown.configuration == "unknown" and "cannot be tied to the configuration benchmarked" in unknown.text

    own = tmp_path / "own"
    own.mkdir()
    ours = [record(f"{OWN_RID_PREFIX}run1-{i}", 100, 40, text="Tell me a story.") for i in range(20)]
    production = [record(f"r{i}", 100, 40, histogram=[10, 10, 10, 10], text=FENCED) for i in range(10)]
    (own / "sglang-request-metrics-20261201_10.log").write_text("".join(ours + production))
    same = check_against_production(_run(requests, chain3), [str(own)], [prompt])
    assert same.configuration == "same" and same.requests == 10 and "20 of this run's requests" in (
        same.configuration_note)
    assert "tied" not in same.text and "another configuration" not in same.text

    longer = [record(f"x{i}", 100, 40, histogram=[10, 10, 10, 5, 5], text=FENCED) for i in range(10)]
    (own / "sglang-request-metrics-20261201_11.log").write_text("".join(longer))
    differs = check_against_production(_run(requests, chain3), [str(own)], [prompt])
    assert differs.configuration == "differs"
    assert "production runs another configuration (a production step accepted 4 drafts, the server benchmarked " \
           "drafts at most 3)" in differs.text


def test_prompts_of_a_stored_run_are_read_again_only_when_unchanged(tmp_path, export, rules):
    prompts_file = tmp_path / "prompts.jsonl"
    prompts_file.write_text("".join(json.dumps({"id": f"q{i}", "prompt": FENCED + str(i)}) + "\n" for i in range(10)))
    requests = [RequestResult(index=i, prompt_id=f"q{i}", ok=True, completion_tokens=100, spec_verify_ct=40,
                              prompt_tokens=50, prompt_hash=text_hash(FENCED + str(i))) for i in range(10)]
    run = _run(requests)
    run.settings = type(run.settings)(prompts=str(prompts_file))
    assert check_against_production(run, [export], None, read(rules)).benchmark_shares == {"code": 1.0}
    prompts_file.write_text("".join(json.dumps({"id": f"q{i}", "prompt": "changed"}) + "\n" for i in range(10)))
    assert check_against_production(run, [export], None, read(rules)).benchmark_shares == {NO_TEXT: 1.0}


def finish_line(rid: str, completion: int, verify: int) -> str:
    return (f"[2026-12-01 10:00:00] Finish: obj=GenerateReqInput(text='Tell me a story.', rid='{rid}'), "
            f"out={{'meta_info': {{'id': '{rid}', 'prompt_tokens': 5, 'completion_tokens': {completion}, "
            f"'spec_verify_ct': {verify}}}}}\n")


def launch_line(steps: int, topk: int, draft: int, algorithm: str = "EAGLE3", dict_form: bool = False) -> str:
    if dict_form:  # 0.5.23 logs its arguments as a dict
        return (f"[2026-12-01 09:00:00] server_args={{'model_path': '/m', 'speculative_algorithm': '{algorithm}', "
                f"'speculative_num_steps': {steps}, 'speculative_eagle_topk': {topk}, "
                f"'speculative_num_draft_tokens': {draft}, 'speculative_num_steps_extra': 9}}\n")
    return (f"[2026-12-01 09:00:00] server_args=ServerArgs(model_path='/m', speculative_algorithm='{algorithm}', "
            f"speculative_draft_model_path='/d', speculative_num_steps={steps}, speculative_eagle_topk={topk}, "
            f"speculative_num_draft_tokens={draft}, speculative_dflash_block_size=None)\n")


@pytest.mark.parametrize("dict_form", [False, True])
def test_a_server_logs_launch_lines_say_which_configuration_wrote_its_records(tmp_path, dict_form):
    """A request log in the server's own log (text `--log-requests` to stdout) follows each launch's `server_args`
    line: a launch of another configuration shows the records differ, even where no step accepted more drafts than
    the benchmarked server drafts; launches of the benchmarked configuration alone tie them to it."""
    prompt = Prompt(id="q", text="Tell me a story.")
    requests = [RequestResult(index=i, prompt_id="q", ok=True, completion_tokens=100, spec_verify_ct=40 + i % 3,
                              prompt_tokens=50, prompt_hash=prompt.prompt_hash) for i in range(20)]
    chain3 = Speculative(algorithm="EAGLE3", num_steps=3, eagle_topk=1, num_draft_tokens=4)
    records = "".join(finish_line(f"r{i}", 100, 60) for i in range(10))
    log = tmp_path / "server.log"

    log.write_text(launch_line(1, 1, 2, dict_form=dict_form) + records)
    differs = check_against_production(_run(requests, chain3), [str(log)], [prompt])
    assert differs.configuration == "differs" and differs.requests == 10
    assert differs.configuration_note == ("1 of the log's 1 launches ran EAGLE3 steps 1 topk 1 draft 2, the server "
                                          "benchmarked EAGLE3 steps 3 topk 1 draft 4")

    log.write_text(launch_line(3, 1, 4, dict_form=dict_form) + records + launch_line(3, 1, 4, "eagle3") + records)
    same = check_against_production(_run(requests, chain3), [str(log)], [prompt])
    assert same.configuration == "same" and same.requests == 20
    assert same.configuration_note == ("the log's server_args show the configuration benchmarked (EAGLE3 steps 3 "
                                       "topk 1 draft 4)")

    log.write_text(launch_line(3, 1, 4) + records + launch_line(3, 4, 8) + records)  # a restart with a tree
    assert check_against_production(_run(requests, chain3), [str(log)], [prompt]).configuration == "differs"


def test_a_launch_is_compared_on_what_both_sides_say(tmp_path):
    """A benchmarked server that did not report its algorithm is compared on the fields it did report; a launch
    without speculation is never the benchmarked (speculating) server."""
    prompt = Prompt(id="q", text="Tell me a story.")
    requests = [RequestResult(index=i, prompt_id="q", ok=True, completion_tokens=100, spec_verify_ct=40,
                              prompt_tokens=50, prompt_hash=prompt.prompt_hash) for i in range(20)]
    unsaid = Speculative(num_steps=3, eagle_topk=1, num_draft_tokens=4)
    log = tmp_path / "server.log"
    records = "".join(finish_line(f"r{i}", 100, 60) for i in range(10))
    log.write_text(launch_line(3, 1, 4) + records)
    same = check_against_production(_run(requests, unsaid), [str(log)], [prompt])
    assert same.configuration == "same", same.configuration_note
    assert same.configuration_note.endswith("(speculation steps 3 topk 1 draft 4)")

    log.write_text("[2026-12-01 09:00:00] server_args=ServerArgs(model_path='/m', speculative_algorithm=None, "
                   "speculative_num_steps=None, speculative_eagle_topk=None, speculative_num_draft_tokens=None)\n"
                   + records)
    plain = check_against_production(_run(requests, unsaid), [str(log)], [prompt])
    assert plain.configuration == "differs" and "launches ran no speculation" in plain.configuration_note


def test_a_launch_of_other_weights_differs_by_the_last_part_of_their_path(tmp_path):
    """A launch of the benchmarked shape over another draft (or target) differs; the same folder mounted elsewhere,
    or given with a trailing slash, is the same weights; a path in the log is shown without its control bytes."""
    prompt = Prompt(id="q", text="Tell me a story.")
    requests = [RequestResult(index=i, prompt_id="q", ok=True, completion_tokens=100, spec_verify_ct=40,
                              prompt_tokens=50, prompt_hash=prompt.prompt_hash) for i in range(20)]
    chain3 = Speculative(algorithm="EAGLE3", num_steps=3, eagle_topk=1, num_draft_tokens=4,
                         draft_model_path="/ckpt/eagle3-head-v2")
    run = _run(requests, chain3)
    run.server.model_path = "/models/target-70b"
    log = tmp_path / "server.log"
    records = "".join(finish_line(f"r{i}", 100, 60) for i in range(10))

    def launched(target: str, draft: str) -> str:
        return launch_line(3, 1, 4).replace("model_path='/m'", f"model_path='{target}'").replace("'/d'", f"'{draft}'")

    log.write_text(launched("/mnt/weights/target-70b/", "/ckpt/eagle3-head-v1") + records)
    check = check_against_production(run, [str(log)], [prompt])
    assert check.configuration == "differs"
    assert check.configuration_note == ("1 of the log's 1 launches served draft weights eagle3-head-v1, the server "
                                        "benchmarked eagle3-head-v2")

    log.write_text(launched("/models/target-8b", "/ckpt/eagle3-head-v2") + records)
    check = check_against_production(run, [str(log)], [prompt])
    assert check.configuration_note == ("1 of the log's 1 launches served target weights target-8b, the server "
                                        "benchmarked target-70b")

    log.write_text(launched("/mnt/weights/target-70b/", "/other/mount/eagle3-head-v2/") + records)
    same = check_against_production(run, [str(log)], [prompt])
    assert same.configuration == "same", same.configuration_note

    log.write_text(launched("/models/target-70b", "/ckpt/head\x1b[2J") + records)
    hostile = check_against_production(run, [str(log)], [prompt])
    assert hostile.configuration == "differs" and "head\\x1b[2J" in hostile.configuration_note
    assert "\x1b" not in hostile.configuration_note

    log.write_text(launch_line(3, 1, 4, dict_form=True) + records)  # 0.5.23's dict form: its model_path read too
    assert check_against_production(run, [str(log)], [prompt]).configuration_note == (
        "1 of the log's 1 launches served target weights m, the server benchmarked target-70b")
