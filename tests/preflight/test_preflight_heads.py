"""An EAGLE-3 head's config as SGLang reads it, and the target hidden states its fc takes, against what real SGLang
0.5.16 did with the trained head (tests/fixtures/trained-eagle3/README.md): the doctor refuses what SGLang refuses
or crashes on, with the cause and the fix, and says every check it cannot make."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specmon.launch.presets import Preset
from specmon.preflight import run_preflight
from specmon.preflight.draft import examine_draft
from specmon.preflight.safetensors import encode_header
from specmon.sglang.rules import load_shipped_rules

HEAD = Path(__file__).parents[1] / "fixtures" / "trained-eagle3"
RULES = load_shipped_rules("0.5.16")
SGLANG_CONFIG = json.loads((HEAD / "config.json").read_text())
SPECULATORS_CONFIG = json.loads((HEAD / "speculators-config.json").read_text())
TARGET_CONFIG = json.loads((HEAD / "target-config.json").read_text())


def write_tensors(path: Path, tensors: dict[str, dict]) -> None:
    """A safetensors file with these names, dtypes and shapes, and 4 bytes of data each (headers are all the
    doctor reads)."""
    header, offset = {}, 0
    for name, entry in tensors.items():
        header[name] = {**entry, "data_offsets": [offset, offset + 4]}
        offset += 4
    path.write_bytes(encode_header(header, {"format": "pt"}) + bytes(offset))


def head(root: Path, config: dict, name: str = "eagle3", fc_inputs: int = 3) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    tensors = json.loads((HEAD / "tensors.json").read_text())
    tensors["fc.weight"] = {**tensors["fc.weight"], "shape": [384, 384 * fc_inputs]}
    write_tensors(folder / "model.safetensors", tensors)
    return folder


def target(root: Path, config: dict | None = None) -> Path:
    folder = root / "target"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config or TARGET_CONFIG))
    write_tensors(folder / "model.safetensors", {"model.embed_tokens.weight": {"dtype": "BF16", "shape": [4096, 384]}})
    return folder


def found(report) -> dict[str, str]:
    return {p.code: f"{p.severity}: {p.message} || {p.hint}" for p in report.problems}


def without_eagle_config() -> dict:
    return {k: v for k, v in SGLANG_CONFIG.items() if k != "eagle_config"}


def test_the_head_that_real_sglang_served_passes_and_its_captures_are_said(tmp_path):
    report = examine_draft(head(tmp_path, SGLANG_CONFIG), RULES, target(tmp_path))
    assert not report.problems, report.problems
    said = " ".join(report.notes)
    assert "3 distinct, as fc takes" in said and "[2, 4, 5]" in said and "layer ids [1, 3, 4]" in said


def test_a_head_without_eagle_config_is_refused_as_real_0_5_16_crashed_on_it(tmp_path):
    """SGLang 0.5.16 used [2, 3, 3] on this 6-layer target, captured 2 states for the 3-way fc, and crashed on
    its warmup request after loading everything."""
    report = examine_draft(head(tmp_path, without_eagle_config()), RULES, target(tmp_path))
    problem = found(report)["draft-captures"]
    assert problem.startswith("error: ") and "[2, 3, 3]" in problem and "2 distinct hidden states" in problem
    assert "takes 3" in problem and "warmup request" in problem
    assert "eagle_config.eagle_aux_hidden_state_layer_ids" in problem.split("||")[1]


def _sglang_captures(ids: list[int] | None, layers: int, fc_inputs: int) -> bool:
    """Whether SGLang 0.5.16 serves a Llama target of `layers` with this head, replayed from its source: fc is
    built for len(ids) (else 3) inputs and must match the weights; the target sets layers_to_capture (llama.py:
    set_eagle3_layers_to_capture) and its decoder loop appends hidden_states + residual before each layer in it
    (residual is None before layer 0: TypeError); the concatenation must be fc's width."""
    built = len(ids) if ids else 3
    to_capture = [2, layers // 2, layers - 3] if ids is None else [i + 1 for i in ids]
    if 0 in to_capture:
        return False
    captured = [i for i in range(layers) if i in to_capture]
    return built == fc_inputs and len(captured) == fc_inputs


CAPTURE_CASES = [(layers, ids, fc) for layers in (3, 4, 5, 6, 8, 32, 61)
                 for ids in (None, [1, 3, 4], [0, 1, 2], [1, 1, 4], [2, 2], [1, 2], [-1, 1, 2], [0, 1, 4],
                             [1, 4, 5], [1, 5, 30], [1, 28, 29], [1, 29, 30], [2, 30, 59], [2, 30, 60])
                 for fc in (2, 3)]


@pytest.mark.parametrize(("layers", "ids", "fc"), CAPTURE_CASES)
def test_a_head_is_refused_exactly_when_sglang_would_capture_other_than_its_fc_takes(tmp_path, layers, ids, fc):
    config = without_eagle_config()
    if ids is not None:
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": ids, "use_aux_hidden_state": True}
    report = examine_draft(head(tmp_path, config, fc_inputs=fc), RULES,
                           target(tmp_path, TARGET_CONFIG | {"num_hidden_layers": layers}))
    refused = {"draft-captures", "draft-fc-shape"} & set(found(report))
    assert bool(refused) != _sglang_captures(ids, layers, fc), (found(report), report.notes)


def test_top_level_layer_ids_are_not_what_sglang_captures_and_the_doctor_says_so(tmp_path):
    config = without_eagle_config() | {"eagle_aux_hidden_state_layer_ids": [1, 3, 4]}
    problem = found(examine_draft(head(tmp_path, config), RULES, target(tmp_path)))["draft-captures"]
    assert "which SGLang does not read for the target's captures" in problem


@pytest.mark.parametrize("ids", ["1,3,4", [1.0, 3, 4], [True, 3, 4], {"a": 1}])
def test_layer_ids_that_are_no_list_of_integers_are_an_error(tmp_path, ids):
    config = without_eagle_config() | {"eagle_config": {"eagle_aux_hidden_state_layer_ids": ids}}
    problem = found(examine_draft(head(tmp_path, config), RULES, target(tmp_path)))["draft-captures"]
    assert "not a list of layer numbers" in problem


def test_a_kimi_like_target_is_read_through_its_text_config(tmp_path):
    """A multimodal target keeps its sizes in text_config (as SGLang reads them): compared there, not skipped,
    and its wrapper captures as its language model does (KimiK25 -> DeepseekV2's rule)."""
    text = {k: TARGET_CONFIG[k] for k in ("hidden_size", "num_hidden_layers", "vocab_size")}
    kimi = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25", "text_config": text}
    report = examine_draft(head(tmp_path, SGLANG_CONFIG), RULES, target(tmp_path, kimi))
    assert not report.problems, report.problems
    assert any("srt/models/deepseek_v2.py" in note for note in report.notes), report.notes
    other = examine_draft(head(tmp_path, SGLANG_CONFIG, name="wide"), RULES,
                          target(tmp_path / "t2", kimi | {"text_config": text | {"hidden_size": 7168}}))
    assert "target hidden size 384, the target has 7168" in found(other)["draft-hidden-size"]


def test_the_speculators_config_is_refused_with_the_cause_and_a_command_that_fixes_it(tmp_path):
    draft = head(tmp_path, SPECULATORS_CONFIG)
    report = examine_draft(draft, RULES, target(tmp_path))
    problem = found(report)["draft-speculators-format"]
    assert problem.startswith("error: ") and "Should have a `model_type` key" in problem and "Eagle3Speculator" in problem
    assert "draft-config-unchecked" not in found(report)  # the sizes are read from transformer_layer_config
    fixed = tmp_path / "fixed"
    command = problem.split("|| ")[1].split(" (")[0].split()
    assert command[:2] == ["specmon", "fix-draft-keys"] and command[2] == str(draft)
    done = subprocess.run([sys.executable, "-m", "specmon", "fix-draft-keys", str(draft), str(fixed),
                           *command[4:], "--sglang-version", "0.5.16"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "config.json: the speculators library's, written as SGLang reads it" in done.stdout
    written = json.loads((fixed / "config.json").read_text())
    trainer_only = ("bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype")  # not in speculators' file
    assert {k: v for k, v in SGLANG_CONFIG.items() if k not in trainer_only} == {
        k: v for k, v in written.items() if k not in ("fc_norm", "norm_output")}
    assert not examine_draft(fixed, RULES, tmp_path / "target").problems
    assert json.loads((draft / "config.json").read_text()) == SPECULATORS_CONFIG  # SRC is never written


def test_a_speculators_config_of_another_width_is_still_compared(tmp_path):
    config = json.loads(json.dumps(SPECULATORS_CONFIG))
    config["transformer_layer_config"]["hidden_size"] = 512
    problems = found(examine_draft(head(tmp_path, config), RULES, target(tmp_path)))
    assert "target hidden size 512, the target has 384" in problems["draft-hidden-size"]


def test_a_speculators_option_sglang_lacks_is_not_converted_silently(tmp_path):
    draft = head(tmp_path, SPECULATORS_CONFIG | {"norm_before_residual": True})
    problem = found(examine_draft(draft, RULES, target(tmp_path)))["draft-speculators-format"]
    assert "norm_before_residual" in problem and "fix-draft-keys" not in problem
    done = subprocess.run([sys.executable, "-m", "specmon", "fix-draft-keys", str(draft), str(tmp_path / "fixed")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "norm_before_residual" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "fixed").exists()


@pytest.mark.parametrize("kind", ["eagle3_head", "model"])
def test_a_config_without_model_type_is_refused(tmp_path, kind):
    config = {k: v for k, v in SGLANG_CONFIG.items() if k != "model_type"}
    if kind == "model":
        config = {k: v for k, v in TARGET_CONFIG.items() if k != "model_type"}
    report = examine_draft(head(tmp_path, config), RULES, target(tmp_path), kind)
    assert "Should have a `model_type` key" in found(report)["draft-no-model-type"]


def test_every_check_the_doctor_cannot_make_is_said(tmp_path):
    alone = examine_draft(head(tmp_path, SGLANG_CONFIG), RULES)
    assert not alone.problems and any("not compared: no target" in note for note in alone.notes), alone.notes
    bare = {k: v for k, v in SGLANG_CONFIG.items() if k not in ("hidden_size", "vocab_size")}
    report = examine_draft(head(tmp_path, bare, name="bare"), RULES, target(tmp_path))
    unchecked = [p.message for p in report.problems if p.code == "draft-config-unchecked"]
    assert len(unchecked) == 2 and all("the draft's config.json gives none" in m for m in unchecked), report.problems
    no_layers = {k: v for k, v in TARGET_CONFIG.items() if k != "num_hidden_layers"}
    layerless = examine_draft(head(tmp_path, SGLANG_CONFIG, name="again"), RULES, target(tmp_path / "t", no_layers))
    assert any("captured target layers not checked" in note for note in layerless.notes), layerless.notes


def test_the_preflight_of_a_preset_refuses_the_head_before_the_load(tmp_path):
    """`specmon check PRESET` runs the same checks before a launch: a whole load saved."""
    draft, model = head(tmp_path, without_eagle_config()), target(tmp_path)
    preset = Preset(name="e3", launcher=("{python}", "-m", "sglang.launch_server"),
                    env={"PATH": os.environ.get("PATH", "")},
                    args={"model-path": str(model), "speculative-algorithm": "EAGLE3",
                          "speculative-draft-model-path": str(draft), "speculative-num-steps": 3,
                          "speculative-eagle-topk": 4, "speculative-num-draft-tokens": 16})
    report = run_preflight(preset, check_machine=False)
    assert not report.ok and "draft-captures" in {p.code for p in report.errors}, report.problems


def test_a_target_without_model_type_is_refused_by_the_preflight(tmp_path):
    model = target(tmp_path, {k: v for k, v in TARGET_CONFIG.items() if k != "model_type"})
    preset = Preset(name="t", launcher=("{python}", "-m", "sglang.launch_server"), args={"model-path": str(model)})
    assert "target-no-model-type" in {p.code for p in run_preflight(preset, check_machine=False).errors}


def test_the_capture_reader_follows_subclasses_wrappers_and_odd_layouts(tmp_path):
    """Multi-line signatures, CRLF lines, a subclass in another file and a wrapper that hands the capture to its
    language model, as SGLang's model files have them."""
    from specmon.sglang.captures import capture_rule, read_captures

    models = tmp_path / "sglang" / "srt" / "models"
    models.mkdir(parents=True)
    (models / "base.py").write_text(
        "class BaseForCausalLM(nn.Module):\r\n"
        "    def set_eagle3_layers_to_capture(\r\n"
        "        self, layer_ids: Optional[List[int]] = None\r\n"
        "    ) -> None:\r\n"
        "        if layer_ids is None:\r\n"
        "\r\n"
        "            num_layers = self.config.num_hidden_layers\r\n"
        "            self.model.layers_to_capture = [1, num_layers - 2]\r\n"
        "        else:\r\n"
        "            self.model.layers_to_capture = [val + 1 for val in layer_ids]\r\n", newline="")
    (models / "child.py").write_text("class ChildForCausalLM(base.BaseForCausalLM):\n    pass\n")
    (models / "wrapper.py").write_text(
        "class WrapForConditionalGeneration(nn.Module):\n"
        "    def __init__(self, config):\n"
        "        self.language_model = ChildForCausalLM(config)\n"
        "    def set_eagle3_layers_to_capture(self, layer_ids=None):\n"
        "        self.language_model.set_eagle3_layers_to_capture(layer_ids)\n")
    data = read_captures(tmp_path / "sglang")
    base = capture_rule(data, "BaseForCausalLM")
    assert base is not None and base.where == "srt/models/base.py:2"
    assert base.captured(None, 10) == ([1, 8], "default") and base.captured([0, 4], 10) == ([1, 5], "given")
    assert capture_rule(data, "ChildForCausalLM") == base == capture_rule(data, "WrapForConditionalGeneration")
