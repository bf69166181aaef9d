"""The preflight against real SGLang sources (pip-installed without dependencies) and real 0.5.16 failures."""

from __future__ import annotations

import json
import re
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.sglang_installs import VERSIONS, install

from specmon.gpu.model import GpuSnapshot
from specmon.gpu.nvml import NvmlSource
from specmon.launch.presets import Preset
from specmon.launch.supervisor import PreflightFailed, ServerSupervisor
from specmon.ports import free_port
from specmon.preflight import launch_check, run_preflight
from specmon.preflight.draft import examine_draft
from specmon.preflight.safetensors import encode_header, read_header
from specmon.sglang.flags import DATA_DIR
from specmon.sglang.rules import read_installed_rules, read_rules
from specmon.testing.fake_nvml import FakeGpu, FakeNvml

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "tests" / "fixtures" / "logs"
API = ROOT / "tests" / "fixtures" / "api"
HIDDEN, VOCAB, DRAFT_VOCAB = 8, 32, 16
LAYER_KEYS = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
              "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
              "input_layernorm.weight", "post_attention_layernorm.weight", "hidden_norm.weight")


@pytest.fixture(scope="session")
def sites(tmp_path_factory) -> dict[str, Path]:
    """sglang==X for each tested version, installed once per session under the pytest tmp root."""
    root = tmp_path_factory.getbasetemp() / "sglang-installs"
    root.mkdir(exist_ok=True)
    return {version: install(version, root) for version in VERSIONS}


def write_safetensors(path: Path, names: list[str]) -> None:
    tensors, offset = {}, 0
    for name in names:
        size = 8 if name in ("d2t", "t2d") else 4
        tensors[name] = {"dtype": "I64" if size == 8 else "F32", "shape": [1], "data_offsets": [offset, offset + size]}
        offset += size
    path.write_bytes(encode_header(tensors, {"format": "pt"}) + bytes(range(offset)))


def make_draft(root: Path, layer_prefix: str, arch: str = "LlamaForCausalLMEagle3") -> Path:
    draft = root / f"draft-{layer_prefix.strip('.') or 'none'}-{arch}"
    draft.mkdir()
    (draft / "config.json").write_text(json.dumps({
        "architectures": [arch], "model_type": "llama", "hidden_size": HIDDEN, "vocab_size": VOCAB,
        "draft_vocab_size": DRAFT_VOCAB,
        "num_hidden_layers": 1, "tie_word_embeddings": False}))
    names = [layer_prefix + key for key in LAYER_KEYS] + ["fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"]
    write_safetensors(draft / "model.safetensors", names)
    return draft


def make_target(root: Path) -> Path:
    target = root / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(
        {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN, "vocab_size": VOCAB}))
    write_safetensors(target / "model.safetensors", ["model.embed_tokens.weight"])
    return target


def preset_for(site: Path | None, target: Path | str, **args) -> Preset:
    env = {"PYTHONPATH": str(site)} if site else {}
    return Preset(name="t", launcher=("{python}", "-m", "sglang.launch_server"), env=env,
                  args={"model-path": str(target), "port": 39999, **args})


def no_gpus():
    return GpuSnapshot.unavailable("no GPUs in this test")


def codes(report) -> dict[str, str]:
    return {p.code: p.message + " " + (p.hint or "") for p in report.problems}


@pytest.mark.parametrize("version", VERSIONS)
def test_rules_read_from_each_real_source_are_the_shipped_rules(sites, version):
    data = read_rules(sites[version] / "sglang")
    assert data == json.loads((DATA_DIR / f"rules-{version}.json").read_text())
    assert data["speculative"]["all_or_none"] and data["speculative"]["topk1_sets_draft_tokens"]
    assert data["speculative"]["draft_tree_topk"]  # where torch.topk picks the draft tokens from the tree


def test_the_launchers_sglang_is_found_without_importing_it(sites, tmp_path):
    target = make_target(tmp_path)
    for version in ("0.4.6.post5", "0.5.23"):
        report = run_preflight(preset_for(sites[version], target), gpus=no_gpus())
        assert report.sglang.version == version
        assert report.sglang.source == "package source"
        assert report.sglang.package_dir == str(sites[version] / "sglang")


