"""Every fraction, ratio and count a preset gives SGLang is checked against what it can be, and every hint that
works out a new value for one keeps it inside (`specmon.sglang.bounds`)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest

from specmon.launch.presets import Preset
from specmon.logs.errors import hint_for
from specmon.preflight import run_preflight
from specmon.sglang.bounds import BOUNDS, FRACTION, lowered_fraction
from specmon.sglang.flags import DATA_DIR, load_shipped, shipped_versions

_FRACTIONISH = re.compile(r"fraction|ratio|threshold|watermark|prob")
_SECONDS = re.compile(r"secs|seconds|\bms\b", re.IGNORECASE)


def _emulated(**args) -> Preset:
    return Preset(name="bounds", launcher=("{python}", "-m", "specmon.emulator"),
                  args={"model-path": "demo/x", **args})


def _problems(preset: Preset) -> dict[str, list[str]]:
    report = run_preflight(preset, check_machine=False)
    found: dict[str, list[str]] = {}
    for problem in report.problems:
        found.setdefault(problem.code, []).append(f"{problem.flag} {problem.message} {problem.hint}")
    return found


@pytest.mark.parametrize("version", shipped_versions())
def test_every_fraction_ratio_or_threshold_flag_of_every_shipped_version_is_bounded(version):
    """A float flag named as a share of something (not a time) has a bound: a new version's new one fails here."""
    table = json.loads((DATA_DIR / f"sglang-{version}.json").read_text())
    unbounded = [flag["option_strings"][0] for flag in table["flags"]
                 if flag["type"] == "float" and _FRACTIONISH.search(flag["dest"])
                 and not _SECONDS.search(flag["dest"] + " " + (flag["help"] or "")[:160])
                 and flag["option_strings"][0] not in BOUNDS]
    assert not unbounded


def _outside(bound) -> list[str]:
    values = ["nan", "inf", "-inf"]
    values.append(f"{bound.low:g}" if bound.low_open else f"{bound.low - 0.5:g}")
    if math.isfinite(bound.high):
        values.append(f"{bound.high:g}" if bound.high_open else f"{bound.high + 0.5:g}")
    return values


def _inside(bound) -> str:
    if math.isfinite(bound.high):
        return f"{(bound.low + bound.high) / 2:g}"
    return f"{bound.low + 1:g}"


BOUNDED_0_5_16 = [option for option in BOUNDS if load_shipped("0.5.16").get(option) is not None]


@pytest.mark.parametrize("option", BOUNDED_0_5_16)
def test_each_bounded_flag_refuses_values_outside_and_takes_one_inside(option):
    bound = BOUNDS[option]
    key = option.removeprefix("--")
    for text in _outside(bound):
        value: object = float(text) if text in ("nan", "inf", "-inf") else text
        found = _problems(_emulated(**{key: value}))
        refused = found.get("value-out-of-bounds", []) + found.get("bad-value", [])  # an int flag: argparse's own
        assert any(line.startswith(option) for line in refused), (text, found)
    found = _problems(_emulated(**{key: _inside(bound)}))
    assert not any(line.startswith(option) for line in found.get("value-out-of-bounds", [])), found


def test_every_float_flag_refuses_a_number_that_is_not_finite():
    """argparse's float() takes 'nan' and 'inf', and TOML has both: no float flag of SGLang means either."""
    table = load_shipped("0.5.16")
    floats = [flag for flag in table.flags if flag.type == "float" and flag.takes_value and flag.nargs is None
              and not flag.option.startswith("--speculative-") and flag.option not in BOUNDS]
    assert len(floats) > 5
    found = _problems(_emulated(**{flag.option.removeprefix("--"): math.nan for flag in floats}))
    named = {line.split()[0] for line in found.get("value-out-of-bounds", [])}
    assert named == {flag.option for flag in floats}


