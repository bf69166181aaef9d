"""The preflight per speculative algorithm, from each SGLang version's own source: EAGLE and EAGLE-3 heads (the
target's hidden size, d2t/t2d), a STANDALONE draft model of its own (the trained pair: any width, the target's
vocabulary and tokenizer), NGRAM (no draft), MTP/NEXTN, and the algorithms a version adds (DFLASH)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specmon.cli import main
from specmon.preflight import run_preflight
from specmon.preflight.draft import examine_draft
from specmon.sglang.rules import read_installed_rules
from tests.preflight.test_preflight import (
    codes,
    make_draft,
    make_target,
    no_gpus,
    preset_for,
    write_safetensors,
)
from tests.support.sglang_installs import VERSIONS, install

PAIR = Path(__file__).parents[1] / "fixtures" / "trained-pair"


@pytest.fixture(scope="session")
def sites(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.getbasetemp() / "sglang-installs"
    root.mkdir(exist_ok=True)
    return {version: install(version, root) for version in VERSIONS}


def trained_pair(root: Path) -> tuple[Path, Path]:
    """The trained pair's configs and tokenizer, and safetensors with its real tensor names (tiny tensors)."""
    keys = json.loads((PAIR / "keys.json").read_text())
    out = {}
    for side in ("target", "draft"):
        folder = root / side
        shutil.copytree(PAIR / side, folder)
        for shard in sorted(set(keys[side].values())):
            write_safetensors(folder / shard, [name for name, where in keys[side].items() if where == shard])
        out[side] = folder
    shutil.copy(PAIR / "target" / "tokenizer.json", out["draft"] / "tokenizer.json")  # the same file, byte for byte
    return out["target"], out["draft"]


