"""The emulator's pure parts: tqdm frames against the real logs, the speed model, flags and speculative rules."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from specmon.emulator.launch_args import (
    SpeculativeArgsError,
    capture_batch_sizes,
    parse_launch_args,
    public_args,
)
from specmon.emulator.sglang_log import tqdm_frame
from specmon.emulator.speed_model import SpecShape, SpeedModel, TextModel, acceptance_rng

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
FRAME = re.compile(
    r"^(?P<head>(?:(?P<desc>.+?): )?\s*\d+%(?:\|[^|]*\|| Completed \|) (?P<n>\d+)/(?P<total>\d+)) \[(?P<timing>[^\]]*)\]$"
)


def real_frames() -> list[str]:
    frames = []
    for name in ("h200-0.5.16-plain-ready.log", "h200-0.5.16-standalone-ready.log"):
        text = (LOGS / name).read_bytes().decode()
        frames += [f for f in re.split(r"[\r\n]", text) if FRAME.match(f)]
    return frames


def test_tqdm_frames_render_like_the_real_logs():
    frames = real_frames()
    assert len(frames) > 100
    for frame in frames:
        match = FRAME.match(frame)
        n, total = int(match["n"]), int(match["total"])
        ours = tqdm_frame(match["desc"] or "", n, total, 1.0, shards_style="Completed" in frame)
        assert FRAME.match(ours)["head"] == match["head"], frame


def test_tqdm_timing_matches_tqdm():
    real = "Capturing batches (bs=1 avail_mem=110.71 GB): 100%|██████████| 4/4 [00:00<00:00, 26.43it/s]"
    assert tqdm_frame("Capturing batches (bs=1 avail_mem=110.71 GB)", 4, 4, 4 / 26.43) == real
    slow = tqdm_frame("Capturing num tokens (num_tokens=8192 avail_mem=96.96 GB)", 1, 58, 57.78)
    assert slow.endswith("|▏         | 1/58 [00:57<54:53, 57.78s/it]")
    assert tqdm_frame("", 0, 58, 0.0) == "  0%|          | 0/58 [00:00<?, ?it/s]"


@pytest.mark.parametrize(
    ("shape", "low", "high"),
    [(SpecShape(), 85, 95), (SpecShape(3, 1, 4), 150, 250), (SpecShape(4, 1, 5), 150, 250)],
)
def test_calibrated_single_stream_speed(shape, low, high):
    assert low < SpeedModel(shape, 0.75).expected_tokens_per_s() < high


@pytest.mark.parametrize("p", [0.7, 0.75, 0.8])
def test_good_presets_accept_2_5_to_3_and_beat_16_draft_tokens(p):
    sixteen = SpeedModel(SpecShape(15, 1, 16), p)
    for shape in (SpecShape(4, 1, 5), SpecShape(5, 4, 8), SpecShape(9, 1, 10)):
        model = SpeedModel(shape, p)
        assert 2.4 <= model.expected_accept_length() <= 3.2
        assert model.expected_tokens_per_s() > sixteen.expected_tokens_per_s()
        assert model.step_seconds(8) > model.step_seconds(1) * 1.2  # concurrency slows steps
        assert model.expected_tokens_per_s() / SpeedModel(SpecShape(), p).expected_tokens_per_s() > 1.5


@pytest.mark.parametrize("shape", [SpecShape(4, 1, 5), SpecShape(5, 4, 8), SpecShape(9, 1, 10)])
def test_the_verify_cost_grows_with_batch_and_draft_tokens_so_speculation_loses_at_high_load(shape):
    speculative, plain = SpeedModel(shape, 0.75), SpeedModel(SpecShape(), 0.75)
    speedups = [speculative.expected_tokens_per_s(b) / plain.expected_tokens_per_s(b) for b in (1, 4, 32)]
    assert speedups[0] > speedups[1] > speedups[2] and speedups[0] > 1.5 and speedups[2] < 1


def test_draws_converge_to_the_expected_accept_length():
    model = SpeedModel(SpecShape(3, 1, 4), 0.75)
    rng = random.Random(7)
    draws = [model.draw_accepted(rng) for _ in range(20000)]
    assert max(draws) == 3 and min(draws) == 0
    assert 1 + sum(draws) / len(draws) == pytest.approx(model.expected_accept_length(), abs=0.03)
    assert SpeedModel(SpecShape(3, 1, 4), 0.0).expected_accept_length() == 1.0


def test_text_is_a_function_of_the_prompt_only():
    a, b = TextModel("same prompt"), TextModel("same prompt")
    assert [a.token_id(i) for i in range(50)] == [b.token_id(i) for i in range(50)]
    assert [TextModel("other").token_id(i) for i in range(50)] != [a.token_id(i) for i in range(50)]
    sampled = TextModel("same prompt", temperature=0.8, sample_seed=1)
    assert [sampled.token_id(i) for i in range(50)] != [a.token_id(i) for i in range(50)]
    assert acceptance_rng("x").random() == acceptance_rng("x").random()


def test_speculative_rules():
    auto = parse_launch_args(["--model-path", "/m", "--speculative-algorithm", "eagle3"]).server_args
    assert (auto["speculative_num_steps"], auto["speculative_eagle_topk"], auto["speculative_num_draft_tokens"]) == (
        5, 4, 8,
    )
    assert auto["max_running_requests"] == 48
    nextn = parse_launch_args(["--model-path", "/m", "--speculative-algorithm", "NEXTN"]).server_args
    assert nextn["speculative_algorithm"] == "EAGLE"
    ngram = parse_launch_args(["--model-path", "/m", "--speculative-algorithm", "ngram"]).server_args
    assert (ngram["speculative_eagle_topk"], ngram["speculative_num_draft_tokens"]) == (10, 12)
    mine = parse_launch_args(
        ["--model-path", "/m", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
         "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8", "--max-running-requests", "8"]
    )
    assert mine.server_args["speculative_num_draft_tokens"] == 8 and mine.server_args["max_running_requests"] == 8
    assert mine.pre_log == []
    with pytest.raises(SpeculativeArgsError) as raised:
        parse_launch_args(["--model-path", "/m", "--speculative-algorithm", "EAGLE3", "--speculative-eagle-topk", "2"])
    assert raised.value.traceback_text.endswith("AssertionError\n")
    with pytest.raises(SpeculativeArgsError) as unknown:
        parse_launch_args(["--model-path", "/m", "--speculative-algorithm", "EAGLE9"])
    assert str(unknown.value) == "ValueError: Unknown speculative algorithm name: EAGLE9"


def test_flags_aliases_and_emulator_options():
    config = parse_launch_args(
        ["--model", "/m", "--tp", "4", "--port", "31000", "--cuda-graph-max-bs", "16", "--enable-metrics",
         "--emulator-speed", "5", "--emulator-accept-prob", "0.6", "--emulator-fail", "not-enough-memory"]
    )
    args, options = config.server_args, config.options
    assert args["model_path"] == "/m" and args["tp_size"] == 4 and args["enable_metrics"] is True
    assert args["cuda_graph_max_bs_decode"] == 16
    assert args["cuda_graph_config"]["decode"]["bs"] == capture_batch_sizes(16, False) == [1, 2, 4, 8, 12, 16]
    assert (options.gpus, options.gpu_port, options.speed, options.accept_prob) == (4, 31001, 5.0, 0.6)
    assert options.fail == "not-enough-memory"
    assert any("'--cuda-graph-max-bs' is deprecated" in text for _, text in config.pre_log)
    plain = parse_launch_args(["--model-path", "/m"]).server_args
    assert plain["enable_metrics"] is False and plain["port"] == 30000 and plain["speculative_algorithm"] is None


def test_public_args_mask_the_keys_that_are_set_and_leave_the_args_alone():
    args = {"api_key": "s3cret-key", "admin_api_key": None, "port": 30000}
    assert public_args(args) == {"api_key": "***", "admin_api_key": None, "port": 30000}
    assert args["api_key"] == "s3cret-key"


def test_the_gpu_side_port_binds_loopback_whatever_the_host():
    from specmon.emulator.gpus import GpuEndpoint, SimulatedGpus

    endpoint = GpuEndpoint(0, SimulatedGpus(1))
    try:
        assert endpoint.server_address[0] == "127.0.0.1"
    finally:
        endpoint.server_close()


def test_emulate_help_lists_the_emulators_own_flags_first():
    done = subprocess.run([sys.executable, "-m", "specmon", "emulate", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("usage: specmon emulate [EMULATOR FLAGS] <SGLang flags>")
    assert out.index("--emulator-fail {oom-during-capture") < out.index("usage: sglang serve") < out.index("--model-path")