def test_unknown_flag_predicts_the_real_0_5_16_argparse_failure(sites, tmp_path):
    real = (LOGS / "h200-0.5.16-unrecognized-num-speculative-tokens.log").read_text()
    assert "unrecognized arguments: --num-speculative-tokens 16" in real
    target = make_target(tmp_path)
    for version in ("0.5.16", "0.5.9"):
        report = run_preflight(preset_for(sites[version], target, **{"num-speculative-tokens": 16}), gpus=no_gpus())
        assert not report.ok
        problem = next(p for p in report.problems if p.code == "unknown-flag")
        assert problem.flag == "--num-speculative-tokens"
        assert problem.hint == "did you mean --speculative-num-draft-tokens?"


def test_flag_removed_in_the_newest_version_is_named(sites, tmp_path):
    report = run_preflight(preset_for(sites["0.5.23"], make_target(tmp_path), **{"cuda-graph-max-bs": 8}),
                           gpus=no_gpus())
    message = codes(report)["unknown-flag"]
    assert "exists in SGLang 0.4.6.post5, 0.5.9, 0.5.16" in message


def test_bad_values_are_checked_against_type_and_choices(sites, tmp_path):
    report = run_preflight(preset_for(sites["0.5.9"], make_target(tmp_path), **{
        "tp-size": "eight", "speculative-algorithm": "EAGLE2"}), gpus=no_gpus())
    bad = [p.message for p in report.problems if p.code == "bad-value"]
    assert any("invalid int value: 'eight'" in m for m in bad)
    assert any("invalid choice: 'EAGLE2'" in m for m in bad)


def test_draft_tokens_without_steps_predicts_the_real_assertion(sites, tmp_path):
    real = (LOGS / "h200-0.5.16-spec-args-assertion.log").read_text()
    frame = re.search(r'File "[^"]*/(sglang/srt/arg_groups/speculative_hook\.py)", line (\d+), in _handle_eagle_family',
                      real)
    assert frame and real.rstrip().endswith("AssertionError")
    draft = make_draft(tmp_path, "midlayer.")
    preset = preset_for(sites["0.5.16"], make_target(tmp_path), **{
        "speculative-algorithm": "EAGLE3", "speculative-draft-model-path": str(draft),
        "speculative-num-draft-tokens": 16})
    report = run_preflight(preset, gpus=no_gpus())
    message = codes(report)["spec-args-incomplete"]
    where = re.search(r"\((srt/arg_groups/speculative_hook\.py):(\d+)\)", message)
    assert where and "sglang/" + where.group(1) == frame.group(1)
    assert abs(int(where.group(2)) - int(frame.group(2))) <= 3  # the assert's first line vs the traceback's
    assert "AssertionError" in message


def test_topk_1_shows_what_really_runs(sites, tmp_path):
    served = json.loads((API / "h200-0.5.16-topk1-server-info.json").read_text())
    draft = make_draft(tmp_path, "midlayer.")
    preset = preset_for(sites["0.5.16"], make_target(tmp_path), **{
        "speculative-algorithm": "EAGLE3", "speculative-draft-model-path": str(draft),
        "speculative-num-steps": 1, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 16})
    report = run_preflight(preset, gpus=no_gpus())
    assert report.ok
    assert report.effective["speculative-num-draft-tokens"] == served["speculative_num_draft_tokens"] == 2
    assert "spec-draft-tokens-rewritten" in codes(report)


@pytest.mark.parametrize("version", ["0.5.9", "0.5.16"])
def test_eagle_algorithm_with_an_eagle3_draft_is_an_error(sites, tmp_path, version):
    draft = make_draft(tmp_path, "midlayer.")
    preset = preset_for(sites[version], make_target(tmp_path), **{
        "speculative-algorithm": "EAGLE", "speculative-draft-model-path": str(draft)})
    report = run_preflight(preset, gpus=no_gpus())
    assert "target's embedding and head" in codes(report)["algorithm-draft-mismatch"]
    other = make_draft(tmp_path, "midlayer.", arch="LlamaForCausalLMEagle")
    report = run_preflight(preset_for(sites[version], tmp_path / "target", **{
        "speculative-algorithm": "EAGLE3", "speculative-draft-model-path": str(other)}), gpus=no_gpus())
    assert "algorithm-draft-mismatch" in codes(report)