def standalone(site: Path, target: Path, draft: Path, tokens: int = 16):
    return preset_for(site, target, **{
        "speculative-algorithm": "STANDALONE", "speculative-draft-model-path": str(draft),
        "speculative-num-steps": tokens - 1, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": tokens})


def errors(report) -> dict[str, str]:
    return {p.code: p.message for p in report.problems if p.severity == "error"}


@pytest.mark.parametrize("version", ["0.5.16", "0.5.23"])
def test_the_trained_standalone_pair_passes_whatever_its_width(sites, tmp_path, version):
    target, draft = trained_pair(tmp_path)
    assert json.loads((draft / "config.json").read_text())["hidden_size"] == 256  # the target is 384 wide
    for tokens in (16, 10, 5):
        report = run_preflight(standalone(sites[version], target, draft, tokens), gpus=no_gpus())
        assert report.ok, report.problems
        assert report.effective["draft-kind"] == "model"
        assert report.effective["speculative-num-draft-tokens"] == tokens
        assert any("give the target's token ids" in note for note in report.notes), report.notes


def test_a_standalone_draft_with_another_vocabulary_or_tokenizer_is_an_error(sites, tmp_path):
    target, draft = trained_pair(tmp_path)
    tokenizer = json.loads((draft / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.get)[10:12]
    vocab[first], vocab[second] = vocab[second], vocab[first]  # two ids swapped: same size, other ids
    (draft / "tokenizer.json").write_text(json.dumps(tokenizer))
    report = run_preflight(standalone(sites["0.5.16"], target, draft), gpus=no_gpus())
    assert "other token ids than the target's" in errors(report)["draft-tokenizer"]
    config = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps(config | {"vocab_size": 8192}))
    report = run_preflight(standalone(sites["0.5.16"], target, draft), gpus=no_gpus())
    assert "draft vocab_size 8192 differs from the target's 4096" in errors(report)["draft-vocab-size"]


def test_standalone_needs_a_draft_model_and_refuses_a_head(sites, tmp_path):
    target, _ = trained_pair(tmp_path)
    preset = preset_for(sites["0.5.16"], target, **{"speculative-algorithm": "STANDALONE",
                        "speculative-num-steps": 3, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 4})
    assert "STANDALONE loads a draft model of its own" in errors(run_preflight(preset, gpus=no_gpus()))[
        "draft-path-missing"]
    head = make_draft(tmp_path, "midlayer.")
    report = run_preflight(standalone(sites["0.5.16"], target, head, 4), gpus=no_gpus())
    assert "a head cannot run without the target's hidden states" in errors(report)["algorithm-draft-mismatch"]


@pytest.mark.parametrize(("algorithm", "arch"), [("EAGLE3", "LlamaForCausalLMEagle3"), ("EAGLE", "LlamaForCausalLMEagle")])
def test_eagle_heads_must_have_the_targets_hidden_size(sites, tmp_path, algorithm, arch):
    target, _ = trained_pair(tmp_path)  # 384 wide; make_draft's head is 8 wide
    head = make_draft(tmp_path, "midlayer.", arch=arch)
    config = json.loads((head / "config.json").read_text())
    (head / "config.json").write_text(json.dumps(config | {"vocab_size": 4096}))
    preset = preset_for(sites["0.5.16"], target, **{
        "speculative-algorithm": algorithm, "speculative-draft-model-path": str(head),
        "speculative-num-steps": 3, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 4})
    report = run_preflight(preset, gpus=no_gpus())
    assert "expects target hidden size 8, the target has 384" in errors(report)["draft-hidden-size"]
    assert report.effective["draft-kind"] == ("eagle3_head" if algorithm == "EAGLE3" else "eagle_head")


def test_an_eagle3_head_without_d2t_for_a_smaller_vocabulary_is_an_error(sites, tmp_path):
    head = make_draft(tmp_path, "midlayer.")
    write_safetensors(head / "model.safetensors", ["fc.weight", "norm.weight", "lm_head.weight"]
                      + [f"midlayer.{k}" for k in ("self_attn.q_proj.weight", "hidden_norm.weight")])
    report = examine_draft(head, read_installed_rules(sites["0.5.23"] / "sglang"), make_target(tmp_path), "eagle3_head")
    assert "draft tokens would map to the wrong target ids" in errors(report)["draft-no-d2t"]


@pytest.mark.parametrize("version", ["0.5.9", "0.5.16", "0.5.23"])
def test_ngram_loads_no_draft(sites, tmp_path, version):
    target, draft = trained_pair(tmp_path)
    report = run_preflight(preset_for(sites[version], target, **{"speculative-algorithm": "NGRAM"}), gpus=no_gpus())
    assert report.ok and report.effective["draft-kind"] == "none", report.problems
    report = run_preflight(preset_for(sites[version], target, **{
        "speculative-algorithm": "NGRAM", "speculative-draft-model-path": str(draft)}), gpus=no_gpus())
    assert report.ok and "ignores --speculative-draft-model-path" in codes(report)["draft-path-unused"]


def test_ngram_is_unknown_before_sglang_had_it(sites, tmp_path):
    target, _ = trained_pair(tmp_path)
    report = run_preflight(preset_for(sites["0.4.6.post5"], target, **{"speculative-algorithm": "NGRAM"}),
                           gpus=no_gpus())
    assert "invalid choice" in codes(report)["bad-value"] or "unknown-algorithm" in codes(report)


def test_nextn_on_an_mtp_target_needs_no_draft_path(sites, tmp_path):
    target = make_target(tmp_path)
    config = json.loads((target / "config.json").read_text())
    (target / "config.json").write_text(json.dumps(config | {"architectures": ["DeepseekV3ForCausalLM"]}))
    preset = preset_for(sites["0.5.16"], target, **{"speculative-algorithm": "NEXTN", "speculative-num-steps": 1,
                        "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 2})
    report = run_preflight(preset, gpus=no_gpus())
    assert report.ok and report.effective["draft-kind"] == "mtp", report.problems


def test_dflash_of_0516_needs_its_own_draft_checkpoint_of_any_width(sites, tmp_path):
    target, draft = trained_pair(tmp_path)
    report = run_preflight(preset_for(sites["0.5.16"], target, **{"speculative-algorithm": "DFLASH"}),
                           gpus=no_gpus())
    assert "DFLASH loads a DFLASH draft checkpoint" in errors(report)["draft-path-missing"]
    report = run_preflight(preset_for(sites["0.5.16"], target, **{
        "speculative-algorithm": "DFLASH", "speculative-draft-model-path": str(draft)}), gpus=no_gpus())
    assert report.effective["draft-kind"] == "own" and "draft-hidden-size" not in codes(report)


KINDS = {
    "0.4.6.post5": {"EAGLE": "eagle_head", "EAGLE3": "eagle3_head", "NEXTN": "mtp"},
    "0.5.9": {"EAGLE": "eagle_head", "EAGLE3": "eagle3_head", "STANDALONE": "model", "NGRAM": "none", "NEXTN": "mtp"},
    "0.5.16": {"DFLASH": "own", "DSPARK": "own", "EAGLE": "eagle_head", "EAGLE3": "eagle3_head",
               "FROZEN_KV_MTP": "mtp", "STANDALONE": "model", "NGRAM": "none", "NEXTN": "mtp"},
}


@pytest.mark.parametrize("version", sorted(KINDS))
def test_each_versions_algorithms_and_draft_kinds_come_from_its_own_source(sites, version):
    assert dict(read_installed_rules(sites[version] / "sglang").data["algorithms"]) == KINDS[version]


def test_the_doctor_checks_the_trained_draft_as_a_model_of_its_own(tmp_path, capsys):
    target, draft = trained_pair(tmp_path)
    assert main(["doctor", str(draft), "--target", str(target), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] and data["kind"] == "model" and data["keys"] == 21