def test_check_refuses_mem_fraction_1_5_in_one_command(tmp_path):
    (tmp_path / "over.toml").write_text('extends = "demo-eagle3-16"\n[server.args]\nmem-fraction-static = 1.5\n')
    done = subprocess.run([sys.executable, "-m", "specmon", "check", "over", "--presets", str(tmp_path), "--json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stdout + done.stderr
    problems = json.loads(done.stdout)["problems"]
    assert [(p["code"], p["flag"]) for p in problems] == [("value-out-of-bounds", "--mem-fraction-static")]
    assert "(0, 1]" in problems[0]["message"] and problems[0]["hint"] == "give a value in (0, 1]"


FRACTIONS = [1.5, 1.0, 0.995, 0.85, 0.5, 0.2, 0.1, 0.06, 0.01, 0.001, 0.0, -0.3, math.nan, math.inf]
_ADVISED = re.compile(r"mem-fraction-static (?:\([^)]*?e\.g\. |is \S+, which is no fraction in \(0, 1\] of the GPU's "
                      r"memory: set it inside, e\.g\. )(-?[\d.]+)")


@pytest.mark.parametrize("now", FRACTIONS)
@pytest.mark.parametrize(("kind", "phase"), [("cuda_oom", "capture_target"), ("cuda_oom", "capture_draft"),
                                             ("cuda_oom", "attention_backend"), ("cuda_oom", None),
                                             ("not_enough_memory", "kv_cache")])
def test_every_advised_mem_fraction_is_a_fraction_and_goes_the_way_the_hint_says(kind, phase, now):
    message = f"Not enough memory. Current value: mem_fraction_static={now}" if kind == "not_enough_memory" else ""
    hint = hint_for(kind, message, phase, mem_fraction=now)
    advice = [float(v) for v in _ADVISED.findall(hint)]
    if phase in ("capture_target", "capture_draft") and FRACTION.contains(now) and now >= 0.01:
        assert advice, hint  # a value is worked out: the checks below see it
    for advised in advice:
        assert FRACTION.contains(advised), hint
        if "lower --mem-fraction-static" in hint and FRACTION.contains(now):
            assert advised < now, hint
    if not FRACTION.contains(now):
        assert "no fraction in (0, 1]" in hint, hint
        assert "lower --mem-fraction-static" not in hint and "raise --mem-fraction-static" not in hint, hint


@pytest.mark.parametrize("now", FRACTIONS)
def test_a_lowered_fraction_is_lower_and_still_a_fraction(now):
    lowered = lowered_fraction(now)
    if lowered is not None:
        assert FRACTION.contains(lowered) and lowered < now
    else:
        assert not FRACTION.contains(now) or now < 0.01


def _tree_offers(steps: int, topk: int) -> int:
    """The draft tree's candidates, built as SGLang's draft builds its score_list: the first step's (b, 1, topk)
    block, then one (b, topk, topk) block per later step, flattened (eagle_worker_v2.draft_forward)."""
    blocks = [[[0.0] * topk]] + [[[0.0] * topk for _ in range(topk)] for _ in range(steps - 1)]
    return sum(len(row) for block in blocks for row in block)


def _tree(steps: int, topk: int, draft: int) -> Preset:
    return _emulated(**{"speculative-algorithm": "EAGLE3", "speculative-draft-model-path": "demo/d",
                        "speculative-num-steps": steps, "speculative-eagle-topk": topk,
                        "speculative-num-draft-tokens": draft})


TREES = [(steps, topk, draft) for steps in (1, 2, 3, 5) for topk in (2, 3, 4, 8) for draft in (2, 4, 7, 8, 16, 37, 64)]


@pytest.mark.parametrize(("steps", "topk", "draft"), TREES)
def test_a_draft_tree_is_refused_exactly_when_it_offers_fewer_candidates_than_sglangs_topk_picks(steps, topk, draft):
    """torch.topk(score_list, draft - 1) raises 'selected index k out of range' when the tree holds fewer;
    the preflight and `specmon presets` (SpeculativeFlags.problems) say so on the same presets, and only there."""
    crashes = draft - 1 > _tree_offers(steps, topk)
    found = _problems(_tree(steps, topk, draft))
    assert ("spec-draft-tokens-too-many" in found) == crashes, found
    said = [p for p in _tree(steps, topk, draft).speculative.problems() if "draft tree" in p]
    assert bool(said) == crashes, said
    if crashes:
        advised = int(re.search(r"at most (\d+)", found["spec-draft-tokens-too-many"][0]).group(1))
        assert "spec-draft-tokens-too-many" not in _problems(_tree(steps, topk, advised))
        assert "spec-draft-tokens-too-many" in _problems(_tree(steps, topk, advised + 1))


def test_the_3x4_tree_with_16_draft_tokens_that_real_sglang_0_5_16_ran_passes():
    """Real SGLang 0.5.16 on the H200 served the trained EAGLE-3 head as a 3 x 4 tree with 16 draft tokens, with
    the best acceptance of its sweep (tau 2.01; shared/tools/sglang-h200/trained/eagle3/README.md); the
    preflight warned that it would crash (steps x topk + 1 = 13 < 16)."""
    report = run_preflight(_tree(3, 4, 16), check_machine=False)
    assert not [p for p in report.problems if p.code.startswith("spec-")], report.problems
    assert report.effective["speculative-num-draft-tokens"] == 16
    assert not _tree(3, 4, 16).speculative.problems()


@pytest.mark.parametrize("draft", [1, 2, 5])
def test_the_topk_1_hint_never_asks_for_fewer_than_one_step(draft):
    found = _problems(_tree(3, 1, draft))
    steps = [int(v) for v in re.findall(r"--speculative-num-steps (-?\d+)", " ".join(found.get(
        "spec-draft-tokens-rewritten", [])))]
    assert steps and all(value >= 1 for value in steps), found


@pytest.mark.parametrize(("key", "value", "says"), [
    ("emulator-accept-prob", 1.5, "must be within [0, 1]"), ("emulator-accept-prob", math.nan, "within [0, 1]"),
    ("emulator-speed", 0, "must be a finite number > 0"), ("emulator-speed", math.inf, "must be a finite number > 0"),
    ("emulator-speed", math.nan, "must be a finite number > 0"),
    ("emulator-decode-speed", -1, "must be a finite number > 0"), ("emulator-warmup-delay", math.nan, "not a finite number"),
    ("emulator-fail", "nope", "invalid choice"), ("emulator-gpus", "two", "invalid value"),
    ("emulator-oom-at-step-tokens", 0, "must be a whole number >= 1"),
    ("emulator-oom-at-step-tokens", "many", "invalid value"),
])
def test_an_emulator_presets_own_values_are_checked_by_the_emulators_parser(key, value, says):
    """A demo preset's fractions and speeds were skipped by the preflight, then refused at launch."""
    found = _problems(_emulated(**{key: value}))
    assert any(line.startswith(f"--{key}") and says in line for line in found.get("bad-value", [])), found
    assert not _problems(_emulated(**{key: {"emulator-fail": "oom-during-capture", "emulator-gpus": 2,
                                                      "emulator-oom-at-step-tokens": 8}.get(key, 0.5)}))