# (version, layer prefix) -> problem code, None when the version loads every key
KEY_OUTCOMES = {
    ("0.4.6.post5", "midlayer."): None, ("0.4.6.post5", "layers.0."): "draft-keys-crash",
    ("0.5.9", "midlayer."): None, ("0.5.9", "layers.0."): "draft-keys-dropped", ("0.5.9", "blocks.0."): "draft-keys-dropped",
    ("0.5.16", "midlayer."): None, ("0.5.16", "layers.0."): None, ("0.5.16", "blocks.0."): "draft-keys-dropped",
    ("0.5.23", "layers.0."): None, ("0.5.23", "blocks.0."): "draft-keys-dropped",
}


@pytest.mark.parametrize(("version", "prefix"), sorted(KEY_OUTCOMES))
def test_draft_keys_against_each_versions_loader(sites, tmp_path, version, prefix):
    draft = make_draft(tmp_path, prefix)
    report = examine_draft(draft, read_installed_rules(sites[version] / "sglang"), make_target(tmp_path))
    found = {p.code for p in report.problems if p.severity == "error"}
    expected = KEY_OUTCOMES[(version, prefix)]
    assert found == ({expected} if expected else set()), report.problems
    if expected == "draft-keys-dropped":
        assert len(report.outcome.dropped) == len(LAYER_KEYS)
        assert any("hidden_norm" in name for name in report.outcome.unloaded)


def test_real_0_5_16_logs_agree_with_the_doctor(sites, tmp_path):
    """0.5.16 served both renamed drafts without a word; only the blocks.0 one is a problem (random draft)."""
    for name in ("layers0", "unknown-names"):
        log = (LOGS / f"h200-0.5.16-eagle3-draft-keys-{name}.log").read_text()
        assert "type=LlamaForCausalLMEagle3" in log and "fired up and ready" in log
        assert "Traceback" not in log and "not found" not in log
    rules = read_installed_rules(sites["0.5.16"] / "sglang")
    assert not examine_draft(make_draft(tmp_path, "layers.0."), rules).problems
    assert {p.code for p in examine_draft(make_draft(tmp_path, "blocks.0."), rules).problems} == {"draft-keys-dropped"}


@pytest.mark.parametrize("damage", ["huge-length", "bad-json", "truncated-data", "short"])
def test_hostile_safetensors_give_a_problem_and_exit_1(tmp_path, damage):
    draft = make_draft(tmp_path, "midlayer.")
    shard = draft / "model.safetensors"
    data = shard.read_bytes()
    if damage == "huge-length":
        shard.write_bytes(struct.pack("<Q", 2**62) + data[8:])
    elif damage == "bad-json":
        shard.write_bytes(data[:8] + b"{" * struct.unpack("<Q", data[:8])[0] + data[8 + struct.unpack("<Q", data[:8])[0]:])
    elif damage == "truncated-data":
        shard.write_bytes(data[:-10])
    else:
        shard.write_bytes(data[:5])
    done = subprocess.run([sys.executable, "-m", "specmon", "doctor", str(draft), "--json"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    problems = json.loads(done.stdout)["problems"]
    assert any(p["code"] == "draft-shard-unreadable" for p in problems)


def test_malformed_config_json_is_a_problem(tmp_path):
    draft = make_draft(tmp_path, "midlayer.")
    (draft / "config.json").write_text("{not json")
    done = subprocess.run([sys.executable, "-m", "specmon", "doctor", str(draft)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "draft-config" in done.stdout


def test_fix_draft_keys_writes_a_checked_copy_and_never_touches_src(sites, tmp_path):
    src = make_draft(tmp_path, "layers.0.")
    before = {p.name: p.read_bytes() for p in src.iterdir()}
    dst = tmp_path / "fixed"
    done = subprocess.run([sys.executable, "-m", "specmon", "fix-draft-keys", str(src), str(dst)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "layers.0.self_attn.q_proj.weight -> midlayer.self_attn.q_proj.weight" in done.stdout
    assert f"{len(LAYER_KEYS)} keys renamed" in done.stdout
    assert {p.name: p.read_bytes() for p in src.iterdir()} == before
    assert (dst / "config.json").read_bytes() == before["config.json"]
    old, new = read_header(src / "model.safetensors"), read_header(dst / "model.safetensors")
    assert before["model.safetensors"][old.data_start:] == (dst / "model.safetensors").read_bytes()[new.data_start:]
    assert [new.tensors[n] for n in new.tensors] == [old.tensors[n] for n in old.tensors]
    report = examine_draft(dst, read_installed_rules(sites["0.5.9"] / "sglang"))
    assert not report.problems and len(report.outcome.loaded) == len(LAYER_KEYS) + 4
    again = subprocess.run([sys.executable, "-m", "specmon", "fix-draft-keys", str(src), str(dst)],
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "already exists" in again.stderr


def test_a_taken_port_is_an_error_naming_its_holder(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        report = run_preflight(preset_for(None, make_target(tmp_path)), port=port, gpus=no_gpus())
    message = codes(report)["port-in-use"]
    assert f"port {port}" in message and "pid" in message


def test_gpus_memory_and_pcie_topology(tmp_path):
    busy = FakeNvml([FakeGpu(used_mib=100_000, nvlink=False, processes=[(4242, 100_000 * 1024 * 1024)])
                     for _ in range(8)])
    snapshot = NvmlSource(busy, pcie="off").read()
    preset = preset_for(None, make_target(tmp_path), **{"tp-size": 8, "mem-fraction-static": 0.85})
    report = run_preflight(preset, gpus=snapshot)
    assert "pid 4242" in codes(report)["gpu-memory"]
    assert "more than 2 PCIe-only GPUs" in codes(report)["custom-all-reduce-off"]
    report = run_preflight(preset_for(None, tmp_path / "target", **{"tp-size": 16}), gpus=snapshot)
    assert "gpus-too-few" in codes(report)


def test_check_preset_json_is_fast_and_exits_1_on_error(tmp_path):
    presets = tmp_path / "presets"
    presets.mkdir()
    (presets / "typo.toml").write_text(
        'extends = "demo-eagle3-16"\n[server.args]\nnum-speculative-tokens = 16\n')
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "specmon", "check", "typo", "--presets", str(presets), "--json"],
                          capture_output=True, text=True, timeout=60)
    elapsed = time.perf_counter() - started
    assert done.returncode == 1, done.stderr
    out = json.loads(done.stdout)
    assert set(out) >= {"ok", "preset", "sglang", "effective", "problems"}
    assert out["sglang"]["version"] == "0.5.16" and out["sglang"]["source"] == "shipped table"
    assert out["effective"]["speculative-num-draft-tokens"] == 16
    assert {p["code"] for p in out["problems"]} == {"unknown-flag"}
    assert out["elapsed_s"] < 2.0  # the preflight itself; the interpreter's start-up is the busy host's
    assert elapsed < 30.0


def test_the_supervisor_refuses_to_launch_a_preset_that_fails_preflight(tmp_path):
    bad = Preset(name="demo-bad", launcher=("{python}", "-m", "specmon.emulator"),
                 args={"model-path": "demo/x", "speculative-algorithm": "EAGLE3",
                       "speculative-draft-model-path": "demo/d", "speculative-num-draft-tokens": 16,
                       "port": free_port()})
    supervisor = ServerSupervisor(bad, tmp_path / "run.log", preflight=launch_check)
    with pytest.raises(PreflightFailed, match="without --speculative-num-steps"):
        supervisor.start()
    assert supervisor.pid is None and not (tmp_path / "run.log").exists()
    assert supervisor.last_preflight is not None and not supervisor.last_preflight.ok


def _with_sglang(site: Path) -> dict[str, str]:
    """The environment of a user whose `python3` sees the SGLang installed in `site`."""
    import os

    return {**os.environ, "PYTHONPATH": str(site)}


@pytest.mark.parametrize("how", ["python3 sees it", "--preset"])
def test_fix_draft_keys_checks_the_copy_against_the_installed_sglang(sites, tmp_path, how):
    """A layers.0 copy loads on the newest shipped SGLang but 0.5.9 drops every layer key: when 0.5.9 is what is
    installed, the copy is checked against 0.5.9, as the doctor checks, and fails."""
    src = make_draft(tmp_path, "midlayer.")
    args = ["fix-draft-keys", str(src), str(tmp_path / "fixed"), "--to", "layers.0"]
    env = _with_sglang(sites["0.5.9"])
    if how == "--preset":
        presets = tmp_path / "presets"
        presets.mkdir()
        (presets / "old.toml").write_text(
            f'[server]\nlauncher = ["python3", "-m", "sglang.launch_server"]\n[server.env]\nPYTHONPATH = '
            f'"{sites["0.5.9"]}"\n[server.args]\nmodel-path = "{make_target(tmp_path)}"\n')
        args += ["--preset", "old", "--presets", str(presets)]
        env.pop("PYTHONPATH")
    done = subprocess.run([sys.executable, "-m", "specmon", *args], capture_output=True, text=True, timeout=120,
                          env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    checked = [line for line in done.stdout.splitlines() if line.startswith("doctor (")]
    assert len(checked) == 1 and checked[0].startswith("doctor (SGLang 0.5.9, package source): "), done.stdout
    assert "silently drops" in checked[0]
    doctor = subprocess.run([sys.executable, "-m", "specmon", "doctor", str(tmp_path / "fixed"), *args[5:]],
                            capture_output=True, text=True, timeout=120, env=env)
    assert doctor.returncode == 1 and "checked against SGLang 0.5.9 (package source)" in doctor.stdout, doctor.stdout


def test_fix_draft_keys_without_an_installed_sglang_says_it_checked_shipped_rules(tmp_path):
    import os

    env = {**os.environ, "PATH": str(tmp_path / "no-python")}  # no python3 to ask
    src = make_draft(tmp_path, "layers.0.")
    done = subprocess.run([sys.executable, "-m", "specmon", "fix-draft-keys", str(src), str(tmp_path / "fixed")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "note: no installed SGLang found" in done.stdout
    assert [line.split(":")[0] for line in done.stdout.splitlines() if line.startswith("doctor (")] == [
        "doctor (SGLang 0.5.9 rules)", "doctor (SGLang 0.5.23 rules)"]


@pytest.mark.parametrize("version", VERSIONS)
def test_what_each_real_source_captures_for_an_eagle3_head(sites, version):
    """Read from each version's models (llama.py's set_eagle3_layers_to_capture and its kin): the default
    [2, L // 2, L - 3] (0.5.16 captured [2, 3, 3] on the trained 6-layer target), given ids + 1 since 0.5.x
    (0.4.6 takes none), and a multimodal wrapper captures as its language model (Kimi-K2.5: DeepSeek's rule)."""
    from specmon.sglang.captures import capture_rule

    data = read_rules(sites[version] / "sglang")["eagle3_captures"]
    llama = capture_rule(data, "LlamaForCausalLM")
    assert llama is not None and llama.where.startswith("srt/models/llama.py:")
    assert llama.captured(None, 6) == ([2, 3, 3], "default")
    assert capture_rule(data, "MistralForCausalLM") == llama  # a subclass in another file inherits it
    if version == "0.4.6.post5":
        assert llama.captured([1, 3, 4], 6) == ([2, 3, 3], "default")
        return
    assert llama.captured([1, 3, 4], 6) == ([2, 4, 5], "given")
    if version in ("0.5.16", "0.5.23"):
        kimi = capture_rule(data, "KimiK25ForConditionalGeneration")
        assert kimi is not None and kimi.where.startswith("srt/models/deepseek_v2.py:")
        assert kimi.captured([2, 30, 59], 61) == ([2, 30, 59], "given")  # as is unless the first id is 1
